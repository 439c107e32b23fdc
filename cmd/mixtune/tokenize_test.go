package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tokenizerDir copies the shipped tiny model's tokenizer.json and
// tokenizer_config.json (a ChatML template) into a directory of their own,
// with no config.json, as a tokenizer is published.
func tokenizerDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "models", "tiny-byte", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tokenize works on a directory with only a tokenizer (it used to demand
// config.json), takes --tokenizer as a tokenizer.json path as its help
// says (a path was refused), and renders a chat without the generation
// prompt on request (it always added it).
func TestTokenizeTokenizerOnly(t *testing.T) {
	dir := tokenizerDir(t)
	renamed := filepath.Join(t.TempDir(), "my-tokenizer.json")
	b, _ := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	os.WriteFile(renamed, b, 0o644)
	const conv = `[{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]`
	const rendered = "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
	for _, tc := range []struct {
		name string
		args []string
		text string // the rendered text, "" for a plain tokenization
		ids  string
	}{
		{"model dir without config.json", []string{"--model", dir, "hi"}, "", "[104 105]"},
		{"tokenizer.json path", []string{"--tokenizer", filepath.Join(dir, "tokenizer.json"), "hi"}, "", "[104 105]"},
		{"tokenizer directory", []string{"--tokenizer", dir, "hi"}, "", "[104 105]"},
		{"chat", []string{"--model", dir, "--chat", conv}, rendered + "<|im_start|>assistant\n", ""},
		{"chat without the generation prompt", []string{"--model", dir, "--chat", "--no-generation-prompt", conv}, rendered, ""},
		// no tokenizer_config.json beside a renamed file: no template of its own
		{"renamed tokenizer.json with a built-in template", []string{"--tokenizer", renamed, "--chat-template", "chatml", "--chat", "--no-generation-prompt", "U"}, "<|im_start|>user\nU<|im_end|>\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runIn(t, append([]string{"tokenize", "--json"}, tc.args...)...)
			var got struct {
				Text     string `json:"text"`
				Rendered bool   `json:"rendered"`
				IDs      []int  `json:"ids"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
				t.Fatalf("exit %d: %s%s", code, out, stderr)
			}
			if tc.text != "" && (!got.Rendered || got.Text != tc.text) {
				t.Fatalf("rendered %q, want %q", got.Text, tc.text)
			}
			if tc.ids != "" && fmt.Sprint(got.IDs) != tc.ids {
				t.Fatalf("ids %v, want %s", got.IDs, tc.ids)
			}
		})
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tokenize", "--model", dir, "--no-generation-prompt", "x"}, "--no-generation-prompt applies to --chat"},
		{[]string{"tokenize", "--tokenizer", filepath.Join(dir, "nope.json"), "x"}, "nope.json: no such file or directory (want auto, byte, a tokenizer.json path, or a directory with a tokenizer.json)"},
		{[]string{"tokenize", "--model", t.TempDir(), "x"}, "neither a tokenizer.json nor a config.json there"},
		{[]string{"tokenize", "--model", filepath.Join(dir, "absent"), "x"}, "absent: no such file or directory"},
		{[]string{"tokenize", "x"}, "--model DIR (or --tokenizer with a tokenizer.json path) is required"},
	} {
		if code, _, stderr := runIn(t, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, want 2 with %q\n%s", tc.args, code, tc.want, stderr)
		}
	}
}
