package data

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/mixtune/mixtune/chat"
)

// ChatTemplate is a Renderer for a Hugging Face chat template: opts carries
// the tokenizer's special tokens and any extra template variables. Its name
// includes a hash of the source, so a token cache keyed by it misses when
// the template changes.
func ChatTemplate(t *chat.Template, source string, opts chat.Options) Renderer {
	h := sha256.Sum256([]byte(source))
	return templateRenderer{t: t, opts: opts, name: t.Name() + "@" + hex.EncodeToString(h[:6])}
}

type templateRenderer struct {
	t    *chat.Template
	opts chat.Options
	name string
}

func (r templateRenderer) Name() string { return r.name }

func (r templateRenderer) Render(msgs []Message, gen bool) (string, error) {
	cm := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		cm[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	opts := r.opts
	opts.AddGenerationPrompt = gen
	return r.t.Render(cm, opts)
}
