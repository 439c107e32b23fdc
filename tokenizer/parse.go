package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mixtune/mixtune/internal/strictjson"
)

// obj is a JSON object being read, with its path for errors.
type obj struct {
	path string
	m    map[string]json.RawMessage
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(bytes.TrimSpace(raw)) == "null"
}

func newObj(path string, raw json.RawMessage) (obj, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return obj{}, fmt.Errorf("%s: want a JSON object, got %s", path, snippet(raw))
	}
	return obj{path: path, m: m}, nil
}

func snippet(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	if s == "" {
		s = "nothing"
	}
	return s
}

func (o obj) at(key string) string { return o.path + "." + key }

// only rejects keys that are not in allowed: an option this package does
// not know could change the tokenization.
func (o obj) only(allowed ...string) error {
	var unknown []string
	for k := range o.m {
		found := false
		for _, a := range allowed {
			if k == a {
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("%s: unsupported option %q", o.at(unknown[0]), unknown[0])
	}
	return nil
}

func (o obj) typ() (string, error) {
	raw, ok := o.m["type"]
	if !ok {
		return "", fmt.Errorf("%s: missing \"type\"", o.path)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s: want a string, got %s", o.at("type"), snippet(raw))
	}
	return s, nil
}

func (o obj) str(key string, def string) (string, error) {
	raw, ok := o.m[key]
	if !ok || isNull(raw) {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s: want a string, got %s", o.at(key), snippet(raw))
	}
	return s, nil
}

func (o obj) reqStr(key string) (string, error) {
	if _, ok := o.m[key]; !ok {
		return "", fmt.Errorf("%s: missing", o.at(key))
	}
	return o.str(key, "")
}

func (o obj) boolean(key string, def bool) (bool, error) {
	raw, ok := o.m[key]
	if !ok || isNull(raw) {
		return def, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, fmt.Errorf("%s: want true or false, got %s", o.at(key), snippet(raw))
	}
	return b, nil
}

func (o obj) integer(key string, def int) (int, error) {
	raw, ok := o.m[key]
	if !ok || isNull(raw) {
		return def, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
		return 0, fmt.Errorf("%s: want a non-negative integer, got %s", o.at(key), snippet(raw))
	}
	return n, nil
}

func (o obj) char(key string) (rune, error) {
	s, err := o.reqStr(key)
	if err != nil {
		return 0, err
	}
	if utf8.RuneCountInString(s) != 1 {
		return 0, fmt.Errorf("%s: want one character, got %q", o.at(key), s)
	}
	r, _ := utf8.DecodeRuneInString(s)
	return r, nil
}

func (o obj) list(key string) ([]json.RawMessage, error) {
	raw, ok := o.m[key]
	if !ok {
		return nil, fmt.Errorf("%s: missing", o.at(key))
	}
	var l []json.RawMessage
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, fmt.Errorf("%s: want a list, got %s", o.at(key), snippet(raw))
	}
	return l, nil
}

// patternOf reads a Split or Replace pattern: {"String": s} or {"Regex": r}.
func (o obj) patternOf(key string) (pattern, error) {
	raw, ok := o.m[key]
	if !ok {
		return nil, fmt.Errorf("%s: missing", o.at(key))
	}
	p, err := newObj(o.at(key), raw)
	if err != nil {
		return nil, err
	}
	if err := p.only("String", "Regex"); err != nil {
		return nil, err
	}
	if _, ok := p.m["String"]; ok {
		s, err := p.reqStr("String")
		if err != nil {
			return nil, err
		}
		if s == "" {
			return nil, fmt.Errorf("%s: an empty pattern is not supported", p.at("String"))
		}
		return literalPattern{s}, nil
	}
	if _, ok := p.m["Regex"]; ok {
		s, err := p.reqStr("Regex")
		if err != nil {
			return nil, err
		}
		pat, err := newPattern(s, p.at("Regex"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.at("Regex"), err)
		}
		return pat, nil
	}
	return nil, fmt.Errorf("%s: want {\"String\": ...} or {\"Regex\": ...}", o.at(key))
}

func parse(data []byte) (*Tokenizer, error) {
	if err := checkStrict(data); err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, describeJSONError(data, err)
	}
	if top == nil {
		return nil, errors.New("not a tokenizer.json: the top level is not an object")
	}
	o := obj{path: "$", m: top}
	if v, err := o.str("version", "1.0"); err != nil {
		return nil, err
	} else if v != "1.0" {
		return nil, fmt.Errorf("%s: unknown tokenizer version %q", o.at("version"), v)
	}
	for _, k := range []string{"truncation", "padding"} {
		if raw, ok := top[k]; ok && !isNull(raw) {
			return nil, fmt.Errorf("%s: %s is not supported (it must be null): the trainer truncates and pads itself", o.at(k), k)
		}
	}
	modelRaw, ok := top["model"]
	if !ok || isNull(modelRaw) {
		return nil, fmt.Errorf("%s: missing", o.at("model"))
	}
	t := &Tokenizer{}
	var err error
	if t.model, err = parseModel(o.at("model"), modelRaw); err != nil {
		return nil, err
	}
	if raw := top["normalizer"]; !isNull(raw) {
		if t.norm, err = parseNormalizer(o.at("normalizer"), raw); err != nil {
			return nil, err
		}
	}
	if raw := top["pre_tokenizer"]; !isNull(raw) {
		if t.pre, err = parsePreTokenizer(o.at("pre_tokenizer"), raw, t.pre); err != nil {
			return nil, err
		}
	}
	if raw := top["decoder"]; !isNull(raw) {
		if t.dec, err = parseDecoder(o.at("decoder"), raw); err != nil {
			return nil, err
		}
	}
	var added []json.RawMessage
	if raw := top["added_tokens"]; !isNull(raw) {
		if added, err = o.list("added_tokens"); err != nil {
			return nil, err
		}
	}
	if t.vocab, err = t.buildVocabulary(o.at("added_tokens"), added); err != nil {
		return nil, err
	}
	// The post-processor's special tokens are checked against the
	// vocabulary, so it comes after the added tokens.
	if raw := top["post_processor"]; !isNull(raw) {
		if t.post, err = t.parsePostProcessor(o.at("post_processor"), raw); err != nil {
			return nil, err
		}
	}
	t.setupByteLevel()
	t.model.setupChunks()
	t.vocabSize = len(t.model.vocabR)
	for id := range t.vocab.byID {
		t.vocabSize = max(t.vocabSize, int(id)+1)
	}
	return t, nil
}

