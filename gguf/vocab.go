package gguf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mixtune/mixtune/internal/readlimit"
)

// The tokenizer in a GGUF file: llama.cpp tokenizes with what the file
// holds, so the export writes the model's own tokenizer as llama.cpp's
// converter does (convert_hf_to_gguf.py, conversion/base.py _set_vocab_gpt2
// and get_vocab_base; gguf-py/gguf/vocab.py SpecialVocab and LlamaHfVocab).

// Token types (gguf-py constants.py TokenType; llama.h llama_token_type).
const (
	TokenNormal      int32 = 1
	TokenUnknown     int32 = 2
	TokenControl     int32 = 3
	TokenUserDefined int32 = 4
	TokenUnused      int32 = 5
	TokenByte        int32 = 6
)

// Vocab is the tokenizer metadata of a GGUF file.
type Vocab struct {
	// Model is tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama"
	// (SentencePiece-style BPE with byte fallback).
	Model string
	// Pre is tokenizer.ggml.pre, the pre-tokenizer llama.cpp applies
	// before BPE ("llama-bpe", "qwen2", "smollm", ...); gpt2 only.
	Pre    string
	Tokens []string
	Types  []int32
	Scores []float32 // llama only
	Merges []string  // gpt2 only, "left right" in rank order
	// Special ids, -1 when absent.
	BOS, EOS, PAD, UNK, EOT int
	// AddBOS/AddEOS are tokenizer.ggml.add_bos_token/add_eos_token; nil
	// leaves llama.cpp's default for the tokenizer type.
	AddBOS, AddEOS *bool
	// AddSpacePrefix is tokenizer.ggml.add_space_prefix when set.
	AddSpacePrefix *bool
	ChatTemplate   string
	// Source says where the vocabulary came from, for messages.
	Source string
}

// KV is the vocabulary's metadata pairs, under gguf-py's key names
// (constants.py Keys.Tokenizer) with the types gguf_writer.py gives them.
func (v *Vocab) KV() []KV {
	kvs := []KV{{"tokenizer.ggml.model", v.Model}}
	if v.Pre != "" {
		kvs = append(kvs, KV{"tokenizer.ggml.pre", v.Pre})
	}
	kvs = append(kvs, KV{"tokenizer.ggml.tokens", v.Tokens})
	if v.Scores != nil {
		kvs = append(kvs, KV{"tokenizer.ggml.scores", v.Scores})
	}
	kvs = append(kvs, KV{"tokenizer.ggml.token_type", v.Types})
	if v.Model == "gpt2" {
		// llama.cpp requires the key for BPE even when there is no merge
		kvs = append(kvs, KV{"tokenizer.ggml.merges", append([]string{}, v.Merges...)})
	}
	for _, id := range []struct {
		key string
		id  int
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"eot", v.EOT}, {"unknown", v.UNK}, {"padding", v.PAD}} {
		if id.id >= 0 {
			kvs = append(kvs, KV{"tokenizer.ggml." + id.key + "_token_id", uint32(id.id)})
		}
	}
	if v.AddBOS != nil {
		kvs = append(kvs, KV{"tokenizer.ggml.add_bos_token", *v.AddBOS})
	}
	if v.AddEOS != nil {
		kvs = append(kvs, KV{"tokenizer.ggml.add_eos_token", *v.AddEOS})
	}
	if v.AddSpacePrefix != nil {
		kvs = append(kvs, KV{"tokenizer.ggml.add_space_prefix", *v.AddSpacePrefix})
	}
	if v.ChatTemplate != "" {
		kvs = append(kvs, KV{"tokenizer.chat_template", v.ChatTemplate})
	}
	return kvs
}

