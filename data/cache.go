package data

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/readlimit"
)

// Cache keeps tokenized datasets on disk, so that a rerun or a resumed run
// reads a large dataset's tokens instead of tokenizing it again. An entry
// is keyed by the data file's SHA-256 and the Format's fingerprint (the
// tokenizer, the chat template and the loss mode), so a change to any of
// them misses; a damaged entry is ignored and rewritten.
type Cache struct {
	Dir string
}

// cacheMagic starts every entry; its version changes whenever the
// encoding, or what the tokens of a row are, changes.
const cacheMagic = "mixtune tokens 1\n"

// Load returns the examples of the JSONL file at path as LoadJSONL would,
// from the cache when it holds them (hit), and stores them otherwise.
// Failing to write the cache is not an error: the examples are returned.
func (c Cache) Load(path string, f Format, opt LoadOptions) (ex []Example, hit bool, err error) {
	sum, err := fileSum(path)
	if err != nil {
		return nil, false, err
	}
	h := sha256.Sum256([]byte(cacheMagic + sum + "\n" + f.Fingerprint()))
	entry := filepath.Join(c.Dir, hex.EncodeToString(h[:16])+".tokens")
	if ex, err := readEntry(entry); err == nil {
		return ex, true, nil
	}
	if ex, err = Load(path, f, opt); err != nil {
		return nil, false, err
	}
	if os.MkdirAll(c.Dir, 0o755) == nil {
		atomicfile.Write(entry, func(w io.Writer) error { return writeEntry(w, ex) })
	}
	return ex, false, nil
}

func fileSum(path string) (string, error) {
	file, err := readlimit.Open(path, readlimit.Data)
	if err != nil {
		return "", err
	}
	defer file.Close()
	h := sha256.New()
	if _, err := io.Copy(h, file); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeEntry encodes examples: the magic, their count, then per example
// its line, its length, its ids and its target flags as bits, all
// varints; a SHA-256 of everything before it ends the entry.
func writeEntry(w io.Writer, ex []Example) error {
	h := sha256.New()
	bw := bufio.NewWriter(io.MultiWriter(w, h))
	var buf [binary.MaxVarintLen64]byte
	put := func(v int) { bw.Write(buf[:binary.PutUvarint(buf[:], uint64(v))]) }
	bw.WriteString(cacheMagic)
	put(len(ex))
	for _, e := range ex {
		put(e.Line)
		put(len(e.IDs))
		for _, id := range e.IDs {
			put(id)
		}
		bits := make([]byte, (len(e.Target)+7)/8)
		for i, t := range e.Target {
			if t {
				bits[i/8] |= 1 << (i % 8)
			}
		}
		bw.Write(bits)
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(h.Sum(nil))
	return err
}

// readEntry decodes what writeEntry wrote, refusing anything damaged.
func readEntry(path string) ([]Example, error) {
	b, err := readlimit.ReadFile(path, readlimit.TokenCache)
	if err != nil {
		return nil, err
	}
	if len(b) < len(cacheMagic)+sha256.Size || !bytes.HasPrefix(b, []byte(cacheMagic)) {
		return nil, errors.New("not a token cache entry")
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("token cache entry fails its checksum")
	}
	r := bytes.NewReader(body[len(cacheMagic):])
	get := func() (int, error) {
		v, err := binary.ReadUvarint(r)
		if err != nil || v > 1<<40 {
			return 0, fmt.Errorf("token cache entry is malformed")
		}
		return int(v), nil
	}
	n, err := get()
	if err != nil || n > r.Len() {
		return nil, errors.New("token cache entry is malformed")
	}
	ex := make([]Example, n)
	for i := range ex {
		line, err1 := get()
		l, err2 := get()
		if err1 != nil || err2 != nil || l > r.Len() {
			return nil, errors.New("token cache entry is malformed")
		}
		e := Example{Line: line, IDs: make([]int, l), Target: make([]bool, l)}
		for j := range e.IDs {
			if e.IDs[j], err = get(); err != nil {
				return nil, err
			}
		}
		bits := make([]byte, (l+7)/8)
		if _, err := io.ReadFull(r, bits); err != nil {
			return nil, errors.New("token cache entry is malformed")
		}
		for j := range e.Target {
			e.Target[j] = bits[j/8]&(1<<(j%8)) != 0
		}
		ex[i] = e
	}
	if r.Len() != 0 {
		return nil, errors.New("token cache entry has trailing bytes")
	}
	return ex, nil
}