// describeJSONError turns encoding/json's errors into ones that say where.
// checkStrict refuses JSON that encoding/json would repair: invalid
// UTF-8 or an escaped lone surrogate would become U+FFFD, so that a
// vocabulary key "<0x41>\xff" would silently turn into another token.
func checkStrict(data []byte) error {
	if p := strictjson.Check(data); p != nil {
		return fmt.Errorf("%v: the file must be UTF-8 text, as Hugging Face's loader requires", p)
	}
	return nil
}

func describeJSONError(data []byte, err error) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errors.New("empty input: not a tokenizer.json")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		if se.Error() == "unexpected end of JSON input" {
			return fmt.Errorf("truncated JSON: the input ends after %d bytes, inside a value", len(data))
		}
		// se.Offset counts the bytes read, the offending one included.
		at := max(int(se.Offset)-1, 0)
		line := 1 + bytes.Count(data[:min(at, len(data))], []byte("\n"))
		return fmt.Errorf("malformed JSON at byte offset %d (line %d): %v", at, line, se)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("not a tokenizer.json: the top level is a JSON %s, not an object", te.Value)
	}
	return fmt.Errorf("malformed JSON: %v", err)
}

func parseModel(path string, raw json.RawMessage) (*bpe, error) {
	o, err := newObj(path, raw)
	if err != nil {
		return nil, err
	}
	typ := "BPE"
	if _, ok := o.m["type"]; ok {
		if typ, err = o.typ(); err != nil {
			return nil, err
		}
	} else if _, ok := o.m["merges"]; !ok {
		return nil, fmt.Errorf("%s: missing \"type\"", path)
	}
	if typ != "BPE" {
		return nil, fmt.Errorf("%s: model type %q is not supported (only BPE)", o.at("type"), typ)
	}
	if err := o.only("type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
		"fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"); err != nil {
		return nil, err
	}
	if raw, ok := o.m["dropout"]; ok && !isNull(raw) {
		var d float64
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, fmt.Errorf("%s: want a number, got %s", o.at("dropout"), snippet(raw))
		}
		if d != 0 {
			return nil, fmt.Errorf("%s: BPE dropout %v is not supported (it makes tokenization random); it must be null or 0", o.at("dropout"), d)
		}
	}
	m := &bpe{unk: -1, cache: newWordCache()}
	if m.unkToken, err = o.str("unk_token", ""); err != nil {
		return nil, err
	}
	if m.prefix, err = o.str("continuing_subword_prefix", ""); err != nil {
		return nil, err
	}
	if m.suffix, err = o.str("end_of_word_suffix", ""); err != nil {
		return nil, err
	}
	if m.fuseUnk, err = o.boolean("fuse_unk", false); err != nil {
		return nil, err
	}
	if m.byteFallback, err = o.boolean("byte_fallback", false); err != nil {
		return nil, err
	}
	if m.ignoreMerges, err = o.boolean("ignore_merges", false); err != nil {
		return nil, err
	}
	vraw, ok := o.m["vocab"]
	if !ok {
		return nil, fmt.Errorf("%s: missing", o.at("vocab"))
	}
	if err := m.readVocab(o.at("vocab"), vraw); err != nil {
		return nil, err
	}
	if m.unkToken != "" {
		id, ok := m.vocab[m.unkToken]
		if !ok {
			return nil, fmt.Errorf("%s: unk_token %q is not in the vocabulary", o.at("unk_token"), m.unkToken)
		}
		m.unk = id
	}
	for b := 0; b < 256; b++ {
		m.byteTokens[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteTokens[b] = id
		}
	}
	pairs, err := readMerges(o.at("merges"), o.m["merges"])
	if err != nil {
		return nil, err
	}
	m.merges = newMergeTable(len(pairs))
	prefixLen := len(m.prefix)
	for i, pr := range pairs {
		a, b := pr[0], pr[1]
		aid, ok := m.vocab[a]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: merge names token %q, which is not in the vocabulary", path, i, a)
		}
		bid, ok := m.vocab[b]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: merge names token %q, which is not in the vocabulary", path, i, b)
		}
		if len(b) < prefixLen {
			return nil, fmt.Errorf("%s.merges[%d]: token %q is shorter than continuing_subword_prefix %q", path, i, b, m.prefix)
		}
		merged := a + b[prefixLen:]
		nid, ok := m.vocab[merged]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: the merge of %q and %q gives %q, which is not in the vocabulary", path, i, a, b, merged)
		}
		// A repeated pair takes its last rank, as the crate's map does.
		m.merges.set(pairKey(aid, bid), mergeInfo{int32(i), nid})
	}
	return m, nil
}

