package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testUserCache points the user cache directory (os.UserCacheDir) into
// dir for the test, and returns it; it skips the test where there is none.
func testUserCache(t *testing.T, dir string) string {
	t.Helper()
	cacheHome := filepath.Join(dir, "cache-home")
	t.Setenv("XDG_CACHE_HOME", cacheHome) // os.UserCacheDir on Linux and the BSDs
	t.Setenv("HOME", cacheHome)           // on macOS
	t.Setenv("LocalAppData", cacheHome)   // on Windows
	userCache, err := os.UserCacheDir()
	if err != nil {
		t.Skip("no user cache directory:", err)
	}
	return userCache
}

// A token cache entry is used only for the data and format it was written
// for, and only with ids the model can embed. Before, a valid entry of
// data A copied under data B's name trained B on A's tokens silently, and
// an entry with a valid checksum holding id 99999 failed at step 1 with
// gorgonia's VM text, after the run directory was written. Now each is
// not used, with a warning, B is tokenized again, and the run trains B.
func TestTokenCacheEntriesAreChecked(t *testing.T) {
	dir := fixture(t)
	userCache := testUserCache(t, dir)
	tokens := filepath.Join(userCache, "mixtune", "tokens")
	// two datasets above cacheMinBytes, with different row counts
	data := func(name string, rows int) string {
		var b strings.Builder
		for i := range rows {
			fmt.Fprintf(&b, `{"text": "%s row %06d, a line long enough that the file passes the cache size"}`+"\n", name, i)
		}
		if b.Len() < cacheMinBytes {
			t.Fatalf("%s is %d bytes, under the cache's %d", name, b.Len(), cacheMinBytes)
		}
		p := filepath.Join(dir, name+".jsonl")
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := data("a", 14000), data("b", 15000)
	run := func(train, name string) string {
		t.Helper()
		r, err := Load(writeConfig(t, dir, goodConfig), []string{"name=" + name, "data.train=" + train, "data.cache=true",
			"train.steps=1", "schedule.warmup_steps=0", "train.eval_every=100", "task.eval_file=", "compute.blas=gonum"})
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := Run(context.Background(), r, Options{Out: &out}); err != nil {
			t.Fatalf("run %s on %s: %v\n%s", name, train, err, out.String())
		}
		return out.String()
	}
	entries := func() []string {
		e, _ := filepath.Glob(filepath.Join(tokens, "*.tokens"))
		return e
	}
	const trainsB = "data: 15000 train examples"
	run(a, "a")
	entryA := entries()[0]
	run(b, "b")
	entryB := slices.DeleteFunc(entries(), func(e string) bool { return e == entryA })[0]
	if out := run(b, "b-hit"); !strings.Contains(out, trainsB) || !strings.Contains(out, b+": tokens from the cache") {
		t.Fatalf("B's own entry was not used:\n%s", out)
	}

	// A's entry copied under B's name
	copyA, err := os.ReadFile(entryA)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(entryB, copyA, 0o644); err != nil {
		t.Fatal(err)
	}
	out := run(b, "b-copied")
	if !strings.Contains(out, trainsB) || strings.Contains(out, "tokens from the cache") ||
		!strings.Contains(out, "warning: token cache entry "+entryB+": holds the tokens of other data or another format") {
		t.Fatalf("A's entry under B's name:\n%s", out)
	}
	if out := run(b, "b-rewritten"); !strings.Contains(out, trainsB) || !strings.Contains(out, b+": tokens from the cache") {
		t.Fatalf("B's entry was not rewritten:\n%s", out)
	}

	// B's entry with its first id (BOS 256, varint 80 02: the key, the
	// count 15000, the line 1 and the length hold no such bytes) made
	// 99999, and its checksum made valid again
	e, err := os.ReadFile(entryB)
	if err != nil {
		t.Fatal(err)
	}
	body := e[:len(e)-sha256.Size]
	at := bytes.Index(body, []byte{0x80, 0x02})
	body = slices.Concat(body[:at], []byte{0x9f, 0x8d, 0x06}, body[at+2:])
	sum := sha256.Sum256(body)
	if err := os.WriteFile(entryB, append(body, sum[:]...), 0o644); err != nil {
		t.Fatal(err)
	}
	out = run(b, "b-99999")
	if !strings.Contains(out, trainsB) || strings.Contains(out, "tokens from the cache") ||
		!strings.Contains(out, "warning: token cache entry "+entryB+": "+b+":1: token 0 of the row is id 99999, outside the model's vocabulary (size 259); not used: "+b+" was tokenized again") {
		t.Fatalf("an entry holding id 99999:\n%s", out)
	}
	if out := run(b, "b-mended"); !strings.Contains(out, b+": tokens from the cache") {
		t.Fatalf("B's entry was not rewritten:\n%s", out)
	}
}

// Every id the data gives, cached or freshly tokenized, is checked against
// the model's vocabulary before the run directory exists: an id past it
// is bad input (exit 2) naming the file, the line, the token and the
// sizes. The tokenizer is made to outgrow the vocabulary here by hand
// (validation refuses such a pair), standing for any way an id past the
// embedding could reach the data.
func TestDataIDsCheckedBeforeRunDir(t *testing.T) {
	dir := fixture(t)
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"data.cache=false", "compute.blas=gonum"})
	if err != nil {
		t.Fatal(err)
	}
	r.text.Format.VocabSize = 200 // below the byte tokenizer's BOS, 256
	_, err = Run(context.Background(), r, Options{Out: io.Discard})
	want := filepath.Join(dir, "train.jsonl") + ":1: token 0 of the row is id 256, outside the model's vocabulary (size 200)"
	if !IsInputError(err) || err.Error() != want {
		t.Fatalf("got %v, want the input error %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "runs")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the run wrote its output directory: %v", err)
	}
}
