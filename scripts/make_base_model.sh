#!/usr/bin/env bash
# make_base_model.sh: produce models/tiny-byte, mixtune's shipped base model,
# from nothing but this repository.
#
#   scripts/make_base_model.sh            # ~35 min on 2 cores with OpenBLAS, longer without
#
# 1. regenerates the license-clean corpus (scripts/gendata; deterministic, so
#    the committed corpus/ is reproduced byte for byte),
# 2. pretrains a 3.0M-parameter Llama from random initialisation with mixtune
#    itself (configs/pretrain_tiny.yaml: full training, packed 128-token rows),
# 3. copies the result (config.json + bf16 model.safetensors) into
#    models/tiny-byte with the run's summary and metrics.
# Extra arguments are passed to `mixtune train`, e.g. --set train.steps=100.
set -euo pipefail
cd "$(dirname "$0")/.."

go run ./scripts/gendata -out .
go build -o bin/mixtune ./cmd/mixtune

out=runs/base-model-build
rm -rf "$out"
bin/mixtune train -c configs/pretrain_tiny.yaml --set output_dir=runs --set name=base-model-build "$@"

dst=models/tiny-byte
rm -rf "$dst.new"
mkdir -p "$dst.new"
cp "$out/model/config.json" "$out/model/model.safetensors" "$dst.new/"
cp "$out/summary.json" "$dst.new/training_summary.json"
cp "$out/metrics.jsonl" "$dst.new/training_metrics.jsonl"
cp configs/pretrain_tiny.yaml "$dst.new/training_recipe.yaml"
# the byte vocabulary as a tokenizer.json, with the ChatML template (the
# same ids as the byte tokenizer the model is pretrained with: see
# train.TestTinyByteTokenizerIsTheByteTokenizer)
cp tokenizer/testdata/tiny-byte/tokenizer.json tokenizer/testdata/tiny-byte/tokenizer_config.json "$dst.new/"
rm -rf "$dst"
mv "$dst.new" "$dst"
echo "wrote $dst"