// readMerges reads the merges, given as "a b" strings or [a, b] pairs.
func readMerges(path string, raw json.RawMessage) ([][2]string, error) {
	if raw == nil {
		return nil, fmt.Errorf("%s: missing", path)
	}
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([][2]string, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok || strings.Contains(b, " ") {
				return nil, fmt.Errorf("%s[%d]: merge %q is not two tokens separated by one space", path, i, s)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		return pairs, nil
	}
	// Find the entry that is neither, for the error.
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: want a list, got %s", path, snippet(raw))
	}
	for i, item := range list {
		var s string
		var pair []string
		if json.Unmarshal(item, &s) != nil && (json.Unmarshal(item, &pair) != nil || len(pair) != 2) {
			return nil, fmt.Errorf("%s[%d]: want \"a b\" or [\"a\", \"b\"], got %s", path, i, snippet(item))
		}
	}
	return nil, fmt.Errorf("%s: mixes \"a b\" strings and [a, b] pairs", path)
}

// maxVocabID bounds model ids, which index slices.
const maxVocabID = 1<<24 - 1

// readVocab reads the model vocabulary, refusing two tokens with one id
// (the crate would keep an arbitrary one of them when decoding).
func (m *bpe) readVocab(path string, raw json.RawMessage) error {
	// A key given twice keeps its last id, as serde's map does, and as
	// encoding/json does.
	if err := json.Unmarshal(raw, &m.vocab); err != nil || m.vocab == nil {
		var ue *json.UnmarshalTypeError
		if errors.As(err, &ue) && ue.Field != "" {
			return fmt.Errorf("%s[%q]: want a non-negative integer id", path, ue.Field)
		}
		return fmt.Errorf("%s: want an object of token: id, got %s", path, snippet(raw))
	}
	maxID := -1
	for tok, id := range m.vocab {
		if id < 0 {
			return fmt.Errorf("%s[%q]: want a non-negative integer id", path, tok)
		}
		// Ids index a slice; the largest real vocabularies are near 2^18.
		if id > maxVocabID {
			return fmt.Errorf("%s[%q]: id %d is too large (the largest supported is %d)", path, tok, id, maxVocabID)
		}
		maxID = max(maxID, int(id))
	}
	m.vocabR = make([]string, maxID+1)
	m.hasID = make([]bool, maxID+1)
	for tok, id := range m.vocab {
		if m.hasID[id] {
			a, b := m.vocabR[id], tok
			if a > b {
				a, b = b, a
			}
			return fmt.Errorf("%s: tokens %q and %q both have id %d", path, a, b, id)
		}
		m.vocabR[id] = tok
		m.hasID[id] = true
	}
	return nil
}

