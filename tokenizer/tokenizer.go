package tokenizer

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mixtune/mixtune/internal/readlimit"
)

// Tokenizer is a parsed tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	name        string
	fingerprint string

	model *bpe
	vocab *vocabulary
	norm  normalizer     // nil when there is none
	pre   []preTokenizer // Sequence pre-tokenizers flattened, in order
	post  postProcessor  // nil when there is none
	dec   decoder        // nil when there is none
	// needValues is set when a post-processor reads token strings.
	needValues bool
	vocabSize  int
}

// vocabulary is the crate's AddedVocabulary.
type vocabulary struct {
	byID      map[int32]*addedToken // added_tokens_map_r
	byContent map[string]int32      // added_tokens_map
	special   []string              // contents of special tokens, in order
	isSpecial map[string]bool
	raw       addedSet // tokens matched on the raw text
	norm      addedSet // tokens matched on the normalized text
}

// Encoding is the result of encoding one text.
type Encoding struct {
	// IDs are the token ids.
	IDs []int
	// Offsets are each token's [start, end) byte range in the text. Tokens
	// that the post-processor adds (BOS, EOS) have [0, 0). Byte-level
	// tokens that hold part of a character have the whole character's
	// range, as in Hugging Face.
	Offsets [][2]int
	// Special marks special tokens: added tokens flagged special, written
	// in the text or added by the post-processor.
	Special []bool
}

// FromFile reads a tokenizer.json, or a gzipped one when the name ends in
// .gz.
func FromFile(path string) (*Tokenizer, error) {
	data, err := readMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	return Parse(filepath.Base(path), data)
}

func readMaybeGzip(path string) ([]byte, error) {
	data, err := readlimit.ReadFile(path, readlimit.TokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if !strings.HasSuffix(path, ".gz") {
		return data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	out, err := readlimit.ReadAll(zr, path+" (decompressed)", readlimit.TokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return out, nil
}

// Parse reads the bytes of a tokenizer.json. name identifies the file in
// errors and in Name.
func Parse(name string, jsonBytes []byte) (*Tokenizer, error) {
	t, err := parse(jsonBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", name, err)
	}
	sum := sha256.Sum256(jsonBytes)
	t.name = name
	t.fingerprint = hex.EncodeToString(sum[:])
	return t, nil
}

// Fingerprint is the SHA-256 of the tokenizer.json bytes, in hex.
func (t *Tokenizer) Fingerprint() string { return t.fingerprint }

// Name is the name given to Parse (the file name for FromFile) followed
// by the start of the fingerprint, so that it changes with the file.
func (t *Tokenizer) Name() string { return t.name + "@" + t.fingerprint[:16] }

// VocabSize is the largest id of the model vocabulary and the added
// tokens, plus one.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenID returns the id of a token string (added tokens first, as the
// crate looks them up).
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	if id, ok := t.vocab.byContent[tok]; ok {
		return int(id), true
	}
	if id, ok := t.model.vocab[tok]; ok {
		return int(id), true
	}
	return 0, false
}

// Token returns the string of a token id.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id > 1<<31-1 {
		return "", false
	}
	if a, ok := t.vocab.byID[int32(id)]; ok {
		return a.content, true
	}
	if id < len(t.model.hasID) && t.model.hasID[id] {
		return t.model.vocabR[id], true
	}
	return "", false
}

