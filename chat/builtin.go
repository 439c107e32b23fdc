package chat

import (
	"embed"
	"encoding/json"
	"fmt"
	"sort"
)

// The published chat templates shipped with the package, byte for byte as
// their sources publish them. scripts/gen_chat_goldens.py extracts them and
// writes templates/templates.json with each one's origin.
//
//go:embed templates/*.jinja templates/templates.json
var builtinFS embed.FS

// BuiltinTemplate is a published chat template shipped with the package.
type BuiltinTemplate struct {
	Name   string
	Source string // the template text
	Origin string // where the text comes from
	// The special tokens of the tokenizer the template belongs to, ready for
	// Options; empty where that tokenizer sets none.
	BOS, EOS, UNK, PAD string
}

type builtinMeta struct {
	Name          string            `json:"name"`
	File          string            `json:"file"`
	Origin        string            `json:"origin"`
	SpecialTokens map[string]string `json:"special_tokens"`
}

func builtinIndex() ([]builtinMeta, error) {
	data, err := builtinFS.ReadFile("templates/templates.json")
	if err != nil {
		return nil, fmt.Errorf("reading the built-in template index: %w", err)
	}
	var metas []builtinMeta
	if err := json.Unmarshal(data, &metas); err != nil {
		return nil, fmt.Errorf("decoding templates/templates.json: %w", err)
	}
	return metas, nil
}

// Builtin returns the built-in template with the given name (see
// BuiltinNames): "chatml", "llama2", "llama3", "llama3.1", "llama3.2",
// "mistral", "qwen2", "qwen2.5", "qwen3", "zephyr", "gemma3", "deepseek_v3".
func Builtin(name string) (BuiltinTemplate, bool) {
	metas, err := builtinIndex()
	if err != nil {
		return BuiltinTemplate{}, false
	}
	for _, m := range metas {
		if m.Name != name {
			continue
		}
		src, err := builtinFS.ReadFile("templates/" + m.File)
		if err != nil {
			return BuiltinTemplate{}, false
		}
		t := m.SpecialTokens
		return BuiltinTemplate{Name: m.Name, Source: string(src), Origin: m.Origin,
			BOS: t["bos_token"], EOS: t["eos_token"], UNK: t["unk_token"], PAD: t["pad_token"]}, true
	}
	return BuiltinTemplate{}, false
}

// BuiltinNames lists the built-in templates in sorted order.
func BuiltinNames() []string {
	metas, err := builtinIndex()
	if err != nil {
		return nil
	}
	names := make([]string, len(metas))
	for i, m := range metas {
		names[i] = m.Name
	}
	sort.Strings(names)
	return names
}
