package data

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/readlimit"
)

// Cache keeps tokenized datasets on disk, so that a rerun or a resumed run
// reads a large dataset's tokens instead of tokenizing it again. An entry
// is keyed by the data file's SHA-256 and the Format's fingerprint (the
// tokenizer, the chat template, the loss mode and the vocabulary), so a
// change to any of them misses.
//
// The entry's name is a hash of its key, and the key itself is stored in
// the entry, under its checksum: an entry is used only if it holds the
// key it is looked up by and every id is inside the vocabulary. Anything
// else (an entry copied under another name, a damaged or older entry,
// ids a model cannot embed) is not used: the data file is tokenized
// again, the entry rewritten, and Lookup.Rejected says why. Tokenizing
// again is always right, since the data file was just read whole, while
// refusing would stop a run for a file mixtune can mend itself.
type Cache struct {
	Dir string
}

// cacheMagic starts every entry; its version changes whenever the
// encoding, or what the tokens of a row are, changes. An entry of another
// version is never used; its name differs too, since the key hashed into
// a name includes the magic.
const cacheMagic = "mixtune tokens 2\n"

// Lookup says where Cache.Load's examples came from.
type Lookup struct {
	Hit   bool   // the examples are the entry's
	Entry string // the entry's path
	// Rejected, if not nil, says why the entry that was there was not
	// used; a missing entry is no rejection.
	Rejected error
}

// Load returns the examples of the data file at path as Load would,
// from the cache when it holds them, and stores them otherwise. Failing
// to write the cache is not an error: the examples are returned.
// Cancelling ctx stops tokenizing (see Load); nothing is cached then.
func (c Cache) Load(ctx context.Context, path string, f Format, opt LoadOptions) (ex []Example, look Lookup, err error) {
	sum, err := fileSum(path)
	if err != nil {
		return nil, Lookup{}, err
	}
	key := cacheKey(sum, f)
	h := sha256.Sum256([]byte(cacheMagic + key))
	look.Entry = filepath.Join(c.Dir, hex.EncodeToString(h[:16])+".tokens")
	ex, err = readEntry(look.Entry, key)
	if err == nil {
		if err = f.CheckIDs(path, ex); err != nil {
			err = fmt.Errorf("token cache entry %s: %w", look.Entry, err)
		}
	}
	switch {
	case err == nil:
		look.Hit = true
		return ex, look, nil
	case !errors.Is(err, fs.ErrNotExist):
		look.Rejected = err
	}
	if ex, err = Load(ctx, path, f, opt); err != nil {
		return nil, look, err
	}
	if os.MkdirAll(c.Dir, 0o755) == nil {
		atomicfile.Write(look.Entry, func(w io.Writer) error { return writeEntry(w, key, ex) })
	}
	return ex, look, nil
}

// cacheKey is everything an entry's tokens follow from: the data file's
// content and the format's fingerprint.
func cacheKey(dataSum string, f Format) string {
	return "data sha256 " + dataSum + "\nformat " + f.Fingerprint() + "\n"
}

// CheckIDs refuses examples holding an id outside the format's
// vocabulary (the model's embedding rows), naming the file, the line and
// the id: the model's graph would otherwise fail on it mid-run. name is
// the file the examples came from.
func (f Format) CheckIDs(name string, ex []Example) error {
	vocab := f.vocab()
	for _, e := range ex {
		for i, id := range e.IDs {
			if id < 0 || id >= vocab {
				return rowError(name, e.Line, fmt.Errorf("token %d of the row is id %d, outside the model's vocabulary (size %d)", i, id, vocab))
			}
		}
	}
	return nil
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

// writeEntry encodes examples: the magic, the key's length and bytes,
// the examples' count, then per example its line, its length, its ids and
// its target flags as bits, all varints; a SHA-256 of everything before
// it ends the entry.
func writeEntry(w io.Writer, key string, ex []Example) error {
	h := sha256.New()
	bw := bufio.NewWriter(io.MultiWriter(w, h))
	var buf [binary.MaxVarintLen64]byte
	put := func(v int) { bw.Write(buf[:binary.PutUvarint(buf[:], uint64(v))]) }
	bw.WriteString(cacheMagic)
	put(len(key))
	bw.WriteString(key)
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

// readEntry decodes what writeEntry wrote for key, refusing anything
// damaged and an entry written for another key. Its errors name the
// entry; a missing one is fs.ErrNotExist.
func readEntry(path, key string) ([]Example, error) {
	ex, err := decodeEntry(path, key)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("token cache entry %s: %w", path, err)
	}
	return ex, err
}

func decodeEntry(path, key string) ([]Example, error) {
	b, err := readlimit.ReadFile(path, readlimit.TokenCache)
	if err != nil {
		return nil, err
	}
	if len(b) < len(cacheMagic)+sha256.Size || !bytes.HasPrefix(b, []byte(cacheMagic)) {
		return nil, fmt.Errorf("not an entry of this version (want %q)", strings.TrimSpace(cacheMagic))
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, errors.New("fails its checksum")
	}
	r := bytes.NewReader(body[len(cacheMagic):])
	get := func() (int, error) {
		v, err := binary.ReadUvarint(r)
		if err != nil || v > 1<<40 {
			return 0, errors.New("malformed")
		}
		return int(v), nil
	}
	kl, err := get()
	if err != nil || kl > r.Len() {
		return nil, errors.New("malformed")
	}
	stored := make([]byte, kl)
	io.ReadFull(r, stored)
	if string(stored) != key {
		return nil, errors.New("holds the tokens of other data or another format (a copied or renamed entry)")
	}
	n, err := get()
	if err != nil || n > r.Len() {
		return nil, errors.New("malformed")
	}
	ex := make([]Example, n)
	for i := range ex {
		line, err1 := get()
		l, err2 := get()
		if err1 != nil || err2 != nil || l > r.Len() {
			return nil, errors.New("malformed")
		}
		e := Example{Line: line, IDs: make([]int, l), Target: make([]bool, l)}
		for j := range e.IDs {
			if e.IDs[j], err = get(); err != nil {
				return nil, err
			}
		}
		bits := make([]byte, (l+7)/8)
		if _, err := io.ReadFull(r, bits); err != nil {
			return nil, errors.New("malformed")
		}
		for j := range e.Target {
			e.Target[j] = bits[j/8]&(1<<(j%8)) != 0
		}
		ex[i] = e
	}
	if r.Len() != 0 {
		return nil, errors.New("has trailing bytes")
	}
	return ex, nil
}
