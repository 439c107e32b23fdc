package train

import (
	"errors"
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