func parseNormalizer(path string, raw json.RawMessage) (normalizer, error) {
	o, err := newObj(path, raw)
	if err != nil {
		return nil, err
	}
	typ, err := o.typ()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := parseSequence(o, path, "normalizers", parseNormalizer)
		if err != nil {
			return nil, err
		}
		return seqNormalizer(seq), nil
	case "Prepend":
		if err := o.only("type", "prepend"); err != nil {
			return nil, err
		}
		p, err := o.reqStr("prepend")
		if err != nil {
			return nil, err
		}
		return prependNormalizer{p}, nil
	case "Replace":
		if err := o.only("type", "pattern", "content"); err != nil {
			return nil, err
		}
		p, err := o.patternOf("pattern")
		if err != nil {
			return nil, err
		}
		c, err := o.reqStr("content")
		if err != nil {
			return nil, err
		}
		return replaceNormalizer{p, c}, nil
	case "NFC", "NFD", "NFKC", "NFKD":
		if err := o.only("type"); err != nil {
			return nil, err
		}
		return unicodeNormalizer{map[string]normForm{"NFC": formNFC, "NFD": formNFD, "NFKC": formNFKC, "NFKD": formNFKD}[typ]}, nil
	}
	return nil, fmt.Errorf("%s: normalizer type %q is not supported", o.at("type"), typ)
}

