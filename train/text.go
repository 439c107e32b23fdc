package train

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/chat"
	"github.com/mixtune/mixtune/data"
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
}

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
	if tv := tok.VocabSize(); vocab > 0 && vocab < tv {
		return nil, fmt.Errorf("the model's vocabulary (%d ids) is smaller than its tokenizer's (%d): ids the tokenizer produces would be outside the embedding", vocab, tv)
	}
	t := &Text{Format: data.Format{Tok: tok, LossOn: c.LossOn, Alpaca: c.Alpaca, VocabSize: vocab}}
	if eos := tok.EOS(); eos >= 0 {
		t.Stop = append(t.Stop, eos)
	}
	src, name, err := templateSource(c.ChatTemplate)
	if err != nil || src == "" {
		return t, err
	}
	tmpl, err := chat.Parse(name, src)
	if err != nil {
		return nil, err
	}
	t.Format.Chat = data.ChatTemplate(tmpl, src, chat.Options{})
	t.TemplateName = name
	return t, nil
}

// resolveTokenizer picks the tokenizer spec names for the model in dir.
func resolveTokenizer(dir, spec string) (data.Tokenizer, error) {
	switch spec {
	case "", "auto":
		if dir != "" {
			if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
				return nil, fmt.Errorf("%s has a tokenizer.json, which this mixtune cannot read yet; set data.tokenizer: byte to train with bytes", dir)
			}
		}
		return data.NewByteTokenizer(), nil
	case "byte":
		return data.NewByteTokenizer(), nil
	}
	return nil, fmt.Errorf("%s: reading tokenizer.json is not supported yet; use auto or byte", spec)
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
	ids, _ := tok.Encode(text)
	if bos := tok.BOS(); bos >= 0 && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]int{bos}, ids...)
	}
	return ids, nil
}
