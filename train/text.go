package train

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mixtune/mixtune/chat"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/tokenizer"
)

// How text becomes tokens for a model: its tokenizer, its chat template,
// and the ids that end a generation. The recipe's data section chooses
// them; `eval`, `generate` and `tokenize` take the same choices as flags.

// TextConfig is the recipe's choice of tokenizer and chat template.
type TextConfig struct {
	// Tokenizer is auto (the model directory's tokenizer.json if it has
	// one, else the byte tokenizer), byte, or a directory or tokenizer.json
	// path.
	Tokenizer string
	// ChatTemplate is empty (the model's own, from tokenizer_config.json),
	// the name of a built-in template (chat.BuiltinNames), or a template.
	ChatTemplate string
	LossOn       data.LossOn
	// Alpaca renders Alpaca rows with the Stanford Alpaca prompt rather
	// than the chat template.
	Alpaca bool
	// MaxRowBytes caps the text of a row, and so what a template may
	// render (0: data.DefaultMaxRowBytes).
	MaxRowBytes int
}

// The range of data.max_row_bytes.
const (
	minRowBytes device.Size = 1 << 10
	maxRowBytes device.Size = 1 << 30
)

// Text is a model's way with text, ready to use.
type Text struct {
	Format data.Format
	// Stop are the ids that end a generation: the tokenizer's EOS and
	// every end-of-sequence id of generation_config.json.
	Stop []int
	// TemplateName says where the chat template came from, for logs; empty
	// without one.
	TemplateName string
}

// loadText resolves c for the model in dir (empty for a random
// initialization) whose vocabulary has vocab ids.
func loadText(dir string, vocab int, c TextConfig) (*Text, error) {
	tok, err := resolveTokenizer(dir, c.Tokenizer)
	if err != nil {
		return nil, err
	}
	return newText(tok, vocab, c)
}

// newText is loadText once the tokenizer is resolved.
func newText(tok data.Tokenizer, vocab int, c TextConfig) (*Text, error) {
	if tv := tok.VocabSize(); vocab > 0 && vocab < tv {
		return nil, &vocabTooSmall{model: vocab, tokenizer: tv}
	}
	t := &Text{Format: data.Format{Tok: tok, LossOn: c.LossOn, Alpaca: c.Alpaca, VocabSize: vocab, MaxRowBytes: c.MaxRowBytes}}
	var opts chat.Options
	src, name := "", ""
	if hf, ok := tok.(*hfTokenizer); ok {
		t.Format.Markers = hf.m.Tok.SpecialTokens()
		t.Stop = slices.Clone(hf.m.EOSIDs)
		opts = chat.Options{BOS: hf.m.BOSToken, EOS: hf.m.EOSToken, UNK: hf.m.UNKToken, PAD: hf.m.PADToken, Now: templateClock}
		src, name = hf.m.ChatTemplate, hf.dir+" chat template"
	} else if eos := tok.EOS(); eos >= 0 {
		t.Stop = append(t.Stop, eos)
	}
	if c.ChatTemplate != "" {
		var err error
		if src, name, err = templateSource(c.ChatTemplate); err != nil {
			return nil, err
		}
	}
	if src == "" {
		return t, nil
	}
	tmpl, err := chat.Parse(name, src)
	if err != nil {
		return nil, err
	}
	// a render longer than a row may be is refused as it grows, before it
	// holds more memory than the row would
	opts.Limits.MaxOutputBytes = t.Format.MaxRow()
	t.Format.Chat = data.ChatTemplate(tmpl, src, opts)
	t.TemplateName = name
	return t, nil
}

// vocabTooSmall is a model whose vocabulary cannot hold its tokenizer's
// ids: the model's fault (or the pairing's), not the template's.
type vocabTooSmall struct{ model, tokenizer int }

func (e *vocabTooSmall) Error() string {
	return fmt.Sprintf("the model's vocabulary (%d ids) is smaller than its tokenizer's (%d): ids the tokenizer produces would be outside the embedding", e.model, e.tokenizer)
}

// templateClock is the date templates print (Llama 3.x writes "Today
// Date"): fixed, so that the same data renders to the same tokens on any
// day and a token cache stays valid. It is the date Llama 3.2's template
// falls back to itself.
func templateClock() time.Time { return time.Date(2024, time.July, 26, 0, 0, 0, 0, time.UTC) }

// resolveTokenizer picks the tokenizer spec names for the model in dir:
// auto (the model directory's tokenizer.json, else bytes), byte, a
// tokenizer.json file (of any name, with the tokenizer_config.json beside
// it), or a directory holding a tokenizer.json.
func resolveTokenizer(dir, spec string) (data.Tokenizer, error) {
	switch spec {
	case "", "auto":
		if dir == "" || !hasTokenizerFile(dir) {
			return data.NewByteTokenizer(), nil
		}
		return loadHF(dir)
	case "byte":
		return data.NewByteTokenizer(), nil
	}
	const want = "want auto, byte, a tokenizer.json path, or a directory with a tokenizer.json"
	st, err := os.Stat(spec)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("tokenizer %s: no such file or directory (%s)", spec, want)
	case err != nil:
		return nil, fmt.Errorf("tokenizer: %w", err)
	case !st.IsDir():
		return loadHFFile(spec)
	case !hasTokenizerFile(spec):
		return nil, fmt.Errorf("%s: no tokenizer.json there (%s)", spec, want)
	}
	return loadHF(spec)
}

