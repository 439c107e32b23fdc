package train

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/chat"
	"github.com/mixtune/mixtune/data"
)

// A chat template that writes far more than the row cap (the report: 32
// MiB a turn, which took 5.6 GB to tokenize) is stopped as it renders,
// at data.max_row_bytes, not at the chat package's 64 MiB.
func TestTemplateOutputFollowsRowCap(t *testing.T) {
	text, err := newText(data.NewByteTokenizer(), 0, TextConfig{
		ChatTemplate: "{% for m in messages %}{{ 'x' * 40000 }}{{ m.content }}{% endfor %}",
		MaxRowBytes:  16 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = text.Format.Chat.Render([]data.Message{{Role: data.RoleUser, Content: "hi"}}, false)
	var le *chat.LimitError
	if !errors.As(err, &le) || le.Max != 16<<10 {
		t.Fatalf("Render: %v, want a *chat.LimitError at %d bytes", err, 16<<10)
	}
}

// data.max_row_bytes is read from the recipe, checked, and a row over it
// stops the run with file:line, the field, its size and the limit, and
// exit status 2, before a run directory exists.
func TestMaxRowBytesRecipe(t *testing.T) {
	dir := fixture(t)
	withCap := func(c string) string {
		return strings.Replace(goodConfig, "  seq_len: 16", "  seq_len: 16\n  max_row_bytes: "+c, 1)
	}
	if _, err := Load(writeConfig(t, dir, withCap("100")), nil); err == nil ||
		!strings.Contains(err.Error(), "data.max_row_bytes: must be between 1 KiB and 1 GiB, got 100 bytes") {
		t.Fatalf("max_row_bytes 100: %v", err)
	}
	rows := "{\"text\": \"a\"}\n{\"text\": \"" + strings.Repeat("b", 2000) + "\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.jsonl"), []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(writeConfig(t, dir, strings.Replace(withCap("1KiB"), "DIR/train.jsonl", "DIR/d.jsonl", 1)), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), r, Options{Out: io.Discard})
	want := dir + `/d.jsonl:2: "text" is 2.0 KiB (2000 bytes), more than the 1 KiB a row may have (data.max_row_bytes)`
	if err == nil || !strings.HasPrefix(err.Error(), want) || !IsInputError(err) {
		t.Fatalf("error %v (input error: %v), want %q, an input error (exit 2)", err, IsInputError(err), want)
	}
	if _, err := os.Stat(filepath.Join(dir, "runs")); !os.IsNotExist(err) {
		t.Fatal("a run directory was created for a run that could not start")
	}
}
