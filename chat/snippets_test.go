package chat

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// TestSnippets renders the small single-behaviour templates of
// testdata/snippets.json (whitespace control, operators, filters, tests,
// methods, scoping, errors) and requires Python jinja2's result for each.
func TestSnippets(t *testing.T) {
	data, err := os.ReadFile("testdata/snippets.json")
	if err != nil {
		t.Fatal(err)
	}
	var snips []struct {
		ID            string                     `json:"id"`
		Template      string                     `json:"template"`
		Vars          map[string]json.RawMessage `json:"vars"`
		Python        goldenResult               `json:"python"`
		HFJinjaAgrees bool                       `json:"hfjinja_agrees"`
	}
	if err := json.Unmarshal(data, &snips); err != nil {
		t.Fatal(err)
	}
	if len(snips) < 50 {
		t.Fatalf("only %d snippets", len(snips))
	}
	mismatches, hfDisagree := 0, 0
	for _, sn := range snips {
		if !sn.HFJinjaAgrees {
			hfDisagree++
		}
		extra := map[string]any{}
		for k, v := range sn.Vars {
			extra[k] = v
		}
		tmpl, err := Parse(sn.ID, sn.Template)
		var out string
		if err == nil {
			out, err = tmpl.Render(nil, Options{Extra: extra, Now: pinnedNow})
		}
		var ie *InternalError
		if errors.As(err, &ie) {
			t.Errorf("%s: %v", sn.ID, err)
		}
		if ok, why := matches(sn.Python, out, err); !ok {
			mismatches++
			t.Errorf("%s: %s", sn.ID, why)
		} else if err != nil {
			t.Logf("%s: Go: %v | Python %s: %s", sn.ID, err, sn.Python.ErrorType, *sn.Python.Error)
		}
	}
	t.Logf("%d snippets, %d mismatches with Python jinja2; @huggingface/jinja disagrees with Python on %d", len(snips), mismatches, hfDisagree)
}
