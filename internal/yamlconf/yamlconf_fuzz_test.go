package yamlconf

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// fuzzInner and fuzzConf cover every field kind Decode supports.
type fuzzInner struct {
	N  int       `yaml:"n"`
	I8 int8      `yaml:"i8"`
	U  uint64    `yaml:"u"`
	U8 uint8     `yaml:"u8"`
	F  float64   `yaml:"f"`
	F4 float32   `yaml:"f4"`
	B  bool      `yaml:"b"`
	S  string    `yaml:"s"`
	L  []string  `yaml:"list"`
	LF []float64 `yaml:"floats"`
}

type fuzzConf struct {
	Name  string     `yaml:"name"`
	Inner fuzzInner  `yaml:"inner"`
	Opt   *fuzzInner `yaml:"opt,omitempty"`
	Ints  []int      `yaml:"ints"`
}

// FuzzDecode: no document or override makes Decode panic or hang; every
// error is located (it starts with the file name, or with "--set" and the
// override it came from, and a line no later than the document's end); and
// what Decode accepts, written back as YAML, decodes to the same value.
func FuzzDecode(f *testing.F) {
	for _, s := range []struct{ src, set string }{
		{"name: x\ninner:\n  n: 3\n  u: 0x10\n  f: 1e-3\n  b: true\n  s: 12\n  list: [a, b]\nopt:\n  n: 1\n", "inner.n=4"},
		{"", "inner.list=[x, y]"},
		{"", "inner.s="},
		{"", "noequals"},
		{"", ".=1"},
		{"", "opt.floats=[1, 2.5, -3e2]"},
		{"name: x\n", "name.sub=1"},
		{"inner:\n  i8: 200\n  u8: -1\n  f4: 1e300\n", ""},
		{"inner:\n  nn: 1\n  n: 1\n  n: 2\n", ""},
		{"inner: &a {n: 1}\nopt: *a\n", ""},
		{"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\ninner:\n  list: *c\n", ""},
		{"inner:\n  list: &l [a, *l]\n", ""},
		{"--- \nname: a\n--- \nname: b\n", ""},
		{"name: [\n", ""},
		{"\tname: x\n", ""},
		{"name: !!binary aGVsbG8=\n", ""},
		{"inner:\n  f: .nan\n  s: ~\n", ""},
		{"name: \"\\u2028\"\ninner:\n  s: \"a\\rb\"\n", ""},
		{"%YAML 1.1\n---\nname: x\n", ""},
		{"ints: [1, 0x7fffffffffffffff, -9223372036854775808, 1_000]\n", "ints=[0o17, 0b101]"},
	} {
		f.Add([]byte(s.src), s.set)
	}
	f.Fuzz(func(t *testing.T, src []byte, set string) {
		var sets []string
		if set != "" {
			sets = strings.Split(set, "\n")
		}
		var v fuzzConf
		start := time.Now()
		_, err := Decode("c.yaml", src, sets, &v)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("Decode took %v", d)
		}
		if err != nil {
			checkLocated(t, err, "c.yaml", sets, maxLines(src))
			return
		}
		// Round trip: the decoded value, marshalled and decoded again.
		out, err := yaml.Marshal(&v)
		if err != nil {
			t.Fatalf("marshal %+v: %v", v, err)
		}
		var w fuzzConf
		if _, err := Decode("again.yaml", out, nil, &w); err != nil {
			t.Fatalf("decoded %+v, which marshals to\n%s\nand then fails to decode: %v", v, out, err)
		}
		if !reflect.DeepEqual(normalize(v), normalize(w)) {
			t.Fatalf("round trip changed the value:\n%+v\nmarshalled:\n%s\ndecoded:\n%+v", v, out, w)
		}
	})
}

// maxLines bounds the lines of src: YAML breaks lines at \n, \r (\r\n
// counts once, so this may count it twice), NEL, LS and PS.
func maxLines(src []byte) int {
	s := string(src)
	n := 1
	for _, brk := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		n += strings.Count(s, brk)
	}
	return n
}

// normalize makes empty and nil slices equal: yaml.Marshal writes both as [].
func normalize(c fuzzConf) fuzzConf {
	fix := func(in *fuzzInner) {
		if len(in.L) == 0 {
			in.L = nil
		}
		if len(in.LF) == 0 {
			in.LF = nil
		}
	}
	fix(&c.Inner)
	if c.Opt != nil {
		o := *c.Opt
		fix(&o)
		c.Opt = &o
	}
	if len(c.Ints) == 0 {
		c.Ints = nil
	}
	return c
}

// checkLocated fails unless err is a config error each part of which
// names the file (with a line within it) or the override it came from.
func checkLocated(t *testing.T, err error, file string, sets []string, lines int) {
	t.Helper()
	if !IsConfigError(err) {
		t.Fatalf("error %v (%T) is not a config error", err, err)
	}
	var es Errors
	var e *Error
	switch {
	case errors.As(err, &es):
	case errors.As(err, &e):
		es = Errors{e}
	}
	if len(es) == 0 {
		t.Fatalf("an empty error list: %q", err)
	}
	for _, e := range es {
		msg := e.Error()
		switch {
		case e.File == file:
			if e.Line < 0 || e.Line > lines+1 {
				t.Errorf("%q: line %d outside the document's %d lines", msg, e.Line, lines)
			}
		case strings.HasPrefix(e.File, "--set "):
			if e.Line != 0 {
				t.Errorf("%q: an override error with a line", msg)
			}
			found := false
			for _, s := range sets {
				found = found || e.File == "--set "+s
			}
			if !found {
				t.Errorf("%q names an override that was not given (given: %q)", msg, sets)
			}
		default:
			t.Errorf("%q: File %q is neither the file nor an override", msg, e.File)
		}
		if !strings.HasPrefix(msg, e.File) {
			t.Errorf("%q does not start with its file %q", msg, e.File)
		}
		if e.Msg == "" {
			t.Errorf("%q: no message", msg)
		}
	}
}
