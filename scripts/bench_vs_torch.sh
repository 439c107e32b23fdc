#!/usr/bin/env bash
# bench_vs_torch.sh [STEPS]
#
# The benchmark model (vocab 512, dim 256, 4 layers, 8 heads, FFN 688,
# seq 128, batch 8, LoRA r=8 on q,k,v,o, fp32, AdamW) trained by mixtune on
# each matmul backend and by PyTorch (../shared/bench/torch_peer.py; needs
# Debian's python3-torch), one after the other in one sitting, each twice,
# best of two. Prints a markdown table of tokens/s, ms/step, peak memory and
# the ratio to PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-10}
go build -o bin/mixtune ./cmd/mixtune
peer=../shared/bench/torch_peer.py
results=$(mktemp)
for round in 1 2; do
	for b in openblas native gonum; do
		bin/mixtune bench --blas "$b" --steps "$steps" --json >>"$results" || true
	done
	if [ -f "$peer" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
		/usr/bin/time -f '{"peak_rss_kb": %M}' -o "$results.rss" \
			/usr/bin/python3 "$peer" --adapters lora --modes fp32 --steps "$steps" >>"$results.torch"
		paste -d' ' <(tail -1 "$results.torch") "$results.rss" >>"$results"
	fi
done
python3 - "$results" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    parts = line.strip().split('} {')
    d = json.loads(parts[0] + ('}' if len(parts) > 1 else ''))
    if len(parts) > 1:
        d.update(json.loads('{' + parts[1]))
        name, rss = "PyTorch " + d["peer"].split("-", 1)[1] + " (2 threads)", d["peak_rss_kb"] * 1024
    else:
        name, rss = "mixtune " + d["backend"].split(" (")[0], d["peak_rss_bytes"]
    tps = d["tokens_per_s"]
    if name not in best or tps > best[name][0]:
        best[name] = (tps, 1000 * d.get("step_s", d.get("ms_per_step", 0) / 1000), rss)
torch = next((v[0] for k, v in best.items() if k.startswith("PyTorch")), None)
print("| trainer | tokens/s | ms/step | peak RSS | vs PyTorch |")
print("| --- | --- | --- | --- | --- |")
for k, (tps, ms, rss) in sorted(best.items(), key=lambda kv: -kv[1][0]):
    ratio = f"{tps / torch:.2f}x" if torch else "-"
    print(f"| {k} | {tps:.0f} | {ms:.0f} | {rss / 2**20:.0f} MiB | {ratio} |")
PY
rm -f "$results" "$results.torch" "$results.rss"
