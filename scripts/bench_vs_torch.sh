#!/usr/bin/env bash
# bench_vs_torch.sh [STEPS] [ROUNDS]
#
# mixtune against PyTorch (../shared/bench/torch_peer.py) in one sitting:
# LoRA r=8 on q,k,v,o, AdamW, in fp32 and in bf16 (mixtune: --precision
# bf16 --base-dtype bf16; PyTorch: torch.autocast on the CPU), on three
# shapes:
#   bench   vocab 512, dim 256, 4 layers, 8 heads, FFN 688, seq 128, batch 8
#   mid     vocab 8192, dim 512, 8 layers, 8 heads, FFN 1376, seq 256, batch 4
#   smollm2 vocab 49152, dim 576, 30 layers, 9 heads, FFN 1536, seq 512, batch 1
#           (SmolLM2-135M's sizes with full multi-head attention: the peer
#           has no grouped-query attention)
# mixtune runs on its native backend (what a machine without native
# libraries runs) and, when they load, on oneDNN (libdnnl.so.2) and
# OpenBLAS (libopenblas.so.0) too. The runs
# alternate within each round (default 2 rounds of STEPS=5 timed steps);
# the table shows each one's best tokens/s and its peak RSS. PyTorch and
# OpenBLAS are installed with apt-get when absent (the script says so);
# without PyTorch the table has mixtune's columns only.
#
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for every run: some
# machines set them, forcing OpenBLAS (PyTorch's, and mixtune's openblas
# backend) onto older kernels than users get. The script prints the
# OpenBLAS core each one used, and PyTorch's BLAS as torch.__config__
# reports it. PYTHON names the Python whose PyTorch is the peer (default
# /usr/bin/python3, Debian's); on a machine without Go, MIXTUNE names a
# mixtune binary built elsewhere (default: go build into bin/) and PEER
# the peer script (default ../shared/bench/torch_peer.py).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-5}
rounds=${2:-2}
peer=${PEER:-../shared/bench/torch_peer.py}
py=${PYTHON:-/usr/bin/python3}
for v in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; do
	if [ -n "${!v:-}" ]; then
		echo "unset $v (was ${!v}) for the PyTorch and OpenBLAS runs" >&2
	fi
	unset "$v"
done
if ! $py -c 'import torch' 2>/dev/null; then
	echo "PyTorch is not installed: apt-get install python3-torch libopenblas0-pthread" >&2
	if command -v apt-get >/dev/null && apt-get install -y -qq python3-torch libopenblas0-pthread >/dev/null 2>&1; then
		echo "installed python3-torch and libopenblas0-pthread" >&2
	else
		echo "could not install them: PyTorch is left out" >&2
	fi
fi
have_torch=false
if [ -f "$peer" ] && $py -c 'import torch' 2>/dev/null; then
	have_torch=true
