package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// The goldens come from scripts/gen_chat_goldens.py: every built-in template
// rendered on every conversation of testdata/conversations.json by Python's
// jinja2 configured as transformers configures it (the reference) and by
// @huggingface/jinja (recorded where it differs).

// pinnedNow is the clock the goldens were rendered with (PINNED_NOW in the
// generator).
func pinnedNow() time.Time { return time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC) }

type goldenResult struct {
	Output    *string `json:"output"`
	Error     *string `json:"error"`
	ErrorType string  `json:"error_type"`
}

type goldenCase struct {
	Template            string                     `json:"template"`
	Conversation        string                     `json:"conversation"`
	AddGenerationPrompt bool                       `json:"add_generation_prompt"`
	Extra               map[string]json.RawMessage `json:"extra"`
	Python              goldenResult               `json:"python"`
	HFJinja             *goldenResult              `json:"hfjinja"`
	HFJinjaAgrees       bool                       `json:"hfjinja_agrees"`
}

type conversation struct {
	Messages []Message
	Tools    json.RawMessage
}

// loadConversations reads testdata/conversations.json into Messages, keeping
// every key other than role and (string) content as raw JSON so that key
// order and number kinds survive.
func loadConversations(t testing.TB) map[string]conversation {
	t.Helper()
	data, err := os.ReadFile("testdata/conversations.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw []struct {
		ID       string                       `json:"id"`
		Messages []map[string]json.RawMessage `json:"messages"`
		Tools    json.RawMessage              `json:"tools"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]conversation, len(raw))
	for _, c := range raw {
		conv := conversation{Tools: c.Tools}
		for i, m := range c.Messages {
			msg, err := messageFromJSON(m)
			if err != nil {
				t.Fatalf("conversation %s message %d: %v", c.ID, i, err)
			}
			conv.Messages = append(conv.Messages, msg)
		}
		out[c.ID] = conv
	}
	return out
}

func messageFromJSON(m map[string]json.RawMessage) (Message, error) {
	var msg Message
	if err := json.Unmarshal(m["role"], &msg.Role); err != nil {
		return msg, fmt.Errorf("role: %w", err)
	}
	for k, v := range m {
		if k == "role" {
			continue
		}
		if k == "content" && json.Unmarshal(v, &msg.Content) == nil && bytes.HasPrefix(bytes.TrimSpace(v), []byte(`"`)) {
			continue
		}
		if msg.Fields == nil {
			msg.Fields = map[string]any{}
		}
		msg.Fields[k] = v
	}
	return msg, nil
}

