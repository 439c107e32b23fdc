package yamlconf

import (
	"fmt"
	"testing"
)

type inner struct {
	N     int      `yaml:"n"`
	U     uint64   `yaml:"u"`
	F     float64  `yaml:"f"`
	B     bool     `yaml:"b"`
	S     string   `yaml:"s"`
	L     []string `yaml:"list"`
	Other int      `yaml:"other"`
}

type outer struct {
	Name  string `yaml:"name"`
	Inner inner  `yaml:"inner"`
	Opt   *inner `yaml:"opt"`
}

func TestDecodeTypesAndOrigins(t *testing.T) {
	src := "name: x\ninner:\n  n: 3\n  u: 0x10\n  f: 1e-3\n  b: true\n  s: 12\n  list: [a, b]\nopt:\n  n: 1\n"
	var v outer
	d, err := Decode("c.yaml", []byte(src), []string{"inner.other=7", "new.key=1"}, &v)
	if err == nil || err.Error() != `--set new.key=1: (top level): unknown field "new" (known: inner, name, opt)` {
		t.Fatalf("unknown override: %v", err)
	}
	v = outer{}
	d, err = Decode("c.yaml", []byte(src), []string{"inner.other=7"}, &v)
	if err != nil {
		t.Fatal(err)
	}
	want := inner{N: 3, U: 16, F: 1e-3, B: true, S: "12", L: []string{"a", "b"}, Other: 7}
	if v.Name != "x" || v.Opt == nil || v.Opt.N != 1 || v.Inner.N != want.N || v.Inner.U != want.U || v.Inner.F != want.F ||
		!v.Inner.B || v.Inner.S != "12" || len(v.Inner.L) != 2 || v.Inner.Other != 7 {
		t.Fatalf("decoded %+v", v)
	}
	for field, want := range map[string]string{
		"inner.n":     "c.yaml:3: inner.n: x",
		"inner.other": "--set inner.other=7: inner.other: x",
		"inner.f":     "c.yaml:5: inner.f: x",
		"missing":     "c.yaml: missing: x (default)",
	} {
		if got := d.Errorf(field, "x").Error(); got != want {
			t.Errorf("Errorf(%s) = %q, want %q", field, got, want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"inner:\n  n: 1.5\n", "c.yaml:2: inner.n: expected an integer, got 1.5"},
		{"inner:\n  u: -1\n", "c.yaml:2: inner.u: expected a non-negative integer, got -1"},
		{"inner:\n  b: yes\n", `c.yaml:2: inner.b: expected true or false, got "yes"`},
		{"inner:\n  f: .nan\n", "c.yaml:2: inner.f: expected a finite number, got .nan"},
		{"inner:\n  s: [1]\n", "c.yaml:2: inner.s: expected a string, got a list"},
		{"inner:\n  nn: 1\n", `c.yaml:2: inner: unknown field "nn" (did you mean "n"?)`},
		{"- 1\n", "c.yaml:1: the config must be a mapping of keys to values"},
		{"name: [\n", "c.yaml:2: invalid YAML: did not find expected node content"},
	} {
		var v outer
		_, err := Decode("c.yaml", []byte(tc.src), nil, &v)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
	var v outer
	if _, err := Decode("c.yaml", nil, []string{"inner.s="}, &v); err != nil || v.Inner.S != "" {
		t.Errorf("an empty --set value: %v, %+v", err, v)
	}
	if _, err := Decode("c.yaml", nil, []string{"noequals"}, &v); err == nil || err.Error() != "--set noequals: expected key.path=value" {
		t.Errorf("malformed --set: %v", err)
	}
	if _, err := Decode("c.yaml", []byte("name: x\n"), []string{"name.sub=1"}, &v); err == nil || err.Error() != "--set name.sub=1: name is not a mapping" {
		t.Errorf("--set through a scalar: %v", err)
	}
}

func TestSuggest(t *testing.T) {
	names := []string{"lora_alpha", "lora_dropout", "r", "target_modules"}
	for key, want := range map[string]string{
		"lora_alpah":     "lora_alpha", // transposition
		"lora_dropuot":   "lora_dropout",
		"target_module":  "target_modules",
		"Target_Modules": "target_modules",
		"completely":     "",
	} {
		if got := suggest(key, names); got != want {
			t.Errorf("suggest(%q) = %q, want %q", key, got, want)
		}
	}
	if d := editDistance("ab", "ba"); d != 1 {
		t.Errorf("a transposition costs %d, want 1", d)
	}
}

// A second document is refused, never silently dropped; in a --set value too.
func TestOneDocument(t *testing.T) {
	for _, tc := range []struct {
		src  string
		sets []string
		want string
	}{
		{"name: a\n---\nname: b\n", nil, `c.yaml:2: a second YAML document (after "---") is not allowed: a config is one document`},
		{"name: a\n---\n", nil, `c.yaml:2: a second YAML document (after "---") is not allowed: a config is one document`},
		{"name: a\n", []string{"name=x\n---\ny"}, "--set name=x\n---\ny: the value holds a second YAML document (after \"---\"): give one value"},
	} {
		var v outer
		if _, err := Decode("c.yaml", []byte(tc.src), tc.sets, &v); err == nil || err.Error() != tc.want {
			t.Errorf("%q %q: error %v, want %q", tc.src, tc.sets, err, tc.want)
		}
	}
	var v outer
	if _, err := Decode("c.yaml", []byte("---\nname: a\n"), nil, &v); err != nil || v.Name != "a" {
		t.Errorf("a document with a leading ---: %v %+v", err, v)
	}
}

// Merge keys follow YAML 1.1: the mapping's own keys win, then earlier
// merged mappings over later ones; a duplicate written twice is still one.
func TestMergeKeys(t *testing.T) {
	src := "base: &b {n: 1, s: base, f: 0.5}\nmore: &m {n: 7, b: true}\ninner:\n  <<: [*b, *m]\n  s: own\nopt:\n  <<: *m\n"
	var v struct {
		Base  inner  `yaml:"base"`
		More  inner  `yaml:"more"`
		Inner inner  `yaml:"inner"`
		Opt   *inner `yaml:"opt"`
	}
	d, err := Decode("c.yaml", []byte(src), nil, &v)
	if err != nil {
		t.Fatal(err)
	}
	if v.Inner.N != 1 || v.Inner.S != "own" || v.Inner.F != 0.5 || !v.Inner.B || v.Opt == nil || v.Opt.N != 7 || !v.Opt.B {
		t.Fatalf("merged %+v, opt %+v", v.Inner, v.Opt)
	}
	if got := d.Errorf("inner.s", "x").Error(); got != "c.yaml:5: inner.s: x" {
		t.Errorf("origin of an own key: %q", got)
	}
	var bad outer
	if _, err := Decode("c.yaml", []byte("inner:\n  <<: 3\n"), nil, &bad); err == nil ||
		err.Error() != "c.yaml:2: inner: a merge key (<<) takes a mapping or a list of mappings, got 3" {
		t.Errorf("merge of a scalar: %v", err)
	}
	if _, err := Decode("c.yaml", []byte("x: &a {zz: 1}\ninner:\n  <<: *a\n"), nil, &bad); err == nil ||
		err.Error() != `c.yaml:1: (top level): unknown field "x" (known: inner, name, opt)`+"\n"+`c.yaml:1: inner: unknown field "zz" (did you mean "n"?)` {
		t.Errorf("merged unknown key: %v", err)
	}
}

// color is a TextUnmarshaler: the decoder hands it the scalar and
// locates its error.
type color int

func (c *color) UnmarshalText(b []byte) error {
	switch string(b) {
	case "red":
		*c = 1
	case "blue":
		*c = 2
	default:
		return fmt.Errorf("unknown color %q (want red or blue)", b)
	}
	return nil
}

func TestTextUnmarshaler(t *testing.T) {
	var v struct {
		C  color   `yaml:"c"`
		Cs []color `yaml:"cs"`
	}
	if _, err := Decode("c.yaml", []byte("c: blue\ncs: [red, blue]\n"), nil, &v); err != nil || v.C != 2 || len(v.Cs) != 2 || v.Cs[0] != 1 {
		t.Fatalf("%v %+v", err, v)
	}
	for src, want := range map[string]string{
		"c: green\n":   `c.yaml:1: c: unknown color "green" (want red or blue)`,
		"c: [red]\n":   "c.yaml:1: c: expected a single value, got a list",
		"cs: [red, 3]": `c.yaml:1: cs[1]: unknown color "3" (want red or blue)`,
	} {
		if _, err := Decode("c.yaml", []byte(src), nil, &v); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %q", src, err, want)
		}
	}
}

// Syntax errors point at the line of the problem, whether yaml.v3's
// scanner or its parser found it (they count lines differently). Found by
// FuzzDecode: scanner messages that begin "did not find expected" were
// taken for parser ones and came out a line late.
func TestSyntaxErrorLines(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"name: x\ninner: |A\n", "c.yaml:2: invalid YAML: did not find expected comment or line break"},
		{"\r|A", "c.yaml:2: invalid YAML: did not find expected comment or line break"},
		{"name: x\ninner: !<a\n", "c.yaml:2: invalid YAML: did not find the expected '>'"},
		{"name: x\ninner: [\n", "c.yaml:3: invalid YAML: did not find expected node content"},
		{"name: x\ninner: {n: 1\nname: y\n", "c.yaml:2: invalid YAML: did not find expected ',' or '}'"},
	} {
		var v outer
		_, err := Decode("c.yaml", []byte(tc.src), nil, &v)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}
