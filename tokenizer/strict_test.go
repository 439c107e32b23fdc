package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tokenizer file whose strings are not UTF-8 is refused, naming the
// byte offset, as Python's strict decoding and Hugging Face's loader
// refuse it. encoding/json alone would read the bad byte as U+FFFD, and a
// key such as "<0x41>" spoiled that way would silently drop a token.
func TestInvalidUTF8Refused(t *testing.T) {
	withKey := func(key string) string {
		return strings.Replace(minimalJSON, `"ab": 2}`, `"ab": 2, `+key+`: 3}`, 1)
	}
	for _, tc := range []struct{ name, json, want string }{
		{"invalid byte in a vocabulary key", withKey("\"c\xff\""),
			`tokenizer: test.json: invalid UTF-8 (byte 0xff) at byte offset 500 (line 8, column 100): the file must be UTF-8 text`},
		{"truncated sequence in a vocabulary key", withKey("\"<0x41>\xc3\""),
			`tokenizer: test.json: invalid UTF-8 (byte 0xc3) at byte offset 505 (line 8, column 105)`},
		{"lone surrogate escape in a vocabulary key", withKey(`"\ud800"`),
			`tokenizer: test.json: \ud800 escapes half of a UTF-16 surrogate pair, which is no character, at byte offset 499 (line 8, column 99)`},
		{"invalid byte in an added token", strings.Replace(minimalJSON, `"content": "<s>"`, "\"content\": \"<s\xfe>\"", 1),
			`tokenizer: test.json: invalid UTF-8 (byte 0xfe) at byte offset`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.json", []byte(tc.json))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("Parse: %v\nwant %s", err, tc.want)
			}
		})
	}
	if _, err := Parse("test.json", []byte(strings.Replace(minimalJSON, `"content": "<s>"`, `"content": "\ud83d\ude00"`, 1))); err != nil {
		t.Fatalf("a whole surrogate pair is a character: %v", err)
	}
}

// tokenizer_config.json is held to the same rule: its chat template and
// special tokens are strings of the model.
func TestInvalidUTF8InTokenizerConfigRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(minimalJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte("{\"chat_template\": \"{{ x }}\x80\"}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadDir(dir)
	if want := "tokenizer_config.json: invalid UTF-8 (byte 0x80) at byte offset 26 (line 1, column 27)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("LoadDir: %v\nwant %s", err, want)
	}
}