// Check validates the vocabulary against a model of vocabSize ids:
// llama.cpp sizes the embedding by the token list and asserts that the
// token texts are unique (llama-vocab.cpp: id_to_token.size() ==
// token_to_id.size()).
func (v *Vocab) Check(vocabSize int) error {
	if len(v.Tokens) != vocabSize {
		return fmt.Errorf("%s: the tokenizer has %d tokens but the model's embedding has %d rows; llama.cpp needs them equal", v.Source, len(v.Tokens), vocabSize)
	}
	if len(v.Types) != len(v.Tokens) || (v.Scores != nil && len(v.Scores) != len(v.Tokens)) {
		return fmt.Errorf("%s: token types or scores do not cover every token", v.Source)
	}
	seen := make(map[string]int, len(v.Tokens))
	for i, t := range v.Tokens {
		if t == "" {
			return fmt.Errorf("%s: token %d is empty", v.Source, i)
		}
		if j, ok := seen[t]; ok {
			return fmt.Errorf("%s: tokens %d and %d are both %q; llama.cpp needs unique token texts", v.Source, j, i, t)
		}
		seen[t] = i
	}
	for _, s := range []struct {
		name string
		id   int
	}{{"bos", v.BOS}, {"eos", v.EOS}, {"eot", v.EOT}, {"unk", v.UNK}, {"pad", v.PAD}} {
		if s.id >= len(v.Tokens) {
			return fmt.Errorf("%s: %s token id %d is outside the vocabulary (%d tokens)", v.Source, s.name, s.id, len(v.Tokens))
		}
	}
	return nil
}

// byteLevel is GPT-2's bytes_to_unicode: each byte as a printable rune, so
// that byte-level BPE tokens are text. Printable Latin-1 bytes stand for
// themselves; the others map to U+0100 upwards in byte order.
var byteLevel = func() [256]rune {
	var m [256]rune
	n := 0
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}()

// ByteLevelText is s's bytes in GPT-2's byte-level alphabet.
func ByteLevelText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteLevel[s[i]])
	}
	return b.String()
}

// ByteVocab is mixtune's byte tokenizer (data.ByteTokenizer: ids 0..255
// are bytes, 256 BOS, 257 EOS, 258 PAD) for a model of vocabSize ids.
//
// It is written as a byte-level BPE ("gpt2") with no merges: each token is
// one byte in GPT-2's byte-level alphabet, so llama.cpp's BPE tokenizer,
// which maps text to that alphabet before merging, gives exactly one id
// per byte, the byte's value, whatever the pre-tokenizer splits. A
// SentencePiece ("llama") vocabulary of <0xXX> tokens would not: llama.cpp
// turns spaces into U+2581 and adds a leading space before looking tokens
// up, so " " would become the three bytes of "▁". Ids past 258 are unused
// rows, named [PAD<id>] as convert_hf_to_gguf pads a vocabulary.
func ByteVocab(vocabSize int) (*Vocab, error) {
	const n = 259
	if vocabSize < n {
		return nil, fmt.Errorf("the model has no tokenizer.json, so it uses mixtune's byte tokenizer (259 ids), but its vocabulary has only %d ids; add the model's tokenizer.json", vocabSize)
	}
	v := &Vocab{Model: "gpt2", Pre: "default", BOS: 256, EOS: 257, PAD: 258, UNK: -1, EOT: -1, Source: "mixtune's byte tokenizer"}
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, string(byteLevel[b]))
		v.Types = append(v.Types, TokenNormal)
	}
	v.Tokens = append(v.Tokens, "<s>", "</s>", "<pad>")
	v.Types = append(v.Types, TokenControl, TokenControl, TokenControl)
	for i := n; i < vocabSize; i++ {
		v.Tokens = append(v.Tokens, fmt.Sprintf("[PAD%d]", i))
		v.Types = append(v.Types, TokenUnused)
	}
	yes := true
	v.AddBOS = &yes // mixtune starts every sequence with BOS
	return v, nil
}

