package data

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// flags turns "ftt" into []bool{false, true, true}.
func flags(s string) []bool {
	b := make([]bool, len(s))
	for i, c := range s {
		b[i] = c == 't'
	}
	return b
}

// bytesOf returns the byte tokenizer ids of s.
func bytesOf(s string) []int { ids, _, _ := NewByteTokenizer().Encode(s); return ids }

// seq concatenates id lists.
func seq(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

const bos, eos = 256, 257

func TestParseJSONLKinds(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []Example
	}{
		{
			name:  "text",
			input: `{"text": "hi"}`,
			want:  []Example{{IDs: []int{bos, 104, 105, eos}, Target: flags("fttt"), Line: 1}},
		},
		{
			name:  "prompt and completion",
			input: `{"prompt": "Q", "completion": "ab"}`,
			want:  []Example{{IDs: []int{bos, 81, 97, 98, eos}, Target: flags("ffttt"), Line: 1}},
		},
		{
			name:  "empty prompt",
			input: `{"prompt": "", "completion": "a"}`,
			want:  []Example{{IDs: []int{bos, 97, eos}, Target: flags("ftt"), Line: 1}},
		},
		{
			name:  "input_ids",
			input: `{"input_ids": [1, 2, 258, 0]}`,
			want:  []Example{{IDs: []int{1, 2, 258, 0}, Target: flags("fttt"), Line: 1}},
		},
		{
			name:  "unicode escapes are decoded before encoding",
			input: `{"text": "\u00e9\n"}`,
			want:  []Example{{IDs: []int{bos, 0xc3, 0xa9, 10, eos}, Target: flags("ftttt"), Line: 1}},
		},
		{
			name: "mixed kinds, blank lines, CRLF and line numbers",
			input: "\n{\"text\": \"a\"}\r\n   \n" +
				`{"completion": "c", "prompt": "p"}` + "\n\t\n" +
				`{"input_ids": [5, 6]}`, // no final newline
			want: []Example{
				{IDs: []int{bos, 97, eos}, Target: flags("ftt"), Line: 2},
				{IDs: []int{bos, 112, 99, eos}, Target: flags("fftt"), Line: 4},
				{IDs: []int{5, 6}, Target: flags("ft"), Line: 6},
			},
		},
		{
			name:  "byte order mark",
			input: "\uFEFF{\"text\": \"a\"}\n",
			want:  []Example{{IDs: []int{bos, 97, eos}, Target: flags("ftt"), Line: 1}},
		},
		{
			name:  "prompt with multi-byte text",
			input: `{"prompt": "é", "completion": "日"}`,
			want: []Example{{
				IDs:    seq([]int{bos}, bytesOf("é"), bytesOf("日"), []int{eos}),
				Target: flags("ffftttt"),
				Line:   1,
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseJSONL("train.jsonl", strings.NewReader(tt.input), ByteFormat())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseJSONLErrors(t *testing.T) {
	ok := `{"text": "fine"}` + "\n"
	tests := []struct {
		name  string
		input string
		want  string
	}{
		{"truncated JSON", ok + `{"text": "a"`, `train.jsonl:2: invalid JSON: unexpected end of JSON input`},
		{"trailing garbage", `{"text": "a"} x`, `train.jsonl:1: invalid JSON: invalid character 'x' after top-level value`},
		{"bad token", `{text: "a"}`, `train.jsonl:1: invalid JSON: invalid character 't' looking for beginning of object key string`},
		{"array row", `[1, 2]`, `train.jsonl:1: a row must be a JSON object, not array`},
		{"string row", `"text"`, `train.jsonl:1: a row must be a JSON object, not string`},
		{"null row", `null`, `train.jsonl:1: a row must be a JSON object, not null`},
		{"empty object", `{}`, `train.jsonl:1: a row needs "text", "prompt"+"completion", "input_ids", "messages", "conversations" or "instruction"+"output"`},
		{"unknown field", ok + ok + `{"promt": "a", "completion": "b"}`, `train.jsonl:3: unknown field "promt"`},
		{"unknown field beside a valid row", `{"text": "a", "meta": 1}`, `train.jsonl:1: unknown field "meta"`},
		{"field names are case-sensitive", `{"Text": "a"}`, `train.jsonl:1: unknown field "Text"`},
		{"first unknown field in file order", `{"zz": 1, "aa": 2}`, `train.jsonl:1: unknown field "zz"`},
		{"duplicate field", `{"text": "a", "text": "b"}`, `train.jsonl:1: duplicate field "text"`},
		{"prompt without completion", `{"prompt": "a"}`, `train.jsonl:1: "prompt" without "completion"`},
		{"completion without prompt", `{"completion": "a"}`, `train.jsonl:1: "completion" without "prompt"`},
		{"empty completion", `{"prompt": "a", "completion": ""}`, `train.jsonl:1: "completion" is empty`},
		{"empty text", `{"text": ""}`, `train.jsonl:1: "text" is empty`},
		{"text and input_ids", `{"input_ids": [1, 2], "text": "a"}`, `train.jsonl:1: both "text" and "input_ids"`},
		{"text and prompt", `{"text": "a", "prompt": "b", "completion": "c"}`, `train.jsonl:1: both "text" and "prompt"`},
		{"text and completion", `{"text": "a", "completion": "c"}`, `train.jsonl:1: both "text" and "completion"`},
		{"prompt and input_ids", `{"prompt": "a", "completion": "c", "input_ids": [1, 2]}`, `train.jsonl:1: both "prompt" and "input_ids"`},
		{"id above vocabulary", `{"input_ids": [1, 2, 3, 4, 300]}`, `train.jsonl:1: input_ids[4] = 300 is outside the vocabulary (size 259)`},
		{"id equal to vocabulary size", `{"input_ids": [259, 1]}`, `train.jsonl:1: input_ids[0] = 259 is outside the vocabulary (size 259)`},
		{"negative id", `{"input_ids": [1, -1]}`, `train.jsonl:1: input_ids[1] = -1 is outside the vocabulary (size 259)`},
		{"id overflowing int", `{"input_ids": [1, 99999999999999999999999]}`, `train.jsonl:1: input_ids[1] = 99999999999999999999999 is outside the vocabulary (size 259)`},
		{"fractional id", `{"input_ids": [1, 2, 1.5]}`, `train.jsonl:1: input_ids[2] is not an integer`},
		{"exponent id", `{"input_ids": [1, 2, 1e2]}`, `train.jsonl:1: input_ids[2] is not an integer`},
		{"string id", `{"input_ids": [1, 2, "3"]}`, `train.jsonl:1: input_ids[2] is not an integer`},
		{"null id", `{"input_ids": [null, 2]}`, `train.jsonl:1: input_ids[0] is not an integer`},
		{"input_ids not an array", `{"input_ids": "1 2"}`, `train.jsonl:1: "input_ids" must be an array of integers`},
		{"input_ids empty", `{"input_ids": []}`, `train.jsonl:1: "input_ids" has 0 tokens; it needs at least 2`},
		{"input_ids single", `{"input_ids": [7]}`, `train.jsonl:1: "input_ids" has 1 tokens; it needs at least 2`},
		{"text not a string", `{"text": 5}`, `train.jsonl:1: "text" must be a string`},
		{"text null", `{"text": null}`, `train.jsonl:1: "text" must be a string`},
		{"prompt not a string", `{"prompt": ["a"], "completion": "b"}`, `train.jsonl:1: "prompt" must be a string`},
		{"completion not a string", `{"prompt": "a", "completion": false}`, `train.jsonl:1: "completion" must be a string`},
		{"line numbers count blank lines", "\n\n" + ok + "\n" + `{"text": 1}`, `train.jsonl:5: "text" must be a string`},
		{"empty file", "", `train.jsonl: no examples`},
		{"blank file", "\n  \r\n\t\n", `train.jsonl: no examples`},
		{"only a byte order mark", "\uFEFF\n", `train.jsonl: no examples`},
		{"byte order mark only at the start", ok + "\uFEFF" + ok, `train.jsonl:2: invalid JSON: invalid character 'ï' looking for beginning of value`},
		{"invalid UTF-8 (Latin-1 é)", `{"text": "caf` + "\xe9" + `"}`, `train.jsonl:1: invalid UTF-8 at byte 14 of the line (the file must be UTF-8 text)`},
		{"a truncated UTF-8 sequence", ok + `{"text": "` + "\xe2\x82" + `"}`, `train.jsonl:2: invalid UTF-8 at byte 11 of the line (the file must be UTF-8 text)`},
		{"a lone high surrogate", `{"text": "a\ud83d b"}`, `train.jsonl:1: \ud83d at byte 12 escapes half of a UTF-16 surrogate pair, which is no character`},
		{"a lone low surrogate", `{"text": "\uDE00"}`, `train.jsonl:1: \uDE00 at byte 11 escapes half of a UTF-16 surrogate pair, which is no character`},
		{"a reversed pair", `{"text": "\ude00\ud83d"}`, `train.jsonl:1: \ude00 at byte 11 escapes half of a UTF-16 surrogate pair, which is no character`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseJSONL("train.jsonl", strings.NewReader(tt.input), ByteFormat())
			if err == nil {
				t.Fatalf("no error; got %d examples", len(got))
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got %s\nwant %s", err, tt.want)
			}
			if got != nil {
				t.Errorf("got %d examples along with the error", len(got))
			}
		})
	}
}

func TestParseJSONLLineErrorType(t *testing.T) {
	_, err := ParseJSONL("d/x.jsonl", strings.NewReader("{}\n"), ByteFormat())
	var le *LineError
	if !errors.As(err, &le) {
		t.Fatalf("error %v (%T) is not a *LineError", err, err)
	}
	if le.File != "d/x.jsonl" || le.Line != 1 {
		t.Errorf("LineError at %s:%d, want d/x.jsonl:1", le.File, le.Line)
	}
}

func TestParseJSONLLongLines(t *testing.T) {
	long := strings.Repeat("abcdefgh", 1<<18) // 2 MiB, far past bufio.Scanner's default
	tests := []struct {
		name    string
		input   string
		maxLine int
		want    string // error; "" for success
		nIDs    []int  // lengths of the examples on success
	}{
		{"2 MiB line", `{"text": "` + long + `"}` + "\n" + `{"text": "b"}`, MaxLineBytes, "", []int{len(long) + 2, 3}},
		{"line at the limit", `{"text": "abc"}` + "\n", 15, "", []int{5}},
		{"line at the limit with CRLF", `{"text": "abc"}` + "\r\n", 15, "", []int{5}},
		{"line one byte over the limit", `{"text": "a"}` + "\n" + `{"text": "abcd"}` + "\n", 15, "x.jsonl:2: line is longer than 15 bytes", nil},
		{"line far over the limit", `{"text": "a"}` + "\n" + `{"text": "` + long + `"}`, 1 << 20, "x.jsonl:2: line is longer than 1 MiB", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseJSONL("x.jsonl", strings.NewReader(tt.input), ByteFormat(), tt.maxLine)
			if tt.want != "" {
				if err == nil || err.Error() != tt.want {
					t.Fatalf("error %v, want %s", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var n []int
			for _, e := range got {
				n = append(n, len(e.IDs))
			}
			if !reflect.DeepEqual(n, tt.nIDs) {
				t.Errorf("example lengths %v, want %v", n, tt.nIDs)
			}
		})
	}
}

// TestParseJSONL64MiBLine checks the real limit: a line of exactly
// MaxLineBytes parses. Whitespace padding keeps the tokenized example small.
func TestParseJSONL64MiBLine(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a 64 MiB line")
	}
	row := `{"text": "ok"}`
	line := append(bytes.Repeat([]byte(" "), MaxLineBytes-len(row)), row...)
	input := append(line, "\n{\"text\": \"b\"}\n"...)
	got, err := ParseJSONL("big.jsonl", bytes.NewReader(input), ByteFormat())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(got[0].IDs) != 4 || got[1].Line != 2 {
		t.Errorf("got %d examples, first with %d ids", len(got), len(got[0].IDs))
	}
}

func TestLoadJSONL(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "train.jsonl")
	if err := os.WriteFile(good, []byte(`{"text": "a"}`+"\n"+`{"input_ids": [1, 2]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("\n"+`{"text": "a"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	ex, err := LoadJSONL(good, ByteFormat())
	if err != nil {
		t.Fatal(err)
	}
	want := []Example{
		{IDs: []int{bos, 97, eos}, Target: flags("ftt"), Line: 1},
		{IDs: []int{1, 2}, Target: flags("ft"), Line: 2},
	}
	if !reflect.DeepEqual(ex, want) {
		t.Errorf("got %+v, want %+v", ex, want)
	}

	_, err = LoadJSONL(bad, ByteFormat())
	if wantErr := bad + ":2: invalid JSON: unexpected end of JSON input"; err == nil || err.Error() != wantErr {
		t.Errorf("error %v, want %s", err, wantErr)
	}

	_, err = LoadJSONL(filepath.Join(dir, "missing.jsonl"), ByteFormat())
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: error %v, want fs.ErrNotExist", err)
	}
}

// Escapes that are text stay text: a whole surrogate pair, an escaped
// backslash before "u", and U+FFFD written on purpose.
func TestParseJSONLEscapesThatAreText(t *testing.T) {
	rows := `{"text": "\ud83d\ude00"}` + "\n" + `{"text": "\\ud800"}` + "\n" + `{"text": "\ufffd"}` + "\n"
	ex, err := ParseJSONL("t.jsonl", strings.NewReader(rows), ByteFormat())
	if err != nil {
		t.Fatal(err)
	}
	tok := NewByteTokenizer()
	for i, want := range []string{"😀", `\ud800`, "\uFFFD"} {
		if got := tok.Decode(ex[i].IDs); got != want {
			t.Errorf("row %d: %q, want %q", i+1, got, want)
		}
	}
}

// Rows parsed by several goroutines come out in file order, the same for
// any worker count, and the error reported is the first line's; Progress
// ends at the file's size.
func TestLoadInParallel(t *testing.T) {
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "{\"prompt\": \"q%d\", \"completion\": \"a%d\"}\n", i, i*7)
		if i%500 == 0 {
			b.WriteString("\n")
		}
	}
	path := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var last, total int64
	one, err := Load(context.Background(), path, ByteFormat(), LoadOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	many, err := Load(context.Background(), path, ByteFormat(), LoadOptions{Workers: 7, Progress: func(d, n int64) {
		if d > last { // calls may arrive out of order from the workers
			last = d
		}
		total = n
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(one, many) || len(one) != 3000 || one[2999].Line != 3006 {
		t.Fatalf("parallel parse differs: %d vs %d examples", len(one), len(many))
	}
	if last != total || total != int64(b.Len()) {
		t.Fatalf("progress %d of %d, file %d bytes", last, total, b.Len())
	}
	bad := b.String() + `{"text": 1}` + "\n" + strings.Repeat(`{"text": 2}`+"\n", 2000)
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, w := range []int{1, 8} {
		if _, err := Load(context.Background(), path, ByteFormat(), LoadOptions{Workers: w}); err == nil || !strings.HasSuffix(err.Error(), `d.jsonl:3007: "text" must be a string`) {
			t.Fatalf("%d workers: %v", w, err)
		}
	}
}