func loadGoldens(t testing.TB) []goldenCase {
	t.Helper()
	data, err := os.ReadFile("testdata/goldens.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []goldenCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

func goldenOptions(t testing.TB, bt BuiltinTemplate, conv conversation, c goldenCase) Options {
	t.Helper()
	opts := Options{AddGenerationPrompt: c.AddGenerationPrompt, BOS: bt.BOS, EOS: bt.EOS, UNK: bt.UNK, PAD: bt.PAD,
		Extra: map[string]any{}, Now: pinnedNow}
	if len(conv.Tools) > 0 {
		opts.Extra["tools"] = conv.Tools
	}
	for k, v := range c.Extra {
		opts.Extra[k] = v
	}
	return opts
}

// matches reports whether a Go render agrees with a reference result: the
// same output, or an error where the reference raised. raise_exception and
// UndefinedError messages must match exactly.
func matches(ref goldenResult, out string, err error) (bool, string) {
	if ref.Output != nil {
		if err != nil {
			return false, fmt.Sprintf("reference rendered %.200q, Go failed: %v", *ref.Output, err)
		}
		if out != *ref.Output {
			return false, fmt.Sprintf("output differs at byte %d:\n  want %.300q\n  got  %.300q", firstDiff(out, *ref.Output), *ref.Output, out)
		}
		return true, ""
	}
	if err == nil {
		return false, fmt.Sprintf("reference failed (%s: %s), Go rendered %.200q", ref.ErrorType, *ref.Error, out)
	}
	var re *RaiseError
	var ue *UndefinedError
	switch ref.ErrorType {
	case "TemplateError":
		if !errors.As(err, &re) || re.Message != *ref.Error {
			return false, fmt.Sprintf("reference raised %q, Go failed with %v", *ref.Error, err)
		}
	case "UndefinedError":
		if !errors.As(err, &ue) || ue.Message != *ref.Error {
			return false, fmt.Sprintf("reference UndefinedError %q, Go failed with %v", *ref.Error, err)
		}
	}
	return true, ""
}

func firstDiff(a, b string) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestGoldens renders every golden case and requires 0 mismatches with
// Python's jinja2; agreement with @huggingface/jinja is reported.
func TestGoldens(t *testing.T) {
	convs := loadConversations(t)
	cases := loadGoldens(t)
	if len(cases) == 0 {
		t.Fatal("no golden cases")
	}
	type tally struct{ cases, pyMismatch, pyErrors, hfCompared, hfMismatch, hfDisagreeWithPy int }
	per := map[string]*tally{}
	parsed := map[string]*Template{}
	convsPer := map[string]map[string]bool{}
	for _, c := range cases {
		bt, ok := Builtin(c.Template)
		if !ok {
			t.Fatalf("golden template %q is not a built-in", c.Template)
		}
		tmpl := parsed[c.Template]
		if tmpl == nil {
			var err error
			if tmpl, err = Parse(c.Template, bt.Source); err != nil {
				t.Fatalf("parsing %s: %v", c.Template, err)
			}
			parsed[c.Template] = tmpl
		}
		conv, ok := convs[c.Conversation]
		if !ok {
			t.Fatalf("golden conversation %q missing", c.Conversation)
		}
		tl := per[c.Template]
		if tl == nil {
			tl = &tally{}
			per[c.Template] = tl
			convsPer[c.Template] = map[string]bool{}
		}
		convsPer[c.Template][c.Conversation] = true
		out, err := tmpl.Render(conv.Messages, goldenOptions(t, bt, conv, c))
		var ie *InternalError
		if errors.As(err, &ie) {
			t.Errorf("%s/%s: %v", c.Template, c.Conversation, err)
		}
		tl.cases++
		if c.Python.Error != nil {
			tl.pyErrors++
		}
		if ok, why := matches(c.Python, out, err); !ok {
			tl.pyMismatch++
			t.Errorf("%s × %s (add_generation_prompt=%v, extra=%v): %s", c.Template, c.Conversation, c.AddGenerationPrompt, c.Extra, why)
		}
		hf := c.Python
		if !c.HFJinjaAgrees {
			tl.hfDisagreeWithPy++
			hf = *c.HFJinja
		}
		tl.hfCompared++
		if ok, _ := matches(goldenResult{Output: hf.Output, Error: hf.Error}, out, err); !ok {
			tl.hfMismatch++
		}
	}
	names := make([]string, 0, len(per))
	for n := range per {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %6s %6s %9s %12s %12s %14s\n", "template", "convs", "cases", "py-errors", "py-mismatch", "hf-mismatch", "hf-vs-python")
	var total tally
	for _, n := range names {
		tl := per[n]
		fmt.Fprintf(&b, "%-12s %6d %6d %9d %12d %12d %14d\n", n, len(convsPer[n]), tl.cases, tl.pyErrors, tl.pyMismatch, tl.hfMismatch, tl.hfDisagreeWithPy)
		total.cases += tl.cases
		total.pyMismatch += tl.pyMismatch
		total.hfMismatch += tl.hfMismatch
		total.pyErrors += tl.pyErrors
		total.hfDisagreeWithPy += tl.hfDisagreeWithPy
	}
	fmt.Fprintf(&b, "%-12s %6s %6d %9d %12d %12d %14d\n", "total", "", total.cases, total.pyErrors, total.pyMismatch, total.hfMismatch, total.hfDisagreeWithPy)
	t.Logf("golden parity (py = Python jinja2, the reference; hf = @huggingface/jinja):\n%s", b.String())
}