// tokenizerJSON is the part of a Hugging Face tokenizer.json the export reads.
type tokenizerJSON struct {
	AddedTokens []struct {
		ID         int    `json:"id"`
		Content    string `json:"content"`
		Special    bool   `json:"special"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         struct {
		Type  string          `json:"type"`
		Vocab json.RawMessage `json:"vocab"` // BPE: token → id; other models differ

		Merges       json.RawMessage `json:"merges"`
		ByteFallback bool            `json:"byte_fallback"`
		IgnoreMerges bool            `json:"ignore_merges"`
	} `json:"model"`
}

// component is a normalizer, pre-tokenizer or decoder: a type, and a list
// of components when the type is Sequence.
type component struct {
	Type            string          `json:"type"`
	Pretokenizers   []component     `json:"pretokenizers"`
	Normalizers     []component     `json:"normalizers"`
	Decoders        []component     `json:"decoders"`
	Pattern         json.RawMessage `json:"pattern"`
	Behavior        string          `json:"behavior"`
	AddPrefixSpace  *bool           `json:"add_prefix_space"`
	UseRegex        *bool           `json:"use_regex"`
	IndividualDigit bool            `json:"individual_digits"`
	Content         string          `json:"content"`
	Prepend         string          `json:"prepend"`
	Replacement     string          `json:"replacement"`
}

// flatten lists a component and the members of its Sequences.
func (c component) flatten() []component {
	if c.Type != "Sequence" {
		return []component{c}
	}
	var out []component
	for _, l := range [][]component{c.Pretokenizers, c.Normalizers, c.Decoders} {
		for _, m := range l {
			out = append(out, m.flatten()...)
		}
	}
	return out
}

func parseComponent(raw json.RawMessage) ([]component, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, err
	}
	return c.flatten(), nil
}

// Pre-tokenizer regexes of tokenizer.json, as the models ship them, and
// the llama.cpp pre-tokenizer that implements each (llama-vocab.cpp
// llm_tokenizer_bpe: LLAMA3 for "llama-bpe", QWEN2 for "qwen2"; the
// converter's get_vocab_base_pre names them by hashing a tokenization,
// which needs transformers; the regex identifies them as well).
var preByRegex = map[string]string{
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`: "llama-bpe",
	`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`:      "qwen2",
}

// gpt2Pre names the llama.cpp pre-tokenizer equal to tokenizer.json's
// pre_tokenizer, or says why there is none.
func gpt2Pre(pre []component) (string, error) {
	var split, digits, byteLevelRegex, byteLevelNoRegex int
	var pattern string
	for _, c := range pre {
		switch c.Type {
		case "Split":
			var p struct {
				Regex string `json:"Regex"`
			}
			if err := json.Unmarshal(c.Pattern, &p); err != nil || p.Regex == "" {
				return "", fmt.Errorf("a Split pre-tokenizer without a regex pattern")
			}
			pattern = p.Regex
			split++
		case "Digits":
			if !c.IndividualDigit {
				return "", fmt.Errorf("a Digits pre-tokenizer without individual_digits")
			}
			digits++
		case "ByteLevel":
			if c.AddPrefixSpace != nil && *c.AddPrefixSpace {
				return "", fmt.Errorf("ByteLevel with add_prefix_space true")
			}
			if c.UseRegex == nil || *c.UseRegex {
				byteLevelRegex++
			} else {
				byteLevelNoRegex++
			}
		default:
			return "", fmt.Errorf("pre-tokenizer %s", c.Type)
		}
	}
	switch {
	case split == 1 && digits == 0 && byteLevelNoRegex == 1 && byteLevelRegex == 0:
		if name, ok := preByRegex[pattern]; ok {
			return name, nil
		}
		return "", fmt.Errorf("pre-tokenizer regex %q", pattern)
	case split == 0 && digits == 1 && byteLevelRegex == 1 && byteLevelNoRegex == 0:
		return "smollm", nil // Digits(individual) then GPT-2's ByteLevel regex: SmolLM, StarCoder
	case split == 0 && digits == 0 && byteLevelRegex == 1 && byteLevelNoRegex == 0:
		return "gpt-2", nil
	}
	return "", fmt.Errorf("this combination of pre-tokenizers")
}

// LoadVocab reads the tokenizer of the model in dir, for a model whose
// config is cfgVocab ids with bos/eos/pad ids from config.json: the
// directory's tokenizer.json, or without one mixtune's byte tokenizer (as
// mixtune itself tokenizes such a model). A tokenizer llama.cpp cannot
// reproduce is refused, naming what is unsupported.
func LoadVocab(dir string, vocabSize, bos, eos, pad int) (*Vocab, error) {
	path := filepath.Join(dir, "tokenizer.json")
	raw, err := readlimit.ReadFile(path, readlimit.TokenizerJSON)
	if errors.Is(err, os.ErrNotExist) {
		return ByteVocab(vocabSize)
	}
	if err != nil {
		return nil, err
	}
	var tj tokenizerJSON
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("%s: tokenizer model %q is not supported by GGUF export (it writes BPE tokenizers: byte-level, or SentencePiece-style with byte fallback)", path, tj.Model.Type)
	}
	var bpeVocab map[string]int
	if err := json.Unmarshal(tj.Model.Vocab, &bpeVocab); err != nil {
		return nil, fmt.Errorf("%s: model.vocab: %w", path, err)
	}
	v := &Vocab{BOS: -1, EOS: -1, PAD: -1, UNK: -1, EOT: -1, Source: path}
	maxID := -1
	for _, id := range bpeVocab {
		maxID = max(maxID, id)
	}
	for _, a := range tj.AddedTokens {
		if a.ID < 0 {
			return nil, fmt.Errorf("%s: added token %q has id %d", path, a.Content, a.ID)
		}
		maxID = max(maxID, a.ID)
	}
	if maxID >= vocabSize {
		return nil, fmt.Errorf("%s: token id %d is outside the model's vocabulary (%d ids)", path, maxID, vocabSize)
	}
	v.Tokens = make([]string, vocabSize)
	v.Types = make([]int32, vocabSize)
	for tok, id := range bpeVocab {
		if id < 0 {
			return nil, fmt.Errorf("%s: token %q has id %d", path, tok, id)
		}
		v.Tokens[id], v.Types[id] = tok, TokenNormal
	}
	pre, err := parseComponent(tj.PreTokenizer)
	if err != nil {
		return nil, fmt.Errorf("%s: pre_tokenizer: %w", path, err)
	}
	norm, err := parseComponent(tj.Normalizer)
	if err != nil {
		return nil, fmt.Errorf("%s: normalizer: %w", path, err)
	}
	merges, err := readMerges(tj.Model.Merges)
	if err != nil {
		return nil, fmt.Errorf("%s: model.merges: %w", path, err)
	}
	byteLevelPre := false
	for _, c := range pre {
		byteLevelPre = byteLevelPre || c.Type == "ByteLevel"
	}
	switch {
	case pureBytes(tj.Model.ByteFallback, pre, norm, merges, v.Tokens):
		// every text is its bytes, one token each (models/tiny-byte): as
		// a llama-type vocabulary llama.cpp would turn spaces into U+2581
		// and add one in front; as a gpt2 vocabulary of GPT-2's byte
		// characters with no merges it gives exactly one id per byte
		for b := range 256 {
			v.Tokens[b] = string(byteLevel[b])
		}
		v.Model, v.Pre = "gpt2", "default"
	case byteLevelPre:
		for _, n := range norm {
			// Qwen's NFC is the one normalizer allowed: llama.cpp does not
			// apply it, as its converter does not write it, so text already
			// in NFC (nearly all text) tokenizes the same
			if n.Type != "NFC" {
				return nil, fmt.Errorf("%s: a byte-level tokenizer with a %s normalizer is not supported by GGUF export", path, n.Type)
			}
		}
		name, err := gpt2Pre(pre)
		if err != nil {
			return nil, fmt.Errorf("%s: %v is not supported by GGUF export: llama.cpp has no pre-tokenizer known to match it", path, err)
		}
		v.Model, v.Pre, v.Merges = "gpt2", name, merges
	case tj.Model.ByteFallback:
		if err := spmShape(pre, norm); err != nil {
			return nil, fmt.Errorf("%s: %v is not supported by GGUF export", path, err)
		}
		v.Model = "llama"
		v.Scores = spmScores(v.Tokens, merges)
		for id, t := range v.Tokens {
			if isByteToken(t) {
				v.Types[id] = TokenByte
			}
		}
		f := false
		if len(pre) == 0 { // a Prepend("▁") normalizer adds the space; without one there is none
			prepends := false
			for _, c := range norm {
				prepends = prepends || c.Type == "Prepend"
			}
			if !prepends {
				v.AddSpacePrefix = &f
			}
		}
	default:
		return nil, fmt.Errorf("%s: a BPE tokenizer that is neither byte-level nor byte-fallback is not supported by GGUF export", path)
	}
	// added tokens: control when special (or looking special, as the
	// converter's does_token_look_special decides), else user-defined
	for _, a := range tj.AddedTokens {
		v.Tokens[a.ID] = a.Content
		switch {
		case a.Special || looksSpecial(a.Content):
			v.Types[a.ID] = TokenControl
		default:
			v.Types[a.ID] = TokenUserDefined
		}
		if v.Model == "llama" && v.Scores != nil {
			v.Scores[a.ID] = -1000
		}
	}
	for i := range v.Tokens {
		if v.Tokens[i] == "" {
			v.Tokens[i] = fmt.Sprintf("[PAD%d]", i)
			v.Types[i] = TokenUnused
		}
	}
	if err := specialTokens(dir, &tj, v, bos, eos, pad); err != nil {
		return nil, err
	}
	return v, v.Check(vocabSize)
}

