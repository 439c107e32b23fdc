package data

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A row with more text than Format.MaxRowBytes is refused before it is
// tokenized, naming the file, the line, the field, the size and the
// limit: a 50 MB row used to be tokenized whole, at about 150 bytes of
// memory per byte.
func TestRowCap(t *testing.T) {
	big := strings.Repeat("x", 3000)
	f := ByteFormat()
	f.Chat = chatML{}
	f.MaxRowBytes = 2 << 10
	for _, tc := range []struct{ name, row, want string }{
		{"text", `{"text": "` + big + `"}`,
			`rows.jsonl:2: "text" is 2.9 KiB (3000 bytes), more than the 2 KiB a row may have (data.max_row_bytes)`},
		{"prompt and completion", `{"prompt": "` + big[:1500] + `", "completion": "` + big[:1500] + `"}`,
			`rows.jsonl:2: "prompt" and "completion" are 2.9 KiB (3000 bytes), more than the 2 KiB`},
		{"alpaca prompt", `{"instruction": "` + big[:2000] + `", "output": "y"}`,
			`rows.jsonl:2: the conversation rendered through the chat template is 2.0 KiB (2062 bytes), more than the 2 KiB`},
		{"conversation", `{"messages": [{"role": "user", "content": "` + big[:1000] + `"}, {"role": "assistant", "content": "` + big[:1100] + `"}]}`,
			`rows.jsonl:2: the conversation rendered through the chat template is 2.1 KiB (2161 bytes), more than the 2 KiB`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseJSONL("rows.jsonl", strings.NewReader("{\"text\": \"ok\"}\n"+tc.row+"\n"), f)
			var re *RowTooLargeError
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.As(err, &re) {
				t.Fatalf("ParseJSONL: %v\nwant %s", err, tc.want)
			}
		})
	}
	// at the cap is fine
	if _, err := ParseJSONL("rows.jsonl", strings.NewReader(`{"text": "`+big[:2048]+`"}`), f); err != nil {
		t.Fatalf("a row of exactly the cap: %v", err)
	}
}

func TestDefaultRowCap(t *testing.T) {
	if got := (Format{}).MaxRow(); got != DefaultMaxRowBytes {
		t.Fatalf("MaxRow of the zero Format = %d, want %d", got, DefaultMaxRowBytes)
	}
}

// countingTokenizer records how many encodings of long texts run at once.
type countingTokenizer struct {
	ByteTokenizer
	mu        sync.Mutex
	now, most int
}

func (c *countingTokenizer) EncodeIDs(s string) ([]int, error) {
	if len(s) > BigRowBytes/2 {
		c.mu.Lock()
		c.now++
		c.most = max(c.most, c.now)
		c.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // give another worker the time to start one
		defer func() { c.mu.Lock(); c.now--; c.mu.Unlock() }()
	}
	return c.ByteTokenizer.EncodeIDs(s)
}

// Rows over BigRowBytes are tokenized one at a time, however many workers
// there are, so that the memory of tokenization is bounded by one large
// row, not one per worker.
func TestBigRowsOneAtATime(t *testing.T) {
	tok := &countingTokenizer{}
	var rows strings.Builder
	for range 4 {
		rows.WriteString(`{"text": "` + strings.Repeat("y", BigRowBytes+10) + "\"}\n")
		rows.WriteString(strings.Repeat("\n", linesPerBlock-1)) // each row in a block of its own
	}
	f := Format{Tok: tok}
	ex, err := parseLines(context.Background(), "big.jsonl", strings.NewReader(rows.String()), f, MaxLineBytes, LoadOptions{Workers: 4})
	if err != nil || len(ex) != 4 {
		t.Fatalf("%d examples, %v", len(ex), err)
	}
	if tok.most != 1 {
		t.Fatalf("%d large rows were tokenized at once, want 1", tok.most)
	}
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// firstReadTokenizer notes how much of the input had been read when the
// first row was tokenized.
type firstReadTokenizer struct {
	ByteTokenizer
	in        *countingReader
	once      sync.Once
	readFirst int64
}

func (f *firstReadTokenizer) EncodeIDs(s string) ([]int, error) {
	f.once.Do(func() { f.readFirst = f.in.n.Load() })
	return f.ByteTokenizer.EncodeIDs(s)
}

// Rows are parsed as the file is read, not after the whole file is in
// memory: when the first row is tokenized, most of a large file is still
// unread.
func TestRowsParsedWhileReading(t *testing.T) {
	line := `{"text": "` + strings.Repeat("z", 1000) + "\"}\n"
	in := &countingReader{r: strings.NewReader(strings.Repeat(line, 20*linesPerBlock))}
	tok := &firstReadTokenizer{in: in}
	ex, err := parseLines(context.Background(), "s.jsonl", in, Format{Tok: tok}, MaxLineBytes, LoadOptions{Workers: 2, total: -1})
	if err != nil || len(ex) != 20*linesPerBlock {
		t.Fatalf("%d examples, %v", len(ex), err)
	}
	total := int64(20 * linesPerBlock * len(line))
	if tok.readFirst > total/2 {
		t.Fatalf("%d of %d bytes were read before the first row was tokenized", tok.readFirst, total)
	}
}
