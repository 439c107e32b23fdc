// Package tokenizer reads Hugging Face tokenizer.json files and encodes and
// decodes text exactly as the Hugging Face tokenizers library (the Rust crate,
// version 0.22) does: the same ids, the same offsets (as byte ranges of the
// input) and the same decoded strings.
//
// It covers the tokenizers of the models people fine-tune: byte-level BPE in
// the GPT-2 style (Llama 3, Qwen 2.5 and 3, SmolLM2, DeepSeek V3) and
// SentencePiece-style BPE with byte fallback (Llama 2, TinyLlama, Mistral,
// Gemma). The pipeline is Hugging Face's: added tokens are split out first
// (non-normalized ones on the raw text, normalized ones after the
// normalizer), then the normalizer, the pre-tokenizer, the BPE model and the
// post-processor run. Any construct the package does not implement (a model,
// normalizer, pre-tokenizer, decoder or post-processor type, or an option) is
// an error that names it and its JSON path when the file is parsed, never a
// silently different tokenization.
//
// Unicode data follow the library's, not Go's: normalization (NFC, NFKC,
// NFD, NFKD) uses the Unicode 9.0 tables of the crate the library
// normalizes with, and the character classes of the split patterns (\p{L},
// \p{N}, \s, \p{M}, \p{P}, \p{S}) are those of its Oniguruma, Unicode 16.0,
// as probed from the library itself. Patterns other than those of GPT-2,
// Llama 3, Qwen 2/3 and DeepSeek V3 run on github.com/dlclark/regexp2, with
// Go's Unicode 15.0 classes.
//
// Encode expects valid UTF-8. Invalid bytes are read the way Python's
// bytes.decode(errors="replace") and Rust's String::from_utf8_lossy read
// them: each maximal invalid subsequence becomes U+FFFD, which is then
// tokenized; the offsets of the tokens still index the caller's bytes.
//
// Parity with Hugging Face is proved by the fixtures in testdata, made by
// scripts/gen_tokenizer_fixtures.js with the Rust library's Node binding.
package tokenizer
