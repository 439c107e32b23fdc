package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Example is one tokenized training sequence. Target[i] reports whether
// IDs[i] is a prediction target (its loss counts when predicting it from
// IDs[:i]). Line is the 1-based line of the source file, or 0 when the
// example did not come from a file.
type Example struct {
	IDs    []int
	Target []bool
	Line   int
}

// MaxLineBytes is the longest JSONL line ParseJSONL accepts. Rows holding a
// whole book or a long pre-tokenized sequence are legitimate, so the limit is
// far above bufio.Scanner's 64 KiB default.
const MaxLineBytes = 64 << 20

// LineError is an error in one row of a JSONL file. Its message reads
// "File:Line: Err", the form editors and terminals turn into a link.
type LineError struct {
	File string
	Line int // 1-based
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// LoadJSONL reads the JSONL file at path; see ParseJSONL. Errors name path.
func LoadJSONL(path string, tok Tokenizer) ([]Example, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *fs.PathError already names the path and the operation
	}
	defer f.Close()
	return ParseJSONL(path, f, tok)
}

// ParseJSONL reads one Example per non-blank line of r. name is used in error
// messages only.
//
// Each line is a JSON object of exactly one of three kinds:
//
//	{"text": "..."}                         BOS + Encode(text) + EOS; every token but BOS is a target
//	{"prompt": "...", "completion": "..."}  BOS + Encode(prompt) + Encode(completion) + EOS;
//	                                        only the completion and EOS are targets
//	{"input_ids": [...]}                    used as given; every token but the first is a target
//
// Unknown and duplicate keys are rejected, as are an empty "text" or
// "completion" and fewer than two input_ids, since such rows train nothing.
// An empty "prompt" is allowed. A UTF-8 byte order mark at the start of r and
// blank lines are skipped, and kinds may be mixed across lines. Errors are
// *LineError values, except for a stream with no rows, which is reported as
// "name: no examples".
func ParseJSONL(name string, r io.Reader, tok Tokenizer) ([]Example, error) {
	return parseJSONL(name, r, tok, MaxLineBytes)
}

// parseJSONL is ParseJSONL with the line limit as a parameter, so that tests
// can exercise the limit without 64 MiB inputs.
func parseJSONL(name string, r io.Reader, tok Tokenizer, maxLine int) ([]Example, error) {
	sc := bufio.NewScanner(r)
	// +2 leaves room for the "\r\n" that the scanner needs to see in its
	// buffer to end a line of exactly maxLine bytes.
	sc.Buffer(make([]byte, 0, min(64<<10, maxLine+2)), maxLine+2)
	var out []Example
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) > maxLine {
			return nil, &LineError{name, line, fmt.Errorf("line is longer than %s", byteSize(maxLine))}
		}
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\uFEFF"))
		}
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if err := checkText(b); err != nil {
			return nil, &LineError{name, line, err}
		}
		ex, err := parseRow(b, tok)
		if err != nil {
			return nil, &LineError{name, line, err}
		}
		ex.Line = line
		out = append(out, ex)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &LineError{name, line + 1, fmt.Errorf("line is longer than %s", byteSize(maxLine))}
		}
		return nil, &LineError{name, line + 1, err}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no examples", name)
	}
	return out, nil
}

