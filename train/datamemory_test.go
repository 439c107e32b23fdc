package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/data"
)

func TestDataMemory(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		size                     int64
		maxRow, workers          int
		wantHeld, wantTokenizing uint64
	}{
		{"one small file", 1000, 16 << 20, 4, 10 * 1000, 64 * 4 * 1000},
		{"one 50 MB row", 50 << 20, 64 << 20, 1, 10 * 50 << 20, 64 * 50 << 20},
		{"capped rows, two workers", 1 << 30, 16 << 20, 2, 10 << 30, 64 * (16<<20 + 1<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held, tok := dataMemory(tc.size, tc.maxRow, tc.workers)
			if held != tc.wantHeld || tok != tc.wantTokenizing {
				t.Fatalf("dataMemory = %d, %d; want %d, %d", held, tok, tc.wantHeld, tc.wantTokenizing)
			}
		})
	}
}

// A data file whose tokenization would not fit is refused before a row is
// tokenized: one 50 MB row used to be tokenized (at 6 GiB) with no word
// from the memory estimate.
func TestCheckDataMemoryRefusesBeforeTokenizing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.jsonl")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 50<<20); err != nil { // sparse
		t.Fatal(err)
	}
	r := &Recipe{Config: Config{Data: DataConfig{Train: path}}, text: &Text{Format: data.Format{MaxRowBytes: 64 << 20}}}
	err := checkDataMemory(r, 2<<30)
	if err == nil || !strings.Contains(err.Error(), "reading and tokenizing the data (50 MiB of text) needs an estimated") ||
		!strings.Contains(err.Error(), "lower data.max_row_bytes") {
		t.Fatalf("checkDataMemory on 2 GiB: %v", err)
	}
	if err := checkDataMemory(r, 64<<30); err != nil {
		t.Fatalf("checkDataMemory on 64 GiB: %v", err)
	}
}