// parsePreTokenizer appends the pre-tokenizers of raw to dst, flattening
// Sequences.
func parsePreTokenizer(path string, raw json.RawMessage, dst []preTokenizer) ([]preTokenizer, error) {
	o, err := newObj(path, raw)
	if err != nil {
		return nil, err
	}
	typ, err := o.typ()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		if err := o.only("type", "pretokenizers"); err != nil {
			return nil, err
		}
		list, err := o.list("pretokenizers")
		if err != nil {
			return nil, err
		}
		for i, r := range list {
			if dst, err = parsePreTokenizer(fmt.Sprintf("%s.pretokenizers[%d]", path, i), r, dst); err != nil {
				return nil, err
			}
		}
		return dst, nil
	case "Split":
		if err := o.only("type", "pattern", "behavior", "invert"); err != nil {
			return nil, err
		}
		p, err := o.patternOf("pattern")
		if err != nil {
			return nil, err
		}
		b, err := o.reqStr("behavior")
		if err != nil {
			return nil, err
		}
		behavior, ok := behaviorNames[b]
		if !ok {
			return nil, fmt.Errorf("%s: unknown split behavior %q", o.at("behavior"), b)
		}
		invert, err := o.boolean("invert", false)
		if err != nil {
			return nil, err
		}
		if invert {
			p = invertPattern{p}
		}
		return append(dst, splitPreTokenizer{p, behavior}), nil
	case "ByteLevel":
		if err := o.only("type", "add_prefix_space", "trim_offsets", "use_regex"); err != nil {
			return nil, err
		}
		bl := &byteLevelPreTokenizer{}
		if bl.addPrefixSpace, err = o.boolean("add_prefix_space", true); err != nil {
			return nil, err
		}
		if _, err = o.boolean("trim_offsets", true); err != nil {
			return nil, err
		}
		if bl.useRegex, err = o.boolean("use_regex", true); err != nil {
			return nil, err
		}
		bl.regex, _ = newPattern(gpt2Regex, o.path)
		return append(dst, bl), nil
	case "Metaspace":
		ms, err := parseMetaspace(o)
		if err != nil {
			return nil, err
		}
		return append(dst, ms), nil
	case "Digits":
		if err := o.only("type", "individual_digits"); err != nil {
			return nil, err
		}
		ind, err := o.boolean("individual_digits", false)
		if err != nil {
			return nil, err
		}
		return append(dst, digitsPreTokenizer{ind}), nil
	}
	return nil, fmt.Errorf("%s: pre-tokenizer type %q is not supported", o.at("type"), typ)
}

func parseMetaspace(o obj) (metaspacePreTokenizer, error) {
	var ms metaspacePreTokenizer
	if err := o.only("type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"); err != nil {
		return ms, err
	}
	r, err := o.char("replacement")
	if err != nil {
		return ms, err
	}
	ms.replacement, ms.rep = r, string(r)
	scheme, err := o.str("prepend_scheme", "always")
	if err != nil {
		return ms, err
	}
	switch scheme {
	case "always":
		ms.scheme = prependAlways
	case "first":
		ms.scheme = prependFirst
	case "never":
		ms.scheme = prependNever
	default:
		return ms, fmt.Errorf("%s: unknown prepend_scheme %q", o.at("prepend_scheme"), scheme)
	}
	if raw, ok := o.m["add_prefix_space"]; ok && !isNull(raw) {
		aps, err := o.boolean("add_prefix_space", true)
		if err != nil {
			return ms, err
		}
		if !aps {
			if ms.scheme != prependNever {
				return ms, fmt.Errorf("%s: add_prefix_space does not match declared prepend_scheme", o.at("add_prefix_space"))
			}
			ms.scheme = prependNever
		}
	}
	if ms.splitPieces, err = o.boolean("split", true); err != nil {
		return ms, err
	}
	return ms, nil
}

