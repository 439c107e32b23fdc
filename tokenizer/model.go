package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"

	"github.com/mixtune/mixtune/internal/readlimit"
)

// Model is the tokenizer of a model directory: tokenizer.json and what
// tokenizer_config.json and generation_config.json say about it.
type Model struct {
	Tok *Tokenizer
	// Ids of the special tokens, -1 when the model has none.
	BOS, EOS, PAD, UNK int
	// Their strings, "" when none.
	BOSToken, EOSToken, PADToken, UNKToken string
	// AddBOS and AddEOS say whether a sequence starts with BOS and ends
	// with EOS: tokenizer_config's add_bos_token and add_eos_token, or,
	// where those are absent, whether the post-processor's template
	// starts with BOS (Llama 3) or ends with EOS.
	AddBOS, AddEOS bool
	// ChatTemplate is the default chat template ("" when none);
	// ChatTemplates has all of them by name (the default one as
	// "default").
	ChatTemplate  string
	ChatTemplates map[string]string
	// EOSIDs are the ids that end generation: EOS, then
	// generation_config.json's eos_token_id (an id or a list).
	EOSIDs []int
	// ModelMaxLength is tokenizer_config's model_max_length, 0 when absent
	// or set to transformers' "very large" placeholder.
	ModelMaxLength int
}

// LoadDir reads a model directory's tokenizer.json (or tokenizer.json.gz),
// and its tokenizer_config.json and generation_config.json when they are
// there.
func LoadDir(dir string) (*Model, error) {
	tokPath := filepath.Join(dir, "tokenizer.json")
	if _, statErr := os.Stat(tokPath); statErr != nil {
		if _, gzErr := os.Stat(tokPath + ".gz"); gzErr == nil {
			tokPath += ".gz"
		}
	}
	return LoadFile(tokPath)
}

// LoadFile reads a tokenizer.json (gzipped when the name ends in .gz) of
// any name, with the tokenizer_config.json and generation_config.json
// beside it when they are there.
func LoadFile(tokPath string) (*Model, error) {
	tok, err := FromFile(tokPath)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(tokPath)
	m := &Model{Tok: tok, BOS: -1, EOS: -1, PAD: -1, UNK: -1, ChatTemplates: map[string]string{}}
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg, err := readOptionalJSON(cfgPath, readlimit.TokenizerConfig)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		if err := m.readTokenizerConfig(cfgPath, cfg); err != nil {
			return nil, err
		}
	}
	genPath := filepath.Join(dir, "generation_config.json")
	gen, err := readOptionalJSON(genPath, readlimit.ModelConfig)
	if err != nil {
		return nil, err
	}
	m.EOSIDs = nil
	if m.EOS >= 0 {
		m.EOSIDs = append(m.EOSIDs, m.EOS)
	}
	if raw, ok := gen["eos_token_id"]; ok && !isNull(raw) {
		ids, err := intOrList(raw)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: eos_token_id: %w", genPath, err)
		}
		for _, id := range ids {
			dup := false
			for _, have := range m.EOSIDs {
				dup = dup || have == id
			}
			if !dup {
				m.EOSIDs = append(m.EOSIDs, id)
			}
		}
	}
	return m, nil
}

func readOptionalJSON(path string, kind readlimit.Kind) (map[string]json.RawMessage, error) {
	b, err := readlimit.ReadFile(path, kind)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if err := checkStrict(b); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, describeJSONError(b, err))
	}
	if m == nil {
		return nil, fmt.Errorf("tokenizer: %s: the top level is not an object", path)
	}
	return m, nil
}

func intOrList(raw json.RawMessage) ([]int, error) {
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var list []int
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("want an id or a list of ids, got %s", snippet(raw))
	}
	return list, nil
}