// readMerges reads merges as "a b" strings, from either of the forms
// tokenizer.json uses; a pair with spaces in it is written with U+0120
// for the space (SpecialVocab does the same).
func readMerges(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		return strs, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("neither strings nor pairs")
	}
	out := make([]string, len(pairs))
	for i, p := range pairs {
		if len(p) != 2 {
			return nil, fmt.Errorf("merge %d has %d parts", i, len(p))
		}
		out[i] = strings.ReplaceAll(p[0], " ", "\u0120") + " " + strings.ReplaceAll(p[1], " ", "\u0120")
	}
	return out, nil
}

// spmShape checks a byte-fallback BPE is SentencePiece's: spaces replaced
// by U+2581 (and a prefix one added) in the normalizer or a Metaspace
// pre-tokenizer, which llama.cpp's "llama" tokenizer does itself.
func spmShape(pre, norm []component) error {
	for _, c := range norm {
		switch {
		case c.Type == "Prepend" && c.Prepend == "▁":
		case c.Type == "Replace" && c.Content == "▁":
		default:
			return fmt.Errorf("normalizer %s", c.Type)
		}
	}
	for _, c := range pre {
		if c.Type != "Metaspace" {
			return fmt.Errorf("pre-tokenizer %s", c.Type)
		}
	}
	if len(norm) == 0 && len(pre) == 0 {
		return fmt.Errorf("a byte-fallback tokenizer that does not mark spaces with U+2581")
	}
	return nil
}