func parseDecoder(path string, raw json.RawMessage) (decoder, error) {
	o, err := newObj(path, raw)
	if err != nil {
		return nil, err
	}
	typ, err := o.typ()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := parseSequence(o, path, "decoders", parseDecoder)
		if err != nil {
			return nil, err
		}
		return seqDecoder(seq), nil
	case "ByteLevel":
		// The options only matter to the pre-tokenizer and post-processor.
		if err := o.only("type", "add_prefix_space", "trim_offsets", "use_regex"); err != nil {
			return nil, err
		}
		return byteLevelDecoder{}, nil
	case "ByteFallback":
		if err := o.only("type"); err != nil {
			return nil, err
		}
		return byteFallbackDecoder{}, nil
	case "Fuse":
		if err := o.only("type"); err != nil {
			return nil, err
		}
		return fuseDecoder{}, nil
	case "Strip":
		if err := o.only("type", "content", "start", "stop"); err != nil {
			return nil, err
		}
		c, err := o.char("content")
		if err != nil {
			return nil, err
		}
		start, err := o.integer("start", 0)
		if err != nil {
			return nil, err
		}
		stop, err := o.integer("stop", 0)
		if err != nil {
			return nil, err
		}
		return stripDecoder{c, start, stop}, nil
	case "Replace":
		if err := o.only("type", "pattern", "content"); err != nil {
			return nil, err
		}
		p, err := o.patternOf("pattern")
		if err != nil {
			return nil, err
		}
		if _, ok := p.(*regexPattern); ok {
			// Decode has no error to report a regex that runs past its
			// time budget with; real tokenizers replace a String here.
			return nil, fmt.Errorf("%s: a Regex pattern in a Replace decoder is not supported (only a String)", o.at("pattern"))
		}
		c, err := o.reqStr("content")
		if err != nil {
			return nil, err
		}
		return replaceDecoder{p, c}, nil
	case "Metaspace":
		ms, err := parseMetaspace(o)
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder{ms.replacement, ms.scheme}, nil
	}
	return nil, fmt.Errorf("%s: decoder type %q is not supported", o.at("type"), typ)
}

func (t *Tokenizer) parsePostProcessor(path string, raw json.RawMessage) (postProcessor, error) {
	o, err := newObj(path, raw)
	if err != nil {
		return nil, err
	}
	typ, err := o.typ()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := parseSequence(o, path, "processors", t.parsePostProcessor)
		if err != nil {
			return nil, err
		}
		return seqPostProcessor(seq), nil
	case "ByteLevel":
		if err := o.only("type", "add_prefix_space", "trim_offsets", "use_regex"); err != nil {
			return nil, err
		}
		var p byteLevelPostProcessor
		if p.addPrefixSpace, err = o.boolean("add_prefix_space", true); err != nil {
			return nil, err
		}
		if p.trimOffsets, err = o.boolean("trim_offsets", true); err != nil {
			return nil, err
		}
		if _, err = o.boolean("use_regex", true); err != nil {
			return nil, err
		}
		if p.trimOffsets {
			t.needValues = true
		}
		return p, nil
	case "TemplateProcessing":
		return t.parseTemplate(o)
	}
	return nil, fmt.Errorf("%s: post-processor type %q is not supported", o.at("type"), typ)
}

func (t *Tokenizer) parseTemplate(o obj) (postProcessor, error) {
	if err := o.only("type", "single", "pair", "special_tokens"); err != nil {
		return nil, err
	}
	type special struct {
		ids    []int
		tokens []string
	}
	specials := map[string]special{}
	if raw, ok := o.m["special_tokens"]; ok && !isNull(raw) {
		so, err := newObj(o.at("special_tokens"), raw)
		if err != nil {
			return nil, err
		}
		for k, v := range so.m {
			// Keys are matched exactly, as serde does (encoding/json's
			// struct decoding would ignore case).
			st, err := newObj(so.at(strconv.Quote(k)), v)
			if err != nil {
				return nil, err
			}
			if err := st.only("id", "ids", "tokens"); err != nil {
				return nil, err
			}
			var sp special
			if json.Unmarshal(st.m["ids"], &sp.ids) != nil || json.Unmarshal(st.m["tokens"], &sp.tokens) != nil ||
				sp.ids == nil || len(sp.ids) != len(sp.tokens) {
				return nil, fmt.Errorf("%s: want \"ids\" and \"tokens\" lists of the same length", st.path)
			}
			for i, id := range sp.ids {
				// The crate does not check these ids; an id that names no
				// token is a broken file.
				if tok, ok := t.Token(id); !ok || tok != sp.tokens[i] {
					return nil, fmt.Errorf("%s.ids[%d]: id %d is not the token %q", st.path, i, id, sp.tokens[i])
				}
			}
			specials[k] = sp
		}
	}
	readTemplate := func(key string, allowB bool) ([]templatePiece, error) {
		list, err := o.list(key)
		if err != nil {
			return nil, err
		}
		var out []templatePiece
		for i, r := range list {
			item, err := newObj(fmt.Sprintf("%s[%d]", o.at(key), i), r)
			if err != nil {
				return nil, err
			}
			if len(item.m) != 1 {
				return nil, fmt.Errorf("%s: want {\"Sequence\": ...} or {\"SpecialToken\": ...}", item.path)
			}
			if err := item.only("Sequence", "SpecialToken"); err != nil {
				return nil, err
			}
			for kind, v := range item.m {
				inner, err := newObj(item.at(kind), v)
				if err != nil {
					return nil, err
				}
				if err := inner.only("id", "type_id"); err != nil {
					return nil, err
				}
				id, err := inner.reqStr("id")
				if err != nil {
					return nil, err
				}
				if kind == "Sequence" {
					if id != "A" && !(allowB && id == "B") {
						return nil, fmt.Errorf("%s: sequence %q cannot appear here", inner.at("id"), id)
					}
					out = append(out, templatePiece{sequence: true})
					continue
				}
				sp, ok := specials[id]
				if !ok {
					return nil, fmt.Errorf("%s: special token %q is missing from special_tokens", inner.at("id"), id)
				}
				out = append(out, templatePiece{ids: sp.ids, tokens: sp.tokens})
			}
		}
		return out, nil
	}
	single, err := readTemplate("single", false)
	if err != nil {
		return nil, err
	}
	if raw, ok := o.m["pair"]; ok && !isNull(raw) {
		// Encode has no pairs; the pair template is only checked.
		if _, err := readTemplate("pair", true); err != nil {
			return nil, err
		}
	}
	return templatePostProcessor{single: single}, nil
}

