#!/usr/bin/env bash
# bench_dp.sh [ROUNDS] [STEPS]
#
# Data parallelism on this machine: the benchmark model (vocab 512, dim
# 256, 4 layers, seq 128, batch 8, fp32, AdamW), LoRA r=8 on q,k,v,o and
# full fine-tuning, trained
#   - by one process on 1 and on 2 threads,
#   - by 2 ranks of 1 thread each under mpirun (4 rows each), with the
#     gradient sums after the backward pass (--overlap=false) and during it
#     (--overlap, 4 MiB buckets and 1 MiB buckets), unbound (--bind-to
#     none) and bound to a core each (mpirun's default).
# The configurations alternate within each round; the table shows each
# one's median over ROUNDS rounds (default 5) of STEPS timed steps
# (default 10): tokens/s, ms per step, and per step the time the step
# waited for its gradient sums after the backward pass and the time the
# sums took in all. Needs Open MPI (apt-get install openmpi-bin libopenmpi3).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
steps=${2:-10}
go build -o bin/mixtune ./cmd/mixtune
mpirun=(mpirun)
if [[ $(id -u) == 0 ]]; then
	mpirun+=(--allow-run-as-root)
fi
results=$(mktemp)
trap 'rm -f "$results"' EXIT
run() { # NAME ADAPTER COMMAND...
	local name=$1 adapter=$2
	shift 2
	local out
	if out=$("$@" --adapter "$adapter" --steps "$steps" --json 2>/dev/null | tail -1); then
		echo "{\"config\": \"$name\", \"a\": \"$adapter\"} $out" >>"$results"
	else
		echo "failed: $*" >&2
	fi
}
for round in $(seq "$rounds"); do
	echo "round $round of $rounds (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	for a in lora none; do
		run "1 process × 1 thread" "$a" bin/mixtune bench --threads 1
		run "1 process × 2 threads" "$a" bin/mixtune bench --threads 2
		run "2 ranks × 1 thread, sums after backward" "$a" "${mpirun[@]}" --bind-to none -np 2 bin/mixtune bench --threads 1 --overlap=false
		run "2 ranks × 1 thread, overlapped (4 MiB buckets)" "$a" "${mpirun[@]}" --bind-to none -np 2 bin/mixtune bench --threads 1
		run "2 ranks × 1 thread, overlapped (1 MiB buckets)" "$a" "${mpirun[@]}" --bind-to none -np 2 bin/mixtune bench --threads 1 --bucket-mb 1
		run "2 ranks × 1 thread, bound to a core each, overlapped" "$a" "${mpirun[@]}" -np 2 bin/mixtune bench --threads 1
	done
done
python3 - "$results" <<'PY'
import json, statistics, sys
rows = {}
order = []
for line in open(sys.argv[1]):
    head, body = line.split("} ", 1)
    h, d = json.loads(head + "}"), json.loads(body)
    key = (h["a"], h["config"])
    if key not in rows:
        rows[key] = []
        order.append(key)
    rows[key].append(d)
print("| adapter | configuration | tokens/s | ms/step | waiting for sums, ms/step | summing, ms/step | runs |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for key in order:
    ds = rows[key]
    med = lambda f: statistics.median(d.get(f, 0) for d in ds)
    a = "LoRA r=8" if key[0] == "lora" else "full"
    comm = "-" if not ds[0].get("ranks") else f"{med('allreduce_ms'):.1f}"
    busy = "-" if not ds[0].get("ranks") else f"{med('allreduce_busy_ms'):.1f}"
    print(f"| {a} | {key[1]} | {med('tokens_per_s'):.0f} | {med('ms_per_step'):.0f} | {comm} | {busy} | {len(ds)} |")
PY