// spmScores gives each token the score llama.cpp's SentencePiece tokenizer
// merges by (highest first): minus the rank of the merge that makes it,
// which is how SentencePiece's BPE scores its pieces and how transformers
// ordered the merges when it converted them. Tokens no merge makes (single
// characters, bytes) are never merged into and score below every merge.
func spmScores(tokens []string, merges []string) []float32 {
	scores := make([]float32, len(tokens))
	rank := map[string]int{}
	for i, m := range merges {
		if l, r, ok := strings.Cut(m, " "); ok {
			if _, dup := rank[l+r]; !dup {
				rank[l+r] = i
			}
		}
	}
	for id, t := range tokens {
		if r, ok := rank[t]; ok {
			scores[id] = -float32(r)
		} else {
			scores[id] = -float32(len(merges) + id)
		}
	}
	return scores
}

func isByteToken(t string) bool {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return false
	}
	for _, c := range t[3:5] {
		if !strings.ContainsRune("0123456789ABCDEFabcdef", c) {
			return false
		}
	}
	return true
}

// pureBytes says whether a tokenizer.json is a byte tokenizer: byte
// fallback over exactly the 256 byte tokens <0x00>..<0xFF> at ids 0..255,
// with no merges, normalizer or pre-tokenizer.
func pureBytes(byteFallback bool, pre, norm []component, merges []string, tokens []string) bool {
	if !byteFallback || len(pre) != 0 || len(norm) != 0 || len(merges) != 0 || len(tokens) < 256 {
		return false
	}
	for id, t := range tokens {
		switch {
		case id < 256 && t != fmt.Sprintf("<0x%02X>", id):
			return false
		case id >= 256 && t != "":
			return false
		}
	}
	return true
}