// tokenString reads a special token entry: a string, an AddedToken object
// ({"content": ...}) or null.
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var o map[string]json.RawMessage
	if err := json.Unmarshal(raw, &o); err == nil {
		if err := json.Unmarshal(o["content"], &s); err == nil {
			return s, nil
		}
	}
	return "", fmt.Errorf("want a string, {\"content\": ...} or null, got %s", snippet(raw))
}

func (m *Model) readTokenizerConfig(path string, cfg map[string]json.RawMessage) error {
	for _, f := range []struct {
		key string
		str *string
		id  *int
	}{
		{"bos_token", &m.BOSToken, &m.BOS},
		{"eos_token", &m.EOSToken, &m.EOS},
		{"pad_token", &m.PADToken, &m.PAD},
		{"unk_token", &m.UNKToken, &m.UNK},
	} {
		raw, ok := cfg[f.key]
		if !ok {
			continue
		}
		s, err := tokenString(raw)
		if err != nil {
			return fmt.Errorf("tokenizer: %s: %s: %w", path, f.key, err)
		}
		if s == "" {
			continue
		}
		id, ok := m.Tok.TokenID(s)
		if !ok {
			return fmt.Errorf("tokenizer: %s: %s %q is not a token of %s", path, f.key, s, m.Tok.name)
		}
		*f.str, *f.id = s, id
	}
	o := obj{path: path, m: cfg}
	var err error
	_, hasAddBOS := cfg["add_bos_token"]
	if m.AddBOS, err = o.boolean("add_bos_token", false); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if !hasAddBOS || isNull(cfg["add_bos_token"]) {
		first, _ := m.Tok.templateEnds()
		m.AddBOS = m.BOS >= 0 && first == m.BOS
	}
	_, hasAddEOS := cfg["add_eos_token"]
	if m.AddEOS, err = o.boolean("add_eos_token", false); err != nil {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if !hasAddEOS || isNull(cfg["add_eos_token"]) {
		_, last := m.Tok.templateEnds()
		m.AddEOS = m.EOS >= 0 && last == m.EOS
	}
	if raw, ok := cfg["chat_template"]; ok && !isNull(raw) {
		var one string
		if err := json.Unmarshal(raw, &one); err == nil {
			m.ChatTemplate = one
			m.ChatTemplates["default"] = one
		} else {
			var list []struct {
				Name     string `json:"name"`
				Template string `json:"template"`
			}
			if err := json.Unmarshal(raw, &list); err != nil {
				return fmt.Errorf("tokenizer: %s: chat_template: want a string or a list of {name, template}, got %s", path, snippet(raw))
			}
			for _, t := range list {
				m.ChatTemplates[t.Name] = t.Template
			}
			m.ChatTemplate = m.ChatTemplates["default"]
		}
	}
	if raw, ok := cfg["model_max_length"]; ok && !isNull(raw) {
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || f < 0 {
			return fmt.Errorf("tokenizer: %s: model_max_length: want a number, got %s", path, snippet(raw))
		}
		// transformers writes int(1e30) when a model sets no limit.
		if f < 1e15 && f == math.Trunc(f) {
			m.ModelMaxLength = int(f)
		}
	}
	return nil
}

// templateEnds returns the first and last ids of the post-processor's
// single template, -1 where it starts or ends with the sequence or has no
// template.
func (t *Tokenizer) templateEnds() (first, last int) {
	first, last = -1, -1
	var find func(p postProcessor)
	find = func(p postProcessor) {
		switch p := p.(type) {
		case seqPostProcessor:
			for _, q := range p {
				find(q)
			}
		case templatePostProcessor:
			first, last = -1, -1
			if n := len(p.single); n > 0 {
				if !p.single[0].sequence && len(p.single[0].ids) > 0 {
					first = p.single[0].ids[0]
				}
				if lp := p.single[n-1]; !lp.sequence && len(lp.ids) > 0 {
					last = lp.ids[len(lp.ids)-1]
				}
			}
		}
	}
	if t.post != nil {
		find(t.post)
	}
	return first, last
}
