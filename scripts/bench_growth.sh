#!/usr/bin/env bash
# bench_growth.sh [OUT.jsonl]
#
# How a LoRA step's time and memory grow, with and without activation
# checkpointing (bench --checkpoint): LoRA r=8 on q,k,v,o, AdamW, bf16
# compute on a bf16 frozen base, batch 1, on mixtune's native backend (what
# a machine without native libraries runs; BLAS=onednn|auto picks another).
#   seq_len: SmolLM2-135M's shape (vocab 49152, dim 576, 30 layers, 9 heads,
#            3 key/value heads, FFN 1536) at 512, 1024, 2048 and 4096 tokens
#   size:    the bench, mid and SmolLM2 shapes and TinyLlama-1.1B's (vocab
#            32000, dim 2048, 22 layers, 32 heads, 4 key/value heads, FFN
#            5632) at 512 tokens
#   1.1B:    TinyLlama-1.1B's shape at 2048 tokens, and PyTorch at the same
#            shape (scripts/torch_llama_peer.py, torch.autocast bf16 on a
#            bf16 base, torch.utils.checkpoint) when /usr/bin/python3 has torch
# A run whose RSS passes $RSS_LIMIT_GB GiB (default 19) is stopped and shown
# as such, before the kernel's OOM killer takes it (or something else); a
# run the kernel kills anyway is shown as out of memory. Prints a markdown
# table; the raw JSON lines go to OUT.jsonl (default bench_growth.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench_growth.jsonl}
limit_gb=${RSS_LIMIT_GB:-19}
limit_kb=$(( limit_gb * 1024 * 1024 ))
blas=${BLAS:-native}
go build -o bin/mixtune ./cmd/mixtune
: >"$out"

smol="--vocab 49152 --dim 576 --layers 30 --heads 9 --kv-heads 3 --ffn 1536"
tiny="--vocab 32000 --dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632"
declare -A shape=(
	[bench]="--vocab 512 --dim 256 --layers 4 --heads 8 --ffn 688"
	[mid]="--vocab 8192 --dim 512 --layers 8 --heads 8 --ffn 1376"
	[smollm2]="$smol"
	[tinyllama]="$tiny"
)

# watch PID: stops it when its RSS passes the limit; prints "killed" then.
watch() {
	local pid=$1
	while kill -0 "$pid" 2>/dev/null; do
		rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
		if [ "${rss:-0}" -gt "$limit_kb" ]; then
			kill "$pid"
			echo killed
			return
		fi
		sleep 0.5
	done
}

# run TABLE NAME SEQ CKPT STEPS ARGS...: one mixtune measurement.
run() {
	local table=$1 name=$2 seq=$3 ckpt=$4 steps=$5
	shift 5
	echo "$table $name seq $seq checkpoint $ckpt (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	bin/mixtune bench "$@" --seq "$seq" --batch 1 --precision bf16 --base-dtype bf16 --blas "$blas" \
		--checkpoint="$ckpt" --steps "$steps" --warmup 1 --json >"$out.one" 2>/dev/null &
	local pid=$! verdict rc=0
	verdict=$(watch $pid)
	wait $pid || rc=$?
	if [ "$verdict" = killed ]; then
		echo "{\"table\": \"$table\", \"name\": \"$name\", \"seq\": $seq, \"checkpoint\": $ckpt, \"who\": \"mixtune\", \"killed_gb\": $limit_gb}" >>"$out"
	elif [ "$rc" -eq 137 ]; then
		echo "{\"table\": \"$table\", \"name\": \"$name\", \"seq\": $seq, \"checkpoint\": $ckpt, \"who\": \"mixtune\", \"oom\": true}" >>"$out"
	elif [ -s "$out.one" ]; then
		echo "{\"table\": \"$table\", \"name\": \"$name\", \"seq\": $seq, \"checkpoint\": $ckpt, \"who\": \"mixtune\", \"r\": $(tail -1 "$out.one")}" >>"$out"
	fi
}

for seq in 512 1024 2048 4096; do
	for ckpt in false true; do
		steps=2
		[ "$seq" -ge 2048 ] && steps=1
		run seq smollm2 "$seq" "$ckpt" "$steps" $smol
	done
done
for s in bench mid smollm2 tinyllama; do
	for ckpt in false true; do
		steps=3
		[ "$s" = tinyllama ] && steps=1
		run size "$s" 512 "$ckpt" "$steps" ${shape[$s]}
	done
done
for ckpt in true false; do
	run 1.1B tinyllama 2048 "$ckpt" 1 $tiny
done
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	echo "PyTorch tinyllama seq 2048 checkpoint true (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	/usr/bin/python3 scripts/torch_llama_peer.py $tiny --seq 2048 --batch 1 --mode bf16 --base-dtype bf16 \
		--checkpoint --steps 1 --warmup 1 >"$out.one" 2>/dev/null &
	pid=$!
	verdict=$(watch $pid)
	wait $pid || true
	if [ "$verdict" = killed ]; then
		echo "{\"table\": \"1.1B\", \"name\": \"tinyllama\", \"seq\": 2048, \"checkpoint\": true, \"who\": \"PyTorch\", \"killed_gb\": $limit_gb}" >>"$out"
	elif [ -s "$out.one" ]; then
		echo "{\"table\": \"1.1B\", \"name\": \"tinyllama\", \"seq\": 2048, \"checkpoint\": true, \"who\": \"PyTorch\", \"r\": $(tail -1 "$out.one")}" >>"$out"
	fi
fi
rm -f "$out.one"

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def cell(r):
    if "killed_gb" in r:
        return f"stopped above {r['killed_gb']} GiB"
    if r.get("oom"):
        return "killed by the kernel: out of memory"
    d = r["r"]
    rss = d.get("peak_rss_bytes", d.get("peak_rss_mib", 0) * 2**20)
    return f"{d['tokens_per_s']:.1f} tok/s, {rss / 2**30:.2f} GiB"
for table, title in [("seq", "SmolLM2-135M shape, by sequence length"), ("size", "by model size, 512 tokens"),
                     ("1.1B", "TinyLlama-1.1B shape, 2048 tokens")]:
    print(f"\n{title}:\n\n| {'seq_len' if table == 'seq' else 'model'} | who | without checkpointing | with checkpointing |\n| --- | --- | --- | --- |")
    keys = []
    for r in rows:
        k = (r["seq"] if table == "seq" else r["name"], r["who"])
        if r["table"] == table and k not in keys:
            keys.append(k)
    for k in keys:
        c = {r["checkpoint"]: cell(r) for r in rows if r["table"] == table and (r["seq"] if table == "seq" else r["name"], r["who"]) == k}
        print(f"| {k[0]} | {k[1]} | {c.get(False, '-')} | {c.get(True, '-')} |")
PY