// SpecialTokens returns the contents of the added tokens marked special.
func (t *Tokenizer) SpecialTokens() []string {
	return append([]string(nil), t.vocab.special...)
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool {
	tok, ok := t.Token(id)
	return ok && t.vocab.isSpecial[tok]
}

// Encode tokenizes text. addSpecial runs the post-processor's template
// (adding BOS for Llama, for instance); special tokens written in text are
// recognized either way, as in Hugging Face.
//
// The only error is a *RegexTimeoutError: a regex of the tokenizer file
// that ran past its time budget (see matchBudget), which real tokenizers'
// patterns do not.
func (t *Tokenizer) Encode(text string, addSpecial bool) (Encoding, error) {
	e, err := t.encode(text, addSpecial, false)
	if err != nil {
		return Encoding{}, err
	}
	if e.ids == nil {
		e.ids, e.offsets, e.special = []int{}, [][2]int{}, []bool{}
	}
	return Encoding{IDs: e.ids, Offsets: e.offsets, Special: e.special}, nil
}

// EncodeIDs is Encode's IDs alone, in less memory: 8 bytes a token rather
// than 25 to 41.
func (t *Tokenizer) EncodeIDs(text string, addSpecial bool) ([]int, error) {
	e, err := t.encode(text, addSpecial, true)
	if err != nil {
		return nil, err
	}
	if e.ids == nil {
		return []int{}, nil
	}
	return e.ids, nil
}

func (t *Tokenizer) encode(text string, addSpecial, idsOnly bool) (*encoding, error) {
	s, from := sanitize(text)
	budget := newMatchBudget(len(s))
	e := &encoding{idsOnly: idsOnly}
	if t.needValues && !idsOnly {
		e.values = []string{}
	}
	pieces := t.vocab.findAdded(nil, s, &t.vocab.raw)
	var sub []piece
	for _, p := range pieces {
		if p.end == p.start {
			continue
		}
		if p.id >= 0 {
			t.addedToken(e, p.id, p.start, p.end, s[p.start:p.end])
			continue
		}
		n := nstr{s: s[p.start:p.end], shift: p.start}
		if t.norm != nil {
			t.norm.normalize(&n, budget)
		}
		sub = t.vocab.findAdded(sub[:0], n.s, &t.vocab.norm)
		for _, q := range sub {
			if q.end == q.start {
				continue
			}
			if q.id >= 0 {
				a, b := n.offsets(q.start, q.end)
				t.addedToken(e, q.id, a, b, n.s[q.start:q.end])
				continue
			}
			t.preTokenize(e, n.slice(q.start, q.end), 0, budget)
		}
		if budget.err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", t.name, budget.err)
		}
	}
	if t.post != nil {
		t.post.process(e, s, addSpecial)
	}
	if from != nil && !idsOnly {
		for i, o := range e.offsets {
			e.offsets[i] = [2]int{from[o[0]], from[o[1]]}
		}
	}
	return e, nil
}

func (t *Tokenizer) addedToken(e *encoding, id int32, start, end int, value string) {
	e.ids = append(e.ids, int(id))
	if e.idsOnly {
		return
	}
	e.offsets = append(e.offsets, [2]int{start, end})
	e.special = append(e.special, t.vocab.byID[id].special)
	if e.values != nil {
		e.values = append(e.values, value)
	}
}

// preTokenize runs pre-tokenizers k and on over n, depth first (which
// gives the crate's order, as each pre-tokenizer sees one piece at a
// time), then the model. Once b has run out, pieces are dropped: the
// encoding is thrown away.
func (t *Tokenizer) preTokenize(e *encoding, n nstr, k int, b *matchBudget) {
	if b.err != nil {
		return
	}
	if k < len(t.pre) {
		t.pre[k].split(n, b, func(m nstr) { t.preTokenize(e, m, k+1, b) })
		return
	}
	if e.idsOnly {
		t.model.tokenize(n.s, n.raw, func(id int32, _, _ int) { e.ids = append(e.ids, int(id)) })
		return
	}
	t.model.tokenize(n.s, n.raw, func(id int32, p, q int) {
		a, b := n.offsets(p, q)
		e.ids = append(e.ids, int(id))
		e.offsets = append(e.offsets, [2]int{a, b})
		e.special = append(e.special, false)
		if e.values != nil {
			e.values = append(e.values, t.model.vocabR[id])
		}
	})
}

// EncodeBatch encodes texts on up to workers goroutines. The results are
// those of Encode, whatever the number of workers; the error is that of
// the first text that fails.
func (t *Tokenizer) EncodeBatch(texts []string, addSpecial bool, workers int) ([]Encoding, error) {
	out := make([]Encoding, len(texts))
	errs := make([]error, len(texts))
	if workers < 1 {
		workers = 1
	}
	if workers > len(texts) {
		workers = len(texts)
	}
	if workers <= 1 {
		for i, s := range texts {
			if out[i], errs[i] = t.Encode(s, addSpecial); errs[i] != nil {
				return nil, errs[i]
			}
		}
		return out, nil
	}
	// Workers take chunks of texts from a shared counter: one atomic add
	// per chunk rather than a channel send per text, which cost more than
	// encoding a short line.
	const chunk = 64
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(chunk)) - chunk
				if lo >= len(texts) {
					return
				}
				for i := lo; i < min(lo+chunk, len(texts)); i++ {
					out[i], errs[i] = t.Encode(texts[i], addSpecial)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Decode returns the text of ids through the decoder. Ids that name no
// token are skipped, as the crate skips them; skipSpecial drops special
// tokens.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.Token(id)
		if !ok || (skipSpecial && t.vocab.isSpecial[tok]) {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.dec == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.dec.decodeChain(tokens), "")
}