// checkText refuses a line that is not valid UTF-8, or that escapes half of
// a UTF-16 surrogate pair ("\ud800"): encoding/json would turn either into
// U+FFFD, and the model would train on replacement characters the data
// never had.
func checkText(line []byte) error {
	if !utf8.Valid(line) {
		i := 0
		for i < len(line) {
			r, n := utf8.DecodeRune(line[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return fmt.Errorf("invalid UTF-8 at byte %d of the line (the file must be UTF-8 text)", i+1)
	}
	for i := 0; i+1 < len(line); i++ {
		if line[i] != '\\' {
			continue
		}
		if line[i+1] != 'u' {
			i++ // an escaped character, possibly a backslash
			continue
		}
		r, ok := hex4(line[i+2:])
		if !ok || !utf16.IsSurrogate(r) {
			continue
		}
		if r < 0xDC00 && i+11 < len(line) && line[i+6] == '\\' && line[i+7] == 'u' {
			if lo, ok := hex4(line[i+8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11 // a whole pair
				continue
			}
		}
		return fmt.Errorf("%s at byte %d escapes half of a UTF-16 surrogate pair, which is no character", line[i:i+6], i+1)
	}
	return nil
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(v), err == nil
}

// byteSize formats n for an error message.
func byteSize(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Field names of a JSONL row.
const (
	fText       = "text"
	fPrompt     = "prompt"
	fCompletion = "completion"
	fInputIDs   = "input_ids"
)

// parseRow turns one JSONL line into an Example. Its errors carry no
// position; the caller adds it.
func parseRow(line []byte, tok Tokenizer) (Example, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return Example{}, fmt.Errorf("a row must be a JSON object, not %s", te.Value)
		}
		return Example{}, fmt.Errorf("invalid JSON: %w", err)
	}
	if fields == nil {
		return Example{}, errors.New("a row must be a JSON object, not null")
	}
	if err := checkKeys(line); err != nil {
		return Example{}, err
	}

	_, hasText := fields[fText]
	_, hasPrompt := fields[fPrompt]
	_, hasCompletion := fields[fCompletion]
	_, hasIDs := fields[fInputIDs]

	// Name the first two kinds present, in a fixed order, so that the
	// message does not depend on map iteration.
	var kinds []string
	if hasText {
		kinds = append(kinds, fText)
	}
	if hasPrompt {
		kinds = append(kinds, fPrompt)
	} else if hasCompletion {
		kinds = append(kinds, fCompletion)
	}
	if hasIDs {
		kinds = append(kinds, fInputIDs)
	}
	switch {
	case len(kinds) == 0:
		return Example{}, errors.New(`a row needs "text", "prompt"+"completion" or "input_ids"`)
	case len(kinds) > 1:
		return Example{}, fmt.Errorf("both %q and %q", kinds[0], kinds[1])
	case hasPrompt && !hasCompletion:
		return Example{}, errors.New(`"prompt" without "completion"`)
	case hasCompletion && !hasPrompt:
		return Example{}, errors.New(`"completion" without "prompt"`)
	}

	switch {
	case hasText:
		text, err := stringField(fields, fText)
		if err != nil {
			return Example{}, err
		}
		if text == "" {
			return Example{}, errors.New(`"text" is empty`)
		}
		body := tok.Encode(text)
		ids := make([]int, 0, len(body)+2)
		ids = append(ids, tok.BOS())
		ids = append(ids, body...)
		ids = append(ids, tok.EOS())
		target := make([]bool, len(ids))
		for i := 1; i < len(target); i++ {
			target[i] = true
		}
		return Example{IDs: ids, Target: target}, nil

	case hasPrompt:
		prompt, err := stringField(fields, fPrompt)
		if err != nil {
			return Example{}, err
		}
		completion, err := stringField(fields, fCompletion)
		if err != nil {
			return Example{}, err
		}
		if completion == "" {
			return Example{}, errors.New(`"completion" is empty`)
		}
		// Prompt and completion are encoded separately so that the
		// target boundary falls on a token boundary for any tokenizer.
		p, c := tok.Encode(prompt), tok.Encode(completion)
		ids := make([]int, 0, len(p)+len(c)+2)
		ids = append(ids, tok.BOS())
		ids = append(ids, p...)
		ids = append(ids, c...)
		ids = append(ids, tok.EOS())
		target := make([]bool, len(ids))
		for i := 1 + len(p); i < len(target); i++ {
			target[i] = true
		}
		return Example{IDs: ids, Target: target}, nil

	default:
		ids, err := idsField(fields[fInputIDs], tok.VocabSize())
		if err != nil {
			return Example{}, err
		}
		target := make([]bool, len(ids))
		for i := 1; i < len(target); i++ {
			target[i] = true
		}
		return Example{IDs: ids, Target: target}, nil
	}
}

// checkKeys rejects unknown and duplicate keys of the (already validated)
// object in line. It walks the keys in file order, which a map cannot give,
// so that the first offending key is the one reported.
func checkKeys(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // '{'
		return fmt.Errorf("invalid JSON: %w", err)
	}
	seen := make(map[string]bool, 4)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
		key, _ := t.(string)
		switch key {
		case fText, fPrompt, fCompletion, fInputIDs:
		default:
			return fmt.Errorf("unknown field %q", key)
		}
		if seen[key] {
			return fmt.Errorf("duplicate field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
	}
	return nil
}

// stringField decodes fields[name], which must be a JSON string. A JSON null
// is rejected too: json.Unmarshal would silently leave the string empty.
func stringField(fields map[string]json.RawMessage, name string) (string, error) {
	raw := bytes.TrimSpace(fields[name])
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("%q must be a string", name)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%q: %w", name, err)
	}
	return s, nil
}

// idsField decodes a JSON array of token ids, each in [0, vocab).
func idsField(raw json.RawMessage, vocab int) ([]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fmt.Errorf("%q must be an array of integers", fInputIDs)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("%q: %w", fInputIDs, err)
	}
	if len(elems) < 2 {
		return nil, fmt.Errorf("%q has %d tokens; it needs at least 2", fInputIDs, len(elems))
	}
	ids := make([]int, len(elems))
	for i, e := range elems {
		e = bytes.TrimSpace(e)
		if !isJSONInteger(e) {
			return nil, fmt.Errorf("%s[%d] is not an integer", fInputIDs, i)
		}
		v, err := strconv.Atoi(string(e))
		if err != nil || v < 0 || v >= vocab {
			// err is a range error: the literal does not even fit an int.
			return nil, fmt.Errorf("%s[%d] = %s is outside the vocabulary (size %d)", fInputIDs, i, e, vocab)
		}
		ids[i] = v
	}
	return ids, nil
}

// isJSONInteger reports whether b is a JSON number written without fraction
// or exponent. Ids written as 3.0 or 3e0 are rejected: they come from a
// float column and are more likely a bug than a token.
func isJSONInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