// looksSpecial is the converter's does_token_look_special.
func looksSpecial(t string) bool {
	switch t {
	case "<pad>", "<mask>", "<2mass>", "[@BOS@]":
		return true
	}
	return (strings.HasPrefix(t, "<|") && strings.HasSuffix(t, "|>")) ||
		(strings.HasPrefix(t, "<｜") && strings.HasSuffix(t, "｜>")) ||
		(strings.HasPrefix(t, "<unused") && strings.HasSuffix(t, ">"))
}

// specialTokens sets the special ids, the add-bos flag and the chat
// template as SpecialVocab does: tokenizer_config.json's bos/eos/pad/unk
// token texts looked up among the added tokens, config.json's ids where
// those are missing; add_bos_token from tokenizer_config.json, else from
// the post-processor's template; the chat template from
// tokenizer_config.json or chat_template.jinja.
func specialTokens(dir string, tj *tokenizerJSON, v *Vocab, bos, eos, pad int) error {
	path := filepath.Join(dir, "tokenizer_config.json")
	var tc map[string]json.RawMessage
	raw, err := readlimit.ReadFile(path, readlimit.TokenizerConfig)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(raw, &tc); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	byContent := map[string]int{}
	for _, a := range tj.AddedTokens {
		if _, ok := byContent[a.Content]; !ok {
			byContent[a.Content] = a.ID
		}
	}
	tokenOf := func(field string) int {
		r, ok := tc[field]
		if !ok {
			return -1
		}
		var s string
		if json.Unmarshal(r, &s) != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if json.Unmarshal(r, &obj) != nil {
				return -1
			}
			s = obj.Content
		}
		if id, ok := byContent[s]; ok {
			return id
		}
		return -1
	}
	pick := func(field string, fallback int) int {
		if id := tokenOf(field); id >= 0 {
			return id
		}
		return fallback
	}
	v.BOS, v.EOS, v.PAD, v.UNK = pick("bos_token", bos), pick("eos_token", eos), pick("pad_token", pad), pick("unk_token", -1)
	for _, f := range []struct {
		key string
		dst **bool
	}{{"add_bos_token", &v.AddBOS}, {"add_eos_token", &v.AddEOS}} {
		if r, ok := tc[f.key]; ok {
			var b bool
			if json.Unmarshal(r, &b) == nil {
				*f.dst = &b
			}
		}
	}
	if v.AddBOS == nil && v.BOS >= 0 {
		// the post-processor adds BOS when its single template starts with it
		var pp struct {
			Type       string            `json:"type"`
			Single     []json.RawMessage `json:"single"`
			Processors []struct {
				Type   string            `json:"type"`
				Single []json.RawMessage `json:"single"`
			} `json:"processors"`
		}
		if json.Unmarshal(tj.PostProcessor, &pp) == nil {
			singles := [][]json.RawMessage{}
			if pp.Type == "TemplateProcessing" {
				singles = append(singles, pp.Single)
			}
			for _, p := range pp.Processors {
				if p.Type == "TemplateProcessing" {
					singles = append(singles, p.Single)
				}
			}
			for _, s := range singles {
				if len(s) > 1 {
					var first struct {
						SpecialToken struct {
							ID string `json:"id"`
						} `json:"SpecialToken"`
					}
					if json.Unmarshal(s[0], &first) == nil && first.SpecialToken.ID != "" {
						b := byContent[first.SpecialToken.ID] == v.BOS
						v.AddBOS = &b
					}
				}
			}
		}
		if v.AddBOS == nil && v.Model == "gpt2" {
			// no post-processor adding it: the tokenizer adds no BOS, and
			// llama.cpp's BPE default is to add one
			f := false
			v.AddBOS = &f
		}
	}
	if r, ok := tc["chat_template"]; ok {
		var s string
		if json.Unmarshal(r, &s) == nil {
			v.ChatTemplate = s
		} else {
			var named []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if json.Unmarshal(r, &named) == nil {
				for _, n := range named {
					if n.Name == "default" {
						v.ChatTemplate = n.Template
					}
				}
			}
		}
	}
	if v.ChatTemplate == "" {
		if b, err := readlimit.ReadFile(filepath.Join(dir, "chat_template.jinja"), readlimit.ChatTemplate); err == nil {
			v.ChatTemplate = string(b)
		}
	}
	return nil
}
