package data

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blockingTokenizer is the byte tokenizer, except that encoding the text
// "stall" waits until release is closed: a row that takes as long to
// tokenize as a test wants.
type blockingTokenizer struct {
	ByteTokenizer
	ctx        context.Context
	lateStarts atomic.Int64  // rows begun after ctx was cancelled
	seen       sync.Map      // the rows begun after the cancel (a row may call the tokenizer more than once)
	stalled    chan struct{} // closed when the stalling row starts
	release    chan struct{}
}

func (b *blockingTokenizer) Encode(s string) ([]int, []Span, error) {
	b.enter(s)
	return b.ByteTokenizer.Encode(s)
}

func (b *blockingTokenizer) EncodeIDs(s string) ([]int, error) {
	b.enter(s)
	return b.ByteTokenizer.EncodeIDs(s)
}

// enter counts rows begun after the cancel, and stalls on the row "stall"
// until released.
func (b *blockingTokenizer) enter(s string) {
	if b.ctx.Err() != nil && s != "" { // "" is no row: encoding a row may also ask for it
		if _, again := b.seen.LoadOrStore(s, true); !again {
			b.lateStarts.Add(1)
		}
	}
	if s == "stall" {
		close(b.stalled)
		<-b.release
	}
}

// Cancelling a load returns context.Canceled at once, even while a row is
// still being tokenized, and the workers stop at their next row instead
// of tokenizing the rest of the file.
func TestLoadStopsWhenCancelled(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"text": "stall"}` + "\n")
	const rows = 20000
	for i := range rows {
		fmt.Fprintf(&b, "{\"text\": \"row %d\"}\n", i)
	}
	path := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tok := &blockingTokenizer{ctx: ctx, stalled: make(chan struct{}), release: make(chan struct{})}
	defer close(tok.release)
	type result struct {
		ex  []Example
		err error
	}
	done := make(chan result, 1)
	go func() {
		ex, err := Load(ctx, path, Format{Tok: tok}, LoadOptions{Workers: 2})
		done <- result{ex, err}
	}()
	<-tok.stalled
	cancel()
	select {
	case r := <-done:
		if !errors.Is(r.err, context.Canceled) || r.ex != nil {
			t.Fatalf("got %d examples, error %v; want context.Canceled", len(r.ex), r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load did not return within 5 s of the cancel while a row was being tokenized")
	}
	// the other worker stops at its next row: none begins after the cancel
	// (one may have passed its check just before it)
	time.Sleep(200 * time.Millisecond)
	if n := tok.lateStarts.Load(); n > 1 {
		var late []string
		tok.seen.Range(func(k, _ any) bool { late = append(late, k.(string)); return true })
		t.Fatalf("%d rows began tokenizing after the cancel: the workers did not stop: %q", n, late)
	}

	// a context cancelled before the start parses nothing
	pre, stop := context.WithCancel(context.Background())
	stop()
	if _, err := Load(pre, path, ByteFormat(), LoadOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled context: %v", err)
	}
}
