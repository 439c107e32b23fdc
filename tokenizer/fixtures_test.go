package tokenizer

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// The fixture tokenizers, in the order of the parity report. Their files
// and Hugging Face's results on the corpus come from
// scripts/gen_tokenizer_fixtures.js.
var fixtureNames = []string{
	"llama3", "llama3_1", "qwen3", "llama2", "deepseek_v3", "claude",
	"synth-bytelevel", "synth-metaspace", "synth-splits", "synth-suffix", "synth-fallback", "tiny-byte",
}

// byteLevelFixtures decode every valid text without special tokens back to
// itself.
var byteLevelFixtures = map[string]bool{"llama3": true, "llama3_1": true, "qwen3": false, "deepseek_v3": true, "tiny-byte": true}

func readGzipFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := readMaybeGzip(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixtureJSON returns the tokenizer.json bytes of a fixture tokenizer.
func fixtureJSON(t testing.TB, name string) []byte {
	t.Helper()
	for _, p := range []string{
		filepath.Join("testdata", "models", name, "tokenizer.json.gz"),
		filepath.Join("testdata", "models", name, "tokenizer.json"),
		filepath.Join("testdata", name, "tokenizer.json"),
	} {
		if _, err := os.Stat(p); err == nil {
			return readGzipFile(t, p)
		}
	}
	vb, err := os.ReadFile(filepath.Join("testdata", "variants", name+".json"))
	if err != nil {
		t.Fatalf("no tokenizer for fixture %s: %v", name, err)
	}
	var v struct {
		Base     string                     `json:"base"`
		Override map[string]json.RawMessage `json:"override"`
	}
	if err := json.Unmarshal(vb, &v); err != nil {
		t.Fatalf("variant %s: %v", name, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(fixtureJSON(t, v.Base), &top); err != nil {
		t.Fatal(err)
	}
	for k, raw := range v.Override {
		top[k] = raw
	}
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	tokCacheMu sync.Mutex
	tokCache   = map[string]*Tokenizer{}
)

// fixtureTokenizer parses a fixture tokenizer once per test binary.
func fixtureTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tokCacheMu.Lock()
	defer tokCacheMu.Unlock()
	if tok, ok := tokCache[name]; ok {
		return tok
	}
	tok, err := Parse(name, fixtureJSON(t, name))
	if err != nil {
		t.Fatal(err)
	}
	tokCache[name] = tok
	return tok
}

var corpusOnce = sync.OnceValues(func() ([]string, error) {
	b, err := readMaybeGzip(filepath.Join("testdata", "corpus.jsonl.gz"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var s string
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
})

func corpus(t testing.TB) []string {
	t.Helper()
	c, err := corpusOnce()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// document is the ~1 MB text at the end of the corpus.
func document(t testing.TB) string {
	c := corpus(t)
	return c[len(c)-1]
}

// hfResult is Hugging Face's encoding of one string with or without
// special tokens. Big strings have digests instead of lists.
type hfResult struct {
	IDs           []int           `json:"ids"`
	Offsets       [][2]int        `json:"offsets"`
	N             int             `json:"n"`
	IDsSHA256     string          `json:"ids_sha256"`
	OffsetsSHA256 string          `json:"offsets_sha256"`
	Skip          json.RawMessage `json:"skip"`
	Keep          json.RawMessage `json:"keep"`
}

type hfRow struct {
	I       int      `json:"i"`
	Plain   hfResult `json:"plain"`
	Special hfResult `json:"special"`
}

func fixtureRows(t testing.TB, name string) []hfRow {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "fixtures", name+".jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 64<<20)
	var rows []hfRow
	for sc.Scan() {
		var r hfRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s fixture line %d: %v", name, len(rows)+1, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].I < rows[j].I })
	return rows
}
