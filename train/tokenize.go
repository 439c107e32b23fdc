package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/model"
)

// TokenizeConfig is `mixtune tokenize`: a model's tokenizer (and chat
// template) applied to a text, or ids decoded back.
type TokenizeConfig struct {
	// Model is a model or tokenizer directory: its tokenizer.json and
	// tokenizer_config.json; config.json, when there, only checks that
	// the vocabulary fits the model's. Empty when Text.Tokenizer names
	// the tokenizer.
	Model string
	Text  TextConfig
	Input string
	// Chat renders Input through the chat template first: a JSON list of
	// {"role", "content"} messages, or one user message.
	Chat bool
	// NoGenerationPrompt renders the conversation as it stands, without
	// the generation prompt that opens the assistant's turn (the template's
	// add_generation_prompt false): the form of a training conversation.
	NoGenerationPrompt bool
	// Decode reads Input as token ids (separated by spaces or commas) and
	// decodes them.
	Decode bool
}

// Tokens is what `mixtune tokenize` shows.
type Tokens struct {
	Text     string   `json:"text"`               // what was tokenized (the rendered conversation with Chat), or the decoded text
	Rendered bool     `json:"rendered,omitempty"` // Text is a rendered chat template
	IDs      []int    `json:"ids"`
	Spans    [][2]int `json:"offsets"` // each token's byte range in Text
	Pieces   []string `json:"tokens"`  // each token's text
	Template string   `json:"chat_template,omitempty"`
	Note     string   `json:"note,omitempty"`
}

// Tokenize tokenizes or decodes as c says.
func Tokenize(c TokenizeConfig) (*Tokens, error) {
	vocab, err := modelVocab(c.Model, c.Text.Tokenizer)
	if err != nil {
		return nil, inputError(err)
	}
	text, err := loadText(c.Model, vocab, c.Text)
	if err != nil {
		return nil, inputError(err)
	}
	tok := text.Format.Tok
	if c.Decode {
		ids, err := parseIDs(c.Input, tok.VocabSize())
		if err != nil {
			return nil, inputError(err)
		}
		return &Tokens{Text: tok.Decode(ids), IDs: ids}, nil
	}
	out := &Tokens{Text: c.Input}
	if c.Chat {
		if text.Format.Chat == nil {
			return nil, inputError(fmt.Errorf("--chat needs a chat template: the model has none; pass --chat-template (a built-in name such as chatml, or a template)"))
		}
		msgs, err := chatInput(c.Input)
		if err != nil {
			return nil, inputError(err)
		}
		if out.Text, err = text.Format.Chat.Render(msgs, !c.NoGenerationPrompt); err != nil {
			return nil, inputError(err)
		}
		out.Rendered, out.Template = true, text.TemplateName
	}
	if err := text.Format.CheckRow("the text to tokenize is", len(out.Text)); err != nil {
		return nil, inputError(err)
	}
	ids, spans, err := encodeOffsets(tok, out.Text)
	if err != nil {
		return nil, inputError(err)
	}
	out.IDs, out.Spans = ids, spans
	out.Pieces = make([]string, len(spans))
	for i, s := range spans {
		out.Pieces[i] = out.Text[s[0]:s[1]]
	}
	if bos := tok.BOS(); bos >= 0 && (len(ids) == 0 || ids[0] != bos) {
		out.Note = fmt.Sprintf("training and generation add BOS (id %d) before these ids", bos)
	}
	return out, nil
}

// modelVocab is the vocabulary size of the model in dir, from its
// config.json, or 0 (unknown, nothing to check) when dir holds a tokenizer
// without one. A directory with neither, and no tokenizer named by spec,
// is not a model.
func modelVocab(dir, spec string) (int, error) {
	if dir == "" {
		return 0, nil
	}
	if _, err := os.Stat(dir); err != nil {
		return 0, err
	}
	cfg, err := model.ReadConfig(dir)
	switch {
	case err == nil:
		return cfg.VocabSize, nil
	case !errors.Is(err, fs.ErrNotExist):
		return 0, err
	case hasTokenizerFile(dir) || (spec != "" && spec != "auto"):
		return 0, nil
	}
	return 0, fmt.Errorf("%s: neither a tokenizer.json nor a config.json there: not a model or tokenizer directory", dir)
}

// encodeOffsets encodes s with each token's byte range. A Hugging Face
// tokenizer's offsets are used as they come: converting them to
// data.Span and back would hold three copies of them for a long text.
func encodeOffsets(tok data.Tokenizer, s string) ([]int, [][2]int, error) {
	if hf, ok := tok.(*hfTokenizer); ok {
		e, err := hf.m.Tok.Encode(s, false)
		return e.IDs, e.Offsets, err
	}
	ids, spans, err := tok.Encode(s)
	offsets := make([][2]int, len(spans))
	for i, sp := range spans {
		offsets[i] = [2]int{sp.Start, sp.End}
	}
	return ids, offsets, err
}

// chatInput reads --chat's input: a JSON list of messages, or a user
// message as plain text.
func chatInput(s string) ([]data.Message, error) {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "[") {
		return []data.Message{{Role: data.RoleUser, Content: s}}, nil
	}
	var msgs []data.Message
	dec := json.NewDecoder(strings.NewReader(t))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msgs); err != nil {
		return nil, fmt.Errorf("--chat input: a JSON list of {\"role\", \"content\"} messages: %v", err)
	}
	for i, m := range msgs {
		switch m.Role {
		case data.RoleSystem, data.RoleUser, data.RoleAssistant:
		default:
			return nil, fmt.Errorf("--chat input: messages[%d]: unknown role %q (want system, user or assistant)", i, m.Role)
		}
	}
	return msgs, nil
}

// parseIDs reads token ids separated by spaces or commas.
func parseIDs(s string, vocab int) ([]int, error) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '[' || r == ']' })
	ids := make([]int, len(f))
	for i, x := range f {
		id, err := strconv.Atoi(x)
		if err != nil || id < 0 || id >= vocab {
			return nil, fmt.Errorf("--decode: %q is not a token id of this tokenizer (0 to %d)", x, vocab-1)
		}
		ids[i] = id
	}
	return ids, nil
}
