package chat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// jsonOptions are the keyword arguments of transformers' tojson filter,
// which calls json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False).
type jsonOptions struct {
	ensureASCII bool
	indent      *string // nil: one line
	itemSep     string
	keySep      string
	sortKeys    bool
}

func newJSONOptions() jsonOptions {
	return jsonOptions{itemSep: ", ", keySep: ": "}
}

// pyDumps is Python's json.dumps for template values.
func pyDumps(v any, o jsonOptions, limit int) (string, error) {
	var b strings.Builder
	if err := dumpValue(&b, v, o, 0, limit); err != nil {
		return "", err
	}
	return b.String(), nil
}

func dumpValue(b *strings.Builder, v any, o jsonOptions, level, limit int) error {
	if b.Len() > limit {
		return &LimitError{Limit: "output bytes", Max: limit}
	}
	if level > maxNesting {
		return fmt.Errorf("maximum recursion depth exceeded while encoding a JSON object")
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(jsonFloat(v))
	case string:
		dumpString(b, v, o.ensureASCII)
	case []any:
		return dumpList(b, v, o, level, limit)
	case tuple:
		return dumpList(b, v, o, level, limit)
	case *dict:
		return dumpDict(b, v, o, level, limit)
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

func jsonFloat(f float64) string {
	switch s := pyFloat(f); s {
	case "inf":
		return "Infinity"
	case "-inf":
		return "-Infinity"
	case "nan":
		return "NaN"
	default:
		return s
	}
}

func newline(b *strings.Builder, o jsonOptions, level int) {
	b.WriteByte('\n')
	for i := 0; i < level; i++ {
		b.WriteString(*o.indent)
	}
}

func dumpList(b *strings.Builder, items []any, o jsonOptions, level, limit int) error {
	if len(items) == 0 {
		b.WriteString("[]")
		return nil
	}
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteString(o.itemSep)
		}
		if o.indent != nil {
			newline(b, o, level+1)
		}
		if err := dumpValue(b, it, o, level+1, limit); err != nil {
			return err
		}
	}
	if o.indent != nil {
		newline(b, o, level)
	}
	b.WriteByte(']')
	return nil
}

func dumpDict(b *strings.Builder, d *dict, o jsonOptions, level, limit int) error {
	if d.len() == 0 {
		b.WriteString("{}")
		return nil
	}
	order := make([]int, d.len())
	for i := range order {
		order[i] = i
	}
	if o.sortKeys {
		for _, k := range d.keys {
			if _, ok := k.(string); !ok {
				return fmt.Errorf("'<' not supported between instances of '%s' and 'str'", typeName(k))
			}
		}
		sort.SliceStable(order, func(i, j int) bool { return d.keys[order[i]].(string) < d.keys[order[j]].(string) })
	}
	b.WriteByte('{')
	for n, i := range order {
		if n > 0 {
			b.WriteString(o.itemSep)
		}
		if o.indent != nil {
			newline(b, o, level+1)
		}
		var key string
		switch k := d.keys[i].(type) {
		case string:
			key = k
		case nil:
			key = "null"
		case bool:
			key = map[bool]string{true: "true", false: "false"}[k]
		case int64:
			key = strconv.FormatInt(k, 10)
		case float64:
			key = jsonFloat(k)
		default:
			return fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
		}
		dumpString(b, key, o.ensureASCII)
		b.WriteString(o.keySep)
		if err := dumpValue(b, d.vals[i], o, level+1, limit); err != nil {
			return err
		}
	}
	if o.indent != nil {
		newline(b, o, level)
	}
	b.WriteByte('}')
	return nil
}

// dumpString writes s as Python's json module does: only '"', '\\' and
// control characters are escaped, plus everything outside ASCII when
// ensureASCII is set. Invalid UTF-8 bytes are written as U+FFFD.
func dumpString(b *strings.Builder, s string, ensureASCII bool) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20 || (ensureASCII && r == 0x7f):
				fmt.Fprintf(b, `\u%04x`, r)
			case ensureASCII && r > 0x7f:
				if r >= 0x10000 {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// decodeOrderedJSON decodes JSON keeping object key order (as Python's
// json.loads does) and the int/float distinction of numbers: 1 is an int,
// 1.0 and 1e3 are floats.
func decodeOrderedJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("decoding JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decoding JSON: data after the top-level value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxNesting {
		return nil, fmt.Errorf("nested more than %d levels deep", maxNesting)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			out := []any{}
			for dec.More() {
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		case '{':
			d := newDict(4)
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				_ = d.set(kt.(string), v)
			}
			_, err := dec.Token()
			return d, err
		}
	case json.Number:
		return jsonNumber(string(t))
	case string:
		return t, nil
	case bool:
		return t, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

func jsonNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
		return nil, fmt.Errorf("integer %s does not fit in 64 bits", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRangeErr(err) {
		return nil, err
	}
	return f, nil
}
