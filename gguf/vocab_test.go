package gguf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestByteVocab(t *testing.T) {
	v, err := ByteVocab(300)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Check(300); err != nil {
		t.Fatal(err)
	}
	// every byte its own one-rune token, distinct, in GPT-2's alphabet
	for b := 0; b < 256; b++ {
		if got := ByteLevelText(string([]byte{byte(b)})); v.Tokens[b] != got || len([]rune(got)) != 1 {
			t.Fatalf("byte %d is token %q, byte-level text %q", b, v.Tokens[b], got)
		}
	}
	if v.Tokens['A'] != "A" || v.Tokens[' '] != "Ġ" || v.Tokens['\n'] != "Ċ" {
		t.Fatalf("GPT-2 alphabet: A→%q, space→%q, newline→%q", v.Tokens['A'], v.Tokens[' '], v.Tokens['\n'])
	}
	if v.BOS != 256 || v.EOS != 257 || v.PAD != 258 || v.Types[256] != TokenControl || v.Tokens[299] != "[PAD299]" || v.Types[299] != TokenUnused {
		t.Fatalf("specials: %+v", v)
	}
	if v.Model != "gpt2" || len(v.Merges) != 0 || v.AddBOS == nil || !*v.AddBOS {
		t.Fatalf("model %s, %d merges, add_bos %v", v.Model, len(v.Merges), v.AddBOS)
	}
	kv := (&File{KV: v.KV()})
	if m, ok := kv.Get("tokenizer.ggml.merges").([]string); !ok || m == nil {
		t.Fatal("no tokenizer.ggml.merges key: llama.cpp refuses a gpt2 vocabulary without one")
	}
	if _, ok := kv.Get("tokenizer.ggml.token_type").([]int32); !ok {
		t.Fatal("token types must be int32 (llama.cpp checks the array type)")
	}
	if _, err := ByteVocab(40); err == nil || !strings.Contains(err.Error(), "only 40 ids") {
		t.Fatalf("a 40-id model got the byte vocabulary: %v", err)
	}
}