// buildVocabulary adds the added tokens as the crate does when it loads a
// tokenizer.json (AddedVocabulary::add_tokens): a token that is in the
// model vocabulary takes that id, the others take the next free ids in
// order. The file's ids must agree: the crate ignores them with a warning,
// which would silently change the tokenization, so a disagreement is an
// error here.
func (t *Tokenizer) buildVocabulary(path string, list []json.RawMessage) (*vocabulary, error) {
	v := &vocabulary{byID: map[int32]*addedToken{}, byContent: map[string]int32{}, isSpecial: map[string]bool{}}
	type fullToken struct {
		addedToken
		fileID int
	}
	var toks []fullToken
	for i, raw := range list {
		p := fmt.Sprintf("%s[%d]", path, i)
		o, err := newObj(p, raw)
		if err != nil {
			return nil, err
		}
		if err := o.only("id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"); err != nil {
			return nil, err
		}
		var ft fullToken
		idRaw, ok := o.m["id"]
		if !ok {
			return nil, fmt.Errorf("%s: missing", o.at("id"))
		}
		if err := json.Unmarshal(idRaw, &ft.fileID); err != nil || ft.fileID < 0 || ft.fileID > math.MaxInt32 {
			return nil, fmt.Errorf("%s: want a non-negative integer, got %s", o.at("id"), snippet(idRaw))
		}
		if ft.content, err = o.reqStr("content"); err != nil {
			return nil, err
		}
		if ft.special, err = o.boolean("special", false); err != nil {
			return nil, err
		}
		if ft.singleWord, err = o.boolean("single_word", false); err != nil {
			return nil, err
		}
		if ft.lstrip, err = o.boolean("lstrip", false); err != nil {
			return nil, err
		}
		if ft.rstrip, err = o.boolean("rstrip", false); err != nil {
			return nil, err
		}
		if ft.normalized, err = o.boolean("normalized", !ft.special); err != nil {
			return nil, err
		}
		toks = append(toks, ft)
	}
	// Special tokens, in order, deduplicated by content.
	for _, ft := range toks {
		if ft.special && ft.content != "" && !v.isSpecial[ft.content] {
			v.special = append(v.special, ft.content)
			v.isSpecial[ft.content] = true
		}
	}
	modelLen := int32(len(t.model.vocab))
	nextID := modelLen
	var nonSpecial []*addedToken
	existing := map[addedToken]bool{}
	for i, ft := range toks {
		key := ft.addedToken
		key.id = 0
		if ft.content == "" || existing[key] {
			continue
		}
		id, ok := v.byContent[ft.content]
		if !ok {
			id, ok = t.model.vocab[ft.content]
		}
		if !ok {
			id = nextID
			nextID++
		}
		if int(id) != ft.fileID {
			return nil, fmt.Errorf("%s[%d]: token %q has id %d, but Hugging Face tokenizers gives it id %d (the id of the same text in the vocabulary, or the next free id); ids must be unique and follow that rule", path, i, ft.content, ft.fileID, id)
		}
		tok := ft.addedToken
		tok.id = id
		v.byContent[ft.content] = id
		v.byID[id] = &tok
		if !v.isSpecial[ft.content] {
			nonSpecial = append(nonSpecial, &tok)
		}
		existing[key] = true
	}
	// The matching sets, as refresh_added_tokens builds them.
	var rawPats, normPats []string
	var rawIDs, normIDs []int32
	all := make([]*addedToken, 0, len(v.special)+len(nonSpecial))
	for _, c := range v.special {
		all = append(all, v.byID[v.byContent[c]])
	}
	all = append(all, nonSpecial...)
	for _, tok := range all {
		id := v.byContent[tok.content]
		if !tok.normalized {
			rawPats = append(rawPats, tok.content)
			rawIDs = append(rawIDs, id)
			continue
		}
		n := nstr{s: tok.content}
		if t.norm != nil {
			b := newMatchBudget(len(n.s))
			if t.norm.normalize(&n, b); b.err != nil {
				return nil, fmt.Errorf("%s: normalizing token %q: %w", path, tok.content, b.err)
			}
		}
		if n.s == "" {
			return nil, fmt.Errorf("%s: token %q normalizes to nothing", path, tok.content)
		}
		normPats = append(normPats, n.s)
		normIDs = append(normIDs, id)
	}
	v.raw = addedSet{newTrie(rawPats), rawIDs}
	v.norm = addedSet{newTrie(normPats), normIDs}
	return v, nil
}

