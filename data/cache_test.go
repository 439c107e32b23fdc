package data

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The cache returns what tokenizing returns; a second load hits; a change
// of the data or of the format misses; a damaged entry is ignored and
// rewritten.
func TestCache(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "d.jsonl")
	write := func(s string) {
		if err := os.WriteFile(data, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("{\"text\": \"héllo\"}\n\n{\"prompt\": \"a\", \"completion\": \"b\"}\n")
	c := Cache{Dir: filepath.Join(dir, "cache")}
	want, err := LoadJSONL(data, ByteFormat())
	if err != nil {
		t.Fatal(err)
	}
	load := func(f Format) ([]Example, bool) {
		t.Helper()
		ex, look, err := c.Load(context.Background(), data, f, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ex, look.Hit
	}
	if ex, hit := load(ByteFormat()); hit || !reflect.DeepEqual(ex, want) {
		t.Fatalf("first load: hit %v, %v", hit, ex)
	}
	if ex, hit := load(ByteFormat()); !hit || !reflect.DeepEqual(ex, want) {
		t.Fatalf("second load: hit %v, %+v\nwant %+v", hit, ex, want)
	}
	other := ByteFormat()
	other.VocabSize = 300
	if _, hit := load(other); hit {
		t.Fatal("another format hit the cache")
	}
	write("{\"text\": \"hello\"}\n")
	if ex, hit := load(ByteFormat()); hit || len(ex) != 1 {
		t.Fatal("changed data hit the cache")
	}
	entries, _ := filepath.Glob(filepath.Join(c.Dir, "*.tokens"))
	if len(entries) != 3 {
		t.Fatalf("entries %v", entries)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(e)
		b[len(b)/2] ^= 1
		os.WriteFile(e, b, 0o644)
	}
	if ex, hit := load(ByteFormat()); hit || len(ex) != 1 {
		t.Fatal("a damaged entry was used")
	}
	if _, hit := load(ByteFormat()); !hit {
		t.Fatal("the damaged entry was not rewritten")
	}
	if _, err := readEntry(entries[0]+"x", ""); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
}

// An entry is used only for the key it was written for and with ids the
// model can embed. An entry of data A copied under data B's name, one
// under its own key holding an id past the vocabulary (its checksum
// valid), one of the previous format and a damaged one are each not used:
// B is tokenized again, Lookup.Rejected says why, and the entry is
// rewritten, so the next load hits with B's own tokens.
func TestCacheRejectsEntriesNotItsOwn(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.jsonl", "{\"text\": \"data A\"}\n")
	b := write("b.jsonl", "{\"text\": \"data B, longer\"}\n{\"text\": \"second\"}\n")
	f := ByteFormat()
	want, err := LoadJSONL(b, f)
	if err != nil {
		t.Fatal(err)
	}
	withSum := func(body []byte) []byte {
		sum := sha256.Sum256(body)
		return append(body, sum[:]...)
	}
	cases := []struct {
		name  string
		entry func(t *testing.T, c Cache, bEntry string) []byte // the bytes put under B's name
		want  string                                            // in Rejected
	}{
		{"A's entry copied under B's name", func(t *testing.T, c Cache, _ string) []byte {
			_, look, err := c.Load(context.Background(), a, f, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			e, err := os.ReadFile(look.Entry)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}, "holds the tokens of other data or another format"},
		{"an id past the vocabulary", func(t *testing.T, _ Cache, _ string) []byte {
			sum, err := fileSum(b)
			if err != nil {
				t.Fatal(err)
			}
			bad := []Example{{Line: 1, IDs: []int{256, 99999, 257}, Target: []bool{false, true, true}}}
			var buf bytes.Buffer
			if err := writeEntry(&buf, cacheKey(sum, f), bad); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}, "b.jsonl:1: token 1 of the row is id 99999, outside the model's vocabulary (size 259)"},
		{"the previous format", func(*testing.T, Cache, string) []byte {
			return withSum([]byte("mixtune tokens 1\n\x01\x01\x01\x41\x00"))
		}, `not an entry of this version (want "mixtune tokens 2")`},
		{"damaged", func(t *testing.T, _ Cache, bEntry string) []byte {
			e, err := os.ReadFile(bEntry)
			if err != nil {
				t.Fatal(err)
			}
			e[len(e)/2] ^= 1
			return e
		}, "fails its checksum"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Cache{Dir: filepath.Join(t.TempDir(), "cache")}
			_, look, err := c.Load(context.Background(), b, f, LoadOptions{}) // B's own entry, to learn its name
			if err != nil || look.Hit || look.Rejected != nil {
				t.Fatalf("first load: %+v, %v", look, err)
			}
			if err := os.WriteFile(look.Entry, tc.entry(t, c, look.Entry), 0o644); err != nil {
				t.Fatal(err)
			}
			ex, look, err := c.Load(context.Background(), b, f, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if look.Hit || look.Rejected == nil || !strings.Contains(look.Rejected.Error(), tc.want) ||
				!strings.Contains(look.Rejected.Error(), "token cache entry "+look.Entry+": ") {
				t.Fatalf("Lookup %+v, want a rejection saying %q", look, tc.want)
			}
			if !reflect.DeepEqual(ex, want) {
				t.Fatalf("examples %+v, want B's %+v", ex, want)
			}
			ex, look, err = c.Load(context.Background(), b, f, LoadOptions{})
			if err != nil || !look.Hit || look.Rejected != nil || !reflect.DeepEqual(ex, want) {
				t.Fatalf("the entry was not rewritten: %+v, %v", look, err)
			}
		})
	}
}

// CheckIDs names the file, the line, the token and the id, against the
// format's vocabulary: the model's when it sets one, else the tokenizer's.
func TestCheckIDs(t *testing.T) {
	ex := []Example{{Line: 2, IDs: []int{1, 2}}, {Line: 7, IDs: []int{256, 300, 5}}}
	for _, c := range []struct {
		vocab int
		want  string
	}{
		{0, "d.jsonl:7: token 1 of the row is id 300, outside the model's vocabulary (size 259)"},
		{301, ""},
		{2, "d.jsonl:2: token 1 of the row is id 2, outside the model's vocabulary (size 2)"},
	} {
		f := ByteFormat()
		f.VocabSize = c.vocab
		err := f.CheckIDs("d.jsonl", ex)
		var le *LineError
		if c.want == "" && err != nil || c.want != "" && (err == nil || err.Error() != c.want || !errors.As(err, &le)) {
			t.Errorf("vocab %d: %v, want %q", c.vocab, err, c.want)
		}
	}
	if err := ByteFormat().CheckIDs("d.jsonl", []Example{{Line: 1, IDs: []int{-1}}}); err == nil {
		t.Error("a negative id passed")
	}
}