// writeTokenizer writes a tokenizer.json (and tokenizer_config.json when
// tc is not nil) into a new directory.
func writeTokenizer(t *testing.T, tj map[string]any, tc map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range map[string]any{"tokenizer.json": tj, "tokenizer_config.json": tc} {
		if v == nil {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const llama3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func byteLevelTokenizer(pre any) map[string]any {
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[ByteLevelText(string([]byte{byte(b)}))] = b
	}
	vocab["ĠĠ"] = 256
	vocab["a b"] = 257 // a token with a space in it (transformers ≥ 4.45 pairs)
	return map[string]any{
		"added_tokens": []map[string]any{
			{"id": 258, "content": "<|begin_of_text|>", "special": true},
			{"id": 259, "content": "<|eot_id|>", "special": true},
			{"id": 260, "content": "<think>", "special": false},
		},
		"normalizer":    nil,
		"pre_tokenizer": pre,
		"post_processor": map[string]any{"type": "Sequence", "processors": []any{
			map[string]any{"type": "ByteLevel"},
			map[string]any{"type": "TemplateProcessing", "single": []any{
				map[string]any{"SpecialToken": map[string]any{"id": "<|begin_of_text|>", "type_id": 0}},
				map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			}},
		}},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "byte_fallback": false,
			"merges": [][]string{{"Ġ", "Ġ"}, {"a", " b"}}},
	}
}

func TestLoadVocabByteLevel(t *testing.T) {
	llama3 := map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": llama3Regex}, "behavior": "Isolated"},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
	}}
	dir := writeTokenizer(t, byteLevelTokenizer(llama3), map[string]any{
		"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
		"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
	})
	v, err := LoadVocab(dir, 300, 1, 2, -1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != "gpt2" || v.Pre != "llama-bpe" {
		t.Fatalf("model %s pre %s, want gpt2 llama-bpe", v.Model, v.Pre)
	}
	if !slices.Equal(v.Merges, []string{"Ġ Ġ", "a Ġb"}) {
		t.Fatalf("merges %q: a space inside a pair is written as Ġ, as SpecialVocab writes it", v.Merges)
	}
	// ids from tokenizer_config's texts, not config.json's 1 and 2
	if v.BOS != 258 || v.EOS != 259 || v.PAD != -1 {
		t.Fatalf("bos %d eos %d pad %d", v.BOS, v.EOS, v.PAD)
	}
	if v.AddBOS == nil || !*v.AddBOS {
		t.Fatal("the post-processor adds <|begin_of_text|>: add_bos_token should be true")
	}
	if v.Types[258] != TokenControl || v.Types[260] != TokenUserDefined || v.Types[65] != TokenNormal || v.Types[299] != TokenUnused {
		t.Fatalf("types: %d %d %d %d", v.Types[258], v.Types[260], v.Types[65], v.Types[299])
	}
	if !strings.Contains(v.ChatTemplate, "m.content") {
		t.Fatalf("chat template %q", v.ChatTemplate)
	}

	qwen := strings.Replace(llama3Regex, `\p{N}{1,3}`, `\p{N}`, 1)
	for _, c := range []struct {
		pre  any
		want string
	}{
		{map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": qwen}},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}}}, "qwen2"},
		{map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Digits", "individual_digits": true},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}}}, "smollm"},
		{map[string]any{"type": "ByteLevel", "add_prefix_space": false}, "gpt-2"},
	} {
		v, err := LoadVocab(writeTokenizer(t, byteLevelTokenizer(c.pre), nil), 261, 258, 259, -1)
		if err != nil {
			t.Fatal(err)
		}
		if v.Pre != c.want {
			t.Errorf("pre-tokenizer %v named %s, want %s", c.pre, v.Pre, c.want)
		}
	}
}

func TestLoadVocabSentencePieceBPE(t *testing.T) {
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := 0; b < 256; b++ {
		vocab["<0x"+strings.ToUpper(string("0123456789abcdef"[b>>4]))+strings.ToUpper(string("0123456789abcdef"[b&15]))+">"] = 3 + b
	}
	for i, tok := range []string{"▁", "t", "h", "e", "th", "▁th", "▁the"} {
		vocab[tok] = 259 + i
	}
	tj := map[string]any{
		"added_tokens": []map[string]any{{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true}, {"id": 2, "content": "</s>", "special": true}},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}},
		"pre_tokenizer": nil,
		"decoder":       map[string]any{"type": "Sequence"},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "byte_fallback": true,
			"merges": []string{"t h", "▁ th", "▁th e"}},
	}
	v, err := LoadVocab(writeTokenizer(t, tj, map[string]any{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": true}), 266, 1, 2, -1)
	if err != nil {
		t.Fatal(err)
	}
	if v.Model != "llama" || v.Pre != "" || v.Merges != nil || v.AddSpacePrefix != nil {
		t.Fatalf("model %s pre %q merges %v add_space_prefix %v", v.Model, v.Pre, v.Merges, v.AddSpacePrefix)
	}
	if v.Types[3+0x41] != TokenByte || v.Types[1] != TokenControl || v.Types[259] != TokenNormal {
		t.Fatalf("types %d %d %d", v.Types[3+0x41], v.Types[1], v.Types[259])
	}
	// llama.cpp merges the bigram of highest score: the merge ranks, in order
	th, thx, the := v.Scores[vocab["th"]], v.Scores[vocab["▁th"]], v.Scores[vocab["▁the"]]
	if !(th > thx && thx > the && the > v.Scores[vocab["t"]]) {
		t.Fatalf("scores th %v ▁th %v ▁the %v t %v: want the merge order", th, thx, the, v.Scores[vocab["t"]])
	}
	if v.UNK != 0 || v.BOS != 1 || !*v.AddBOS {
		t.Fatalf("unk %d bos %d add_bos %v", v.UNK, v.BOS, *v.AddBOS)
	}
}

func TestLoadVocabRefusals(t *testing.T) {
	gpt2 := map[string]any{"type": "ByteLevel"}
	unigram := byteLevelTokenizer(gpt2)
	unigram["model"] = map[string]any{"type": "Unigram", "vocab": []any{}}
	oddRegex := map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}},
		map[string]any{"type": "ByteLevel", "use_regex": false}}}
	dup := byteLevelTokenizer(gpt2)
	dup["added_tokens"] = []map[string]any{{"id": 258, "content": "A", "special": true}}
	for _, c := range []struct {
		name  string
		tj    map[string]any
		vocab int
		want  string
	}{
		{"unigram", unigram, 261, `tokenizer model "Unigram" is not supported`},
		{"regex", byteLevelTokenizer(oddRegex), 261, `pre-tokenizer regex "\\w+" is not supported`},
		{"too small", byteLevelTokenizer(gpt2), 200, "token id 260 is outside the model's vocabulary (200 ids)"},
		{"duplicate", dup, 261, `are both "A"`},
	} {
		_, err := LoadVocab(writeTokenizer(t, c.tj, nil), c.vocab, 1, 2, -1)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tokenizer.json") {
			t.Errorf("%s: got %v, want an error naming tokenizer.json and %q", c.name, err, c.want)
		}
	}
}
