package data

import (
	"os"
	"path/filepath"
	"testing"
)

// Conversational tells the files whose rows the chat template renders from
// those it does not, by the rows' kinds and not by text that mentions a
// key.
func TestConversational(t *testing.T) {
	for _, tc := range []struct {
		name, rows string
		alpaca     bool
		want       bool
	}{
		{"prompt/completion", `{"prompt": "Date: 1", "completion": " one"}` + "\n", false, false},
		{"text naming a key", `{"text": "the \"messages\" field"}` + "\n", false, false},
		{"messages", `{"prompt": "a", "completion": "b"}` + "\n" + `{"messages": [{"role": "user", "content": "x"}]}` + "\n", false, true},
		{"conversations", `{"conversations": [{"from": "human", "value": "x"}]}` + "\n", false, true},
		{"alpaca through the template", `{"instruction": "i", "output": "o"}` + "\n", false, true},
		{"alpaca with its own prompt", `{"instruction": "i", "output": "o"}` + "\n", true, false},
		{"a broken row", `{"messages": [` + "\n", false, false},
	} {
		path := filepath.Join(t.TempDir(), "d.jsonl")
		if err := os.WriteFile(path, []byte(tc.rows), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := Conversational(path, tc.alpaca); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if Conversational(filepath.Join(t.TempDir(), "absent.jsonl"), false) {
		t.Error("a missing file is conversational")
	}
}
