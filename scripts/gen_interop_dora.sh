#!/usr/bin/env bash
# gen_interop_dora.sh: regenerates cmd/mixtune/testdata/interop/mixtune_dora,
# the DoRA adapter trained by mixtune that scripts/interop_check.py has PEFT
# load (beside gguf/testdata/quickstart_adapter, the quickstart's LoRA):
# configs/dora_quickstart.yaml cut to rank 4 and 20 steps, on the CPU. The
# run is deterministic (same recipe, seed and BLAS backend: the same bits
# whatever the thread count), so this writes the committed bytes again.
#
#   scripts/gen_interop_dora.sh    (from anywhere; needs Go)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go run ./cmd/mixtune train -c configs/dora_quickstart.yaml --set adapter.r=4 --set adapter.alpha=8 \
	--set train.steps=20 --set train.eval_every=0 --set schedule.warmup_steps=2 \
	--set task.eval_file= --set output_dir="$tmp/runs"
dest=cmd/mixtune/testdata/interop/mixtune_dora
mkdir -p "$dest"
cp "$tmp/runs/dora_quickstart/adapter/adapter_config.json" "$tmp/runs/dora_quickstart/adapter/adapter_model.safetensors" "$dest/"
echo "wrote $dest"
