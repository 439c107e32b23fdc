package data

import (
	"context"
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
		ex, hit, err := c.Load(context.Background(), data, f, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ex, hit
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
	if _, err := readEntry(entries[0] + "x"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatal(err)
	}
}
