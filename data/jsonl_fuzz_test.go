package data

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// FuzzParseJSONL: no input makes ParseJSONL panic; an error is a
// *LineError naming the file and a line of it (or "name: no examples");
// every example it accepts is well formed; and the examples, written back
// as {"input_ids": [...]} rows, parse to the same ids.
func FuzzParseJSONL(f *testing.F) {
	for _, s := range []string{
		`{"text": "hello"}`,
		`{"prompt": "2+2=", "completion": "4"}` + "\n\n" + `{"input_ids": [1, 2, 3]}` + "\r\n",
		"\uFEFF" + `{"text": "bom"}`,
		`{"prompt": "", "completion": "x"}`,
		`{"text": ""}`,
		`{"text": "a", "text": "b"}`,
		`{"text": "a", "prompt": "b"}`,
		`{"completion": "x"}`,
		`{"input_ids": [1]}`,
		`{"input_ids": [1, 3.0]}`,
		`{"input_ids": [1, -0]}`,
		`{"input_ids": [0, 258, 259]}`,
		`{"input_ids": [1, 99999999999999999999999]}`,
		`{"input_ids": "12"}`,
		`{"text": null}`,
		`{"text": "\ud800 \u0000 é"}`,
		"{\"text\": \"\xff\xfe\"}",
		`{"extra": 1}`,
		`[1, 2]`,
		`null`,
		`{"text": "a"} {"text": "b"}`,
		`{"text": "a"`,
		"\n\n  \t\n",
		"",
	} {
		f.Add([]byte(s))
	}
	format := ByteFormat()
	format.Chat = chatML{} // conversation rows too
	tok := format.Tok
	f.Fuzz(func(t *testing.T, b []byte) {
		// A small line limit, so that the fuzzer can reach it.
		const maxLine = 1 << 10
		exs, err := parseJSONL("rows.jsonl", bytes.NewReader(b), format, maxLine)
		lines := strings.Count(string(b), "\n") + 1
		if err != nil {
			var le *LineError
			switch {
			case errors.As(err, &le):
				if le.File != "rows.jsonl" || le.Line < 1 || le.Line > lines+1 {
					t.Fatalf("error %q: file %q line %d, want rows.jsonl and a line in 1..%d", err, le.File, le.Line, lines)
				}
				if !strings.HasPrefix(err.Error(), fmt.Sprintf("rows.jsonl:%d: ", le.Line)) {
					t.Fatalf("error %q does not start with file:line", err)
				}
			case err.Error() != "rows.jsonl: no examples":
				t.Fatalf("error %q is neither a LineError nor \"no examples\"", err)
			}
			return
		}
		if len(exs) == 0 {
			t.Fatal("no examples and no error")
		}
		var again bytes.Buffer
		prev := 0
		for i, ex := range exs {
			if ex.Line <= prev || ex.Line > lines {
				t.Fatalf("example %d: line %d after line %d, of %d lines", i, ex.Line, prev, lines)
			}
			prev = ex.Line
			if len(ex.IDs) < 2 || len(ex.Target) != len(ex.IDs) {
				t.Fatalf("example %d: %d ids, %d targets", i, len(ex.IDs), len(ex.Target))
			}
			if ex.Target[0] || !slices.Contains(ex.Target, true) {
				t.Fatalf("example %d: targets %v: the first token is a target, or none is", i, ex.Target)
			}
			for _, id := range ex.IDs {
				if id < 0 || id >= tok.VocabSize() {
					t.Fatalf("example %d: id %d outside the vocabulary", i, id)
				}
			}
			row, err := json.Marshal(map[string][]int{"input_ids": ex.IDs})
			if err != nil {
				t.Fatal(err)
			}
			again.Write(row)
			again.WriteByte('\n')
		}
		back, err := ParseJSONL("again.jsonl", &again, format)
		if err != nil {
			t.Fatalf("the examples written back as input_ids: %v", err)
		}
		if len(back) != len(exs) {
			t.Fatalf("%d examples read back as %d", len(exs), len(back))
		}
		for i := range exs {
			if !slices.Equal(back[i].IDs, exs[i].IDs) {
				t.Fatalf("example %d: ids %v read back as %v", i, exs[i].IDs, back[i].IDs)
			}
		}
	})
}
