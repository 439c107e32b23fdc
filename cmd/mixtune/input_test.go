package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Command-line input that cannot work exits 2 with what is wrong, before
// any output is written: a prompt longer than the model's context, one
// that fills it (no room for a new token), and an extraction rank above a
// target's smaller side (these exited 1 with the decoder's or the SVD's
// message). One token less, or the largest rank, works.
func TestCommandLineLimitsExitTwo(t *testing.T) {
	dir := t.TempDir()
	base, _ := tinyBase(t, dir) // context 32; the byte tokenizer adds BOS
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"prompt past the context", []string{"generate", "--model", base, "--prompt", strings.Repeat("a", 40)},
			2, "--prompt is 41 tokens, longer than the model's context of 32 (max_position_embeddings in config.json)"},
		{"prompt filling the context", []string{"generate", "--model", base, "--prompt", strings.Repeat("a", 31)},
			2, "--prompt is 32 tokens, which fills the model's context of 32 (max_position_embeddings in config.json): there is no room to generate"},
		{"prompt one short of the context", []string{"generate", "--model", base, "--prompt", strings.Repeat("a", 30), "--max-new-tokens", "4", "--blas", "gonum"},
			0, ""},
		{"rank past every module", []string{"extract-lora", "--base", base, "--tuned", base, "--rank", "100000", "--out", filepath.Join(dir, "x")},
			2, "--rank 100000 exceeds min(out, in) = 8 of model.layers.0.self_attn.k_proj (8×16): the largest rank these target modules allow is 8"},
		{"rank past the narrowest module", []string{"extract-lora", "--base", base, "--tuned", base, "--rank", "9", "--out", filepath.Join(dir, "x")},
			2, "the largest rank these target modules allow is 8"},
		{"the largest rank", []string{"extract-lora", "--base", base, "--tuned", base, "--rank", "8", "--out", filepath.Join(dir, "y")},
			0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runIn(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want %d with %q\n%s", code, tc.code, tc.want, stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); !os.IsNotExist(err) {
		t.Error("extract-lora wrote its output for a rank it refused")
	}
}