func hasTokenizerFile(dir string) bool {
	for _, f := range []string{"tokenizer.json", "tokenizer.json.gz"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

// loadHF returns the interface, so that a failure is a nil Tokenizer and
// not a nil *hfTokenizer inside one.
func loadHF(dir string) (data.Tokenizer, error) {
	m, err := tokenizer.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	return &hfTokenizer{m: m, dir: dir, file: "tokenizer.json"}, nil
}

// loadHFFile is loadHF for a tokenizer.json named by its path.
func loadHFFile(path string) (data.Tokenizer, error) {
	m, err := tokenizer.LoadFile(path)
	if err != nil {
		return nil, err
	}
	return &hfTokenizer{m: m, dir: filepath.Dir(path), file: filepath.Base(path)}, nil
}

// describeTokenizer names a tokenizer for the run's log: the file it came
// from, or the byte tokenizer.
func describeTokenizer(tok data.Tokenizer) string {
	if hf, ok := tok.(*hfTokenizer); ok {
		return filepath.Join(hf.dir, hf.file) + " (" + hf.m.Tok.Name() + ")"
	}
	return "bytes (" + tok.Name() + ")"
}

// hfTokenizer is a Hugging Face tokenizer (tokenizer.json with its
// tokenizer_config.json) as data needs it.
type hfTokenizer struct {
	m    *tokenizer.Model
	dir  string // where tokenizer_config.json is read from
	file string // the tokenizer.json's name in dir
}

func (t *hfTokenizer) Encode(s string) ([]int, []data.Span, error) {
	e, err := t.m.Tok.Encode(s, false)
	if err != nil {
		return nil, nil, err
	}
	spans := make([]data.Span, len(e.Offsets))
	for i, o := range e.Offsets {
		spans[i] = data.Span{Start: o[0], End: o[1]}
	}
	return e.IDs, spans, nil
}

func (t *hfTokenizer) EncodeIDs(s string) ([]int, error) { return t.m.Tok.EncodeIDs(s, false) }

func (t *hfTokenizer) Decode(ids []int) string { return t.m.Tok.Decode(ids, true) }
func (t *hfTokenizer) VocabSize() int          { return t.m.Tok.VocabSize() }
func (t *hfTokenizer) Name() string            { return t.m.Tok.Name() }
func (t *hfTokenizer) EOS() int                { return t.m.EOS }

// BOS is -1 unless the tokenizer adds one (Qwen's has none; Llama 3's
// does).
func (t *hfTokenizer) BOS() int {
	if !t.m.AddBOS {
		return -1
	}
	return t.m.BOS
}

// PAD fills the rows of a batch past its documents; it is never a target,
// so a tokenizer without one (Llama 3) pads with EOS, as trainers do.
func (t *hfTokenizer) PAD() int {
	switch {
	case t.m.PAD >= 0:
		return t.m.PAD
	case t.m.EOS >= 0:
		return t.m.EOS
	}
	return 0
}

// DecodeSpecials is Decode with the special tokens written out.
func (t *hfTokenizer) DecodeSpecials(ids []int) string { return t.m.Tok.Decode(ids, false) }

// seenText is the text of ids as the model sees it: special tokens written
// out (<|im_start|>user\n…) where the tokenizer has text for them (the byte
// tokenizer's BOS and EOS have none).
func seenText(tok data.Tokenizer, ids []int) string {
	if d, ok := tok.(interface{ DecodeSpecials([]int) string }); ok {
		return d.DecodeSpecials(ids)
	}
	return tok.Decode(ids)
}

// chatInUse reports whether any of files (empty names skipped) has rows
// that f's chat template renders: a run names its template only when the
// template shapes its data.
func chatInUse(f data.Format, files ...string) bool {
	if f.Chat == nil {
		return false
	}
	for _, path := range files {
		if path != "" && data.Conversational(path, f.Alpaca) {
			return true
		}
	}
	return false
}

// templateSource reads a chat template choice: a built-in name, or a
// template given inline (it has Jinja tags). It returns the source and a
// name for errors; both empty when there is no template.
func templateSource(choice string) (src, name string, err error) {
	switch {
	case choice == "":
		return "", "", nil
	case strings.Contains(choice, "{%") || strings.Contains(choice, "{{"):
		return choice, "data.chat_template", nil
	}
	bt, ok := chat.Builtin(choice)
	if !ok {
		names := chat.BuiltinNames()
		slices.Sort(names)
		return "", "", fmt.Errorf("unknown chat template %q: name a built-in one (%s) or give a template", choice, strings.Join(names, ", "))
	}
	return bt.Source, "built-in " + bt.Name, nil
}

// prompt is the ids a generation starts from: BOS and the text, or with
// chat the conversation [system,] user rendered with the generation
// prompt (BOS added unless the template wrote it).
func (t *Text) prompt(text, system string, asChat bool) ([]int, error) {
	tok := t.Format.Tok
	if asChat {
		if t.Format.Chat == nil {
			return nil, fmt.Errorf("--chat needs a chat template: the model has none; pass --chat-template (a built-in name such as chatml, or a template)")
		}
		var msgs []data.Message
		if system != "" {
			msgs = append(msgs, data.Message{Role: data.RoleSystem, Content: system})
		}
		rendered, err := t.Format.Chat.Render(append(msgs, data.Message{Role: data.RoleUser, Content: text}), true)
		if err != nil {
			return nil, err
		}
		text = rendered
	}
	ids, err := tok.EncodeIDs(text)
	if err != nil {
		return nil, err
	}
	if bos := tok.BOS(); bos >= 0 && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]int{bos}, ids...)
	}
	return ids, nil
}
