# sweep_lib.sh: shared by the sweep scripts (source it; not a command).
# A sweep trains several variants of one recipe into OUT/runs/<variant>,
# then writes OUT/results.md (a table from `mixtune compare`) and OUT/*.png
# (overlaid curves from `mixtune plot`). Every run is seeded, so running a
# sweep again gives the same losses and accuracies; only tokens/s and memory,
# which measure the machine, vary.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o bin/mixtune ./cmd/mixtune

sweep_out=""
sweep_runs=()

# sweep_begin OUT TITLE: start a sweep writing into OUT (emptied first).
sweep_begin() {
	sweep_out=$1
	rm -rf "$sweep_out/runs"
	mkdir -p "$sweep_out"
	printf '# %s\n\n' "$2" > "$sweep_out/results.md"
}

# sweep_run NAME RECIPE [--set ...]: train one variant.
sweep_run() {
	local name=$1 recipe=$2
	shift 2
	echo "== $name" >&2
	bin/mixtune train -c "$recipe" --set name="$name" --set output_dir="$sweep_out/runs" "$@"
	sweep_runs+=("$sweep_out/runs/$name")
}

# sweep_end: write the table and the plots.
sweep_end() {
	bin/mixtune compare "${sweep_runs[@]}" >> "$sweep_out/results.md"
	bin/mixtune plot --out "$sweep_out" "${sweep_runs[@]}" >/dev/null
	echo "wrote $sweep_out/results.md and $sweep_out/*.png" >&2
	cat "$sweep_out/results.md"
}