// setupByteLevel lets a final ByteLevel pre-tokenizer hand raw bytes to
// the model when that gives the same tokens (see bpe.raw).
func (t *Tokenizer) setupByteLevel() {
	if len(t.pre) == 0 {
		return
	}
	bl, ok := t.pre[len(t.pre)-1].(*byteLevelPreTokenizer)
	if !ok {
		return
	}
	m := t.model
	if m.unk >= 0 || m.prefix != "" || m.suffix != "" || m.byteFallback {
		return
	}
	for b := 0; b < 256; b++ {
		id, ok := m.vocab[string(byteChar[b])]
		if !ok {
			return
		}
		m.rawByte[b] = id
	}
	m.rawVocab = make(map[string]int32, len(m.vocab))
	for tok, id := range m.vocab {
		bs := make([]byte, 0, len(tok))
		ok := true
		for _, r := range tok {
			b, in := charByte[r]
			if !in {
				ok = false
				break
			}
			bs = append(bs, b)
		}
		if ok {
			if _, dup := m.rawVocab[string(bs)]; !dup || m.vocab[string(bs)] == id {
				m.rawVocab[string(bs)] = id
			}
		}
	}
	m.raw = true
	bl.raw = true
}

// parseSequence reads a Sequence component: {"type": "Sequence", key: [...]},
// each element parsed by parse with its JSON path.
func parseSequence[T any](o obj, path, key string, parse func(string, json.RawMessage) (T, error)) ([]T, error) {
	if err := o.only("type", key); err != nil {
		return nil, err
	}
	list, err := o.list(key)
	if err != nil {
		return nil, err
	}
	seq := make([]T, 0, len(list))
	for i, r := range list {
		c, err := parse(fmt.Sprintf("%s.%s[%d]", path, key, i), r)
		if err != nil {
			return nil, err
		}
		seq = append(seq, c)
	}
	return seq, nil
}
