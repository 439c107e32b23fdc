package train

import (
	"fmt"
	"os"
	"runtime"

	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/internal/readlimit"
)

// What the data takes in memory, per byte of the JSONL files, from peak
// RSS measured on 5 MB rows (`mixtune train`, one row, seq_len 32):
// tokenizing a row holds at most about 60 bytes a byte (the byte-level
// tiny-byte tokenizer, a token a byte: BPE's symbols, 16 bytes a byte,
// the ids, the Go heap's slack), 25 to 50 with real BPE tokenizers
// (Llama 3, Qwen 3, Llama 2); the examples kept for training hold 9 bytes
// a token (an id and a target flag), at most a token a byte, and the
// file's text is held while its rows are parsed.
const (
	tokenizeBytesPerByte = 64
	heldBytesPerByte     = 10
)

// dataMemory estimates the memory of data files of fileBytes in all:
// the rows kept for training, and, while they are tokenized, the rows in
// flight. data.Load tokenizes one row longer than data.BigRowBytes at a
// time, so those are one row of up to maxRow and one of up to
// data.BigRowBytes on each other worker.
func dataMemory(fileBytes int64, maxRow, workers int) (held, tokenizing uint64) {
	s := float64(fileBytes)
	inFlight := min(s, float64(maxRow)) + float64(max(workers-1, 0))*min(s, data.BigRowBytes)
	return uint64(heldBytesPerByte * s), uint64(tokenizeBytesPerByte * inFlight)
}

// dataFileBytes is the size of the training and validation files (a file
// that cannot be read counts 0: reading it reports the error); a Parquet
// file counts its data uncompressed, the text its rows hold.
func (r *Recipe) dataFileBytes() int64 {
	var n int64
	for _, p := range []string{r.Data.Train, r.Data.Validation} {
		if p == "" {
			continue
		}
		if data.IsParquet(p) {
			if size, ok := data.ParquetDataBytes(p); ok {
				n += size
			}
			continue
		}
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			n += st.Size()
		}
	}
	return n
}

// checkDataMemory refuses, before a row is tokenized, data whose
// estimated memory is more than the machine's have bytes.
func checkDataMemory(r *Recipe, have uint64) error {
	size := r.dataFileBytes()
	held, tokenizing := dataMemory(size, r.text.Format.MaxRow(), runtime.GOMAXPROCS(0))
	need := held + tokenizing + runtimeBytes
	if need <= have {
		return nil
	}
	return inputError(fmt.Errorf("reading and tokenizing the data (%s of text) needs an estimated %s of memory (%s for the tokens kept, %s while the largest rows are tokenized), more than this machine's %s; "+
		"use less data, or lower data.max_row_bytes (%s) so that long rows are refused",
		readlimit.Bytes(size), gib(need), gib(held), gib(tokenizing), gib(have), readlimit.Bytes(int64(r.text.Format.MaxRow()))))
}