fi
mt=${MIXTUNE:-bin/mixtune}
[ -n "${MIXTUNE:-}" ] || go build -o bin/mixtune ./cmd/mixtune
backends=(native)
for b in onednn openblas; do
	if j=$("$mt" bench --blas "$b" --steps 1 --warmup 0 --json 2>/dev/null | tail -1); then
		backends+=("$b")
		echo "mixtune $b: $(echo "$j" | sed -n 's/.*"backend": *"\([^"]*\)".*/\1/p')" >&2
	fi
done
if $have_torch; then
	$py - <<'PY' >&2 || true
import ctypes, re, torch
cfg = torch.__config__.show()
said = [l.strip(" -") for l in cfg.splitlines() if len(l) < 200 and re.search("BLAS|LAPACK|oneDNN|MKL", l)]
said += re.findall(r"(?:BLAS_INFO|LAPACK_INFO)=[^,\s]+", cfg)
print("PyTorch %s: %s" % (torch.__version__, "; ".join(said) or "no BLAS line in torch.__config__.show()"))
try:
    lib = ctypes.CDLL("libopenblas.so.0")
    lib.openblas_get_corename.restype = ctypes.c_char_p
    print("PyTorch's OpenBLAS (libopenblas.so.0), if it links it: core %s" % lib.openblas_get_corename().decode())
except (OSError, AttributeError) as e:
    print("no libopenblas.so.0 beside PyTorch (%s)" % e)
PY
fi
declare -A shape=(
	[bench]="--vocab 512 --dim 256 --layers 4 --heads 8"
	[mid]="--vocab 8192 --dim 512 --layers 8 --heads 8"
	[smollm2]="--vocab 49152 --dim 576 --layers 30 --heads 9"
)
declare -A ffn=([bench]=688 [mid]=1376 [smollm2]=1536)
declare -A seqbatch=([bench]="--seq 128 --batch 8" [mid]="--seq 256 --batch 4" [smollm2]="--seq 512 --batch 1")
results=$(mktemp)
trap 'rm -f "$results" "$results".*' EXIT
for round in $(seq "$rounds"); do
	echo "round $round of $rounds (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	for s in bench mid smollm2; do
		for mode in fp32 bf16; do
			for b in "${backends[@]}"; do
				extra=()
				[ "$mode" = bf16 ] && extra=(--precision bf16 --base-dtype bf16)
				out=$("$mt" bench ${shape[$s]} --ffn "${ffn[$s]}" ${seqbatch[$s]} --blas "$b" --steps "$steps" "${extra[@]}" --json 2>/dev/null | tail -1) || continue
				echo "{\"shape\": \"$s\", \"mode\": \"$mode\", \"who\": \"mixtune $b\"} $out" >>"$results"
			done
			if $have_torch; then
				/usr/bin/time -f '%M' -o "$results.rss" $py "$peer" ${shape[$s]} --hidden "${ffn[$s]}" ${seqbatch[$s]} \
					--steps "$steps" --adapters lora --modes "$mode" >"$results.out" 2>/dev/null || continue
				echo "{\"shape\": \"$s\", \"mode\": \"$mode\", \"who\": \"PyTorch\", \"rss_kb\": $(tail -1 "$results.rss")} $(tail -1 "$results.out")" >>"$results"
			fi
		done
	done
done
$py - "$results" <<'PY'
import json, sys
best, order = {}, []
for line in open(sys.argv[1]):
    head, body = line.split("} ", 1)
    h, d = json.loads(head + "}"), json.loads(body)
    rss = h["rss_kb"] * 1024 if "rss_kb" in h else d["peak_rss_bytes"]
    key = (h["shape"], h["mode"], h["who"])
    if key not in best:
        order.append(key)
    if key not in best or d["tokens_per_s"] > best[key][0]:
        best[key] = (d["tokens_per_s"], rss)
whos = [w for w in dict.fromkeys(k[2] for k in order)]
print("| shape | precision | " + " | ".join(f"{w} tok/s (peak RSS)" for w in whos) +
      "".join(f" | {w} / PyTorch" for w in whos if w != "PyTorch" and "PyTorch" in whos) + " |")
print("|" + " --- |" * (2 + len(whos) + sum(1 for w in whos if w != "PyTorch" and "PyTorch" in whos)))
for s, m in dict.fromkeys((k[0], k[1]) for k in order):
    cells = []
    for w in whos:
        v = best.get((s, m, w))
        cells.append(f"{v[0]:.0f} ({v[1] / 2**20:.0f} MiB)" if v else "-")
    torch = best.get((s, m, "PyTorch"))
    for w in whos:
        if w == "PyTorch" or "PyTorch" not in whos:
            continue
        v = best.get((s, m, w))
        cells.append(f"{v[0] / torch[0]:.2f}x" if v and torch else "-")
    print(f"| {s} | {m} | " + " | ".join(cells) + " |")
# where each mixtune backend's bf16 products ran (amp.bf16_matmul: auto
# decides per machine), from the bf16 runs' JSON
kernels = {}
for line in open(sys.argv[1]):
    head, body = line.split("} ", 1)
    h, d = json.loads(head + "}"), json.loads(body)
    if h["mode"] == "bf16" and d.get("bf16_kernel"):
        kernels.setdefault(h["who"], set()).add(d["bf16_kernel"])
for w, ks in kernels.items():
    for k in sorted(ks):
        print(f"{w} bf16 products: {k}")
PY
