package chat

import (
	"errors"
	"testing"
)

// checkFuzzError accepts any error a user can cause and rejects the ones
// that are bugs: a recovered panic, or an error without a usable message or
// position.
func checkFuzzError(t *testing.T, err error) {
	t.Helper()
	var ie *InternalError
	if errors.As(err, &ie) {
		t.Fatal(err)
	}
	if err.Error() == "" {
		t.Fatal("empty error message")
	}
	var pe *Error
	if errors.As(err, &pe) && (pe.Line < 1 || pe.Column < 1 || pe.Err == nil) {
		t.Fatalf("error without a position: %#v", pe)
	}
}

func fuzzLimits() Limits {
	return Limits{MaxSteps: 100_000, MaxOutputBytes: 1 << 20, MaxDepth: 30}
}

// FuzzRender parses and renders arbitrary template text on a conversation
// whose turns carry arbitrary content. Nothing may panic, hang or pass the
// limits, and rendering is deterministic.
func FuzzRender(f *testing.F) {
	for _, name := range BuiltinNames() {
		bt, _ := Builtin(name)
		f.Add(bt.Source, "Hi {{ x }} <think>\nr\n</think>\n\n a ", true)
	}
	f.Fuzz(func(t *testing.T, src, content string, agp bool) {
		tmpl, err := Parse("fuzz", src)
		if err != nil {
			checkFuzzError(t, err)
			return
		}
		msgs := []Message{{Role: "system", Content: content}, {Role: "user", Content: content}, {Role: "assistant", Content: content}}
		opts := Options{AddGenerationPrompt: agp, BOS: "<s>", EOS: "</s>", Now: pinnedNow, Limits: fuzzLimits()}
		out, err := tmpl.Render(msgs, opts)
		if err != nil {
			checkFuzzError(t, err)
			return
		}
		if len(out) > opts.Limits.MaxOutputBytes {
			t.Fatalf("%d bytes of output pass the %d byte limit", len(out), opts.Limits.MaxOutputBytes)
		}
		again, err := tmpl.Render(msgs, opts)
		if err != nil || again != out {
			t.Fatalf("second render differs: %q, %v", again, err)
		}
	})
}

// FuzzParse parses arbitrary template text.
func FuzzParse(f *testing.F) {
	for _, name := range BuiltinNames() {
		bt, _ := Builtin(name)
		f.Add(bt.Source)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if _, err := Parse("fuzz", src); err != nil {
			checkFuzzError(t, err)
		}
	})
}

// FuzzRenderContent renders every built-in template on arbitrary content
// and roles: a real template may refuse a conversation (raise_exception)
// but must not fail otherwise, and content must never be interpreted.
func FuzzRenderContent(f *testing.F) {
	f.Add("hello", "user", "assistant", true)
	f.Add("{{ 7*7 }}{% if %}", "system", "user", false)
	f.Add("  <think>\n</think>  ", "user", "tool", true)
	var tmpls []*Template
	for _, name := range BuiltinNames() {
		bt, _ := Builtin(name)
		tmpl, err := Parse(name, bt.Source)
		if err != nil {
			f.Fatal(err)
		}
		tmpls = append(tmpls, tmpl)
	}
	f.Fuzz(func(t *testing.T, content, role1, role2 string, agp bool) {
		msgs := []Message{{Role: role1, Content: content}, {Role: role2, Content: content + content}}
		for _, tmpl := range tmpls {
			_, err := tmpl.Render(msgs, Options{AddGenerationPrompt: agp, BOS: "<s>", EOS: "</s>", Now: pinnedNow, Limits: fuzzLimits()})
			if err == nil {
				continue
			}
			var re *RaiseError
			var ue *UndefinedError
			if errors.As(err, &re) || errors.As(err, &ue) {
				continue // e.g. role alternation, or a template reading a key these messages lack
			}
			t.Errorf("%s: %v", tmpl.Name(), err)
		}
	})
}
