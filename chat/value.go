package chat

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Values inside the renderer model Python's: nil is None, bool, int64 (int),
// float64 (float), string (str), []any (list), tuple, *dict (an ordered
// dict, as Python's keep insertion order), *namespace, *undefined, and the
// callables *function and *macro, plus *loopContext. Nothing else ever
// enters: inputs are converted by fromGo, so templates reach no Go value.

type tuple []any

// dict is an insertion-ordered mapping. Keys are None, bool, int64, float64
// or string; hashKey folds the ones Python considers equal (1, 1.0, True).
type dict struct {
	keys  []any
	vals  []any
	index map[any]int
}

func newDict(n int) *dict {
	return &dict{keys: make([]any, 0, n), vals: make([]any, 0, n), index: make(map[any]int, n)}
}

type hashFloat float64

func hashKey(k any) (any, error) {
	switch k := k.(type) {
	case nil, string, int64:
		return k, nil
	case bool:
		if k {
			return int64(1), nil
		}
		return int64(0), nil
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return int64(k), nil
		}
		return hashFloat(k), nil
	}
	return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
}

func (d *dict) set(k, v any) error {
	h, err := hashKey(k)
	if err != nil {
		return err
	}
	if i, ok := d.index[h]; ok {
		d.vals[i] = v
		return nil
	}
	d.index[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

func (d *dict) get(k any) (any, bool) {
	if d == nil {
		return nil, false
	}
	h, err := hashKey(k)
	if err != nil {
		return nil, false
	}
	i, ok := d.index[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

func (d *dict) len() int {
	if d == nil {
		return 0
	}
	return len(d.keys)
}

// namespace is jinja2's namespace(): the one mutable object templates have.
type namespace struct{ attrs *dict }

// undefined is jinja2's default Undefined: it prints as "", is false, is
// empty when iterated, and fails with msg on attribute access, item access,
// calls and arithmetic.
type undefined struct{ msg string }

func undefinedName(name string) *undefined {
	return &undefined{msg: pyRepr(name) + " is undefined"}
}

// undefinedAttr is what a missing attribute or item of obj gives.
func undefinedAttr(obj any, name any) *undefined {
	if s, ok := name.(string); ok {
		return &undefined{msg: pyRepr(objectTypeRepr(obj)) + " has no attribute " + pyRepr(s)}
	}
	return &undefined{msg: objectTypeRepr(obj) + " has no element " + reprValue(name)}
}

// objectTypeRepr is jinja2.utils.object_type_repr.
func objectTypeRepr(obj any) string {
	switch obj.(type) {
	case nil:
		return "None"
	case *namespace:
		return "jinja2.utils.Namespace object"
	case *loopContext:
		return "jinja2.runtime.LoopContext object"
	case *macro:
		return "jinja2.runtime.Macro object"
	}
	return typeName(obj) + " object"
}

// function is a built-in global, filter-less callable or bound method.
type function struct {
	name string
	call func(r *renderer, args []any, kwargs *dict) (any, error)
}

type macro struct {
	name     string
	params   []string
	defaults []expr
	body     []stmt
	scope    *scope // where the macro was defined
}

type loopContext struct {
	index0 int
	items  []any
	lastCh *[]any // loop.changed's previous arguments
}

// typeName is Python's type(x).__name__.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case *dict:
		return "dict"
	case *namespace:
		return "Namespace"
	case *undefined:
		return "Undefined"
	case *function:
		return "function"
	case *macro:
		return "Macro"
	case *loopContext:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

func truthy(v any) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case []any:
		return len(v) > 0
	case tuple:
		return len(v) > 0
	case *dict:
		return v.len() > 0
	case *undefined:
		return false
	}
	return true
}

// toStr is Python's str() as Jinja applies it to printed values, with
// Undefined printing as "".
func toStr(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case *undefined:
		return ""
	}
	return reprValue(v)
}

// reprValue is Python's repr(); for non-strings it is also str().
func reprValue(v any) string {
	var b strings.Builder
	writeRepr(&b, v, nil)
	return b.String()
}

// writeRepr writes repr(v). open lists the dicts being written: a namespace
// can contain itself, and Python's repr prints such a dict again as {...}.
func writeRepr(b *strings.Builder, v any, open []*dict) {
	switch v := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if v {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(pyFloat(v))
	case string:
		b.WriteString(pyRepr(v))
	case []any:
		b.WriteByte('[')
		writeItems(b, v, open)
		b.WriteByte(']')
	case tuple:
		b.WriteByte('(')
		writeItems(b, v, open)
		if len(v) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *dict:
		for _, d := range open {
			if d == v {
				b.WriteString("{...}")
				return
			}
		}
		open = append(open, v)
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, open)
			b.WriteString(": ")
			writeRepr(b, v.vals[i], open)
		}
		b.WriteByte('}')
	case *namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, v.attrs, open)
		b.WriteByte('>')
	case *undefined:
		b.WriteString("Undefined")
	case *function:
		b.WriteString("<built-in function " + v.name + ">")
	case *macro:
		b.WriteString("<Macro " + pyRepr(v.name) + ">")
	case *loopContext:
		fmt.Fprintf(b, "<LoopContext %d/%d>", v.index0+1, len(v.items))
	default:
		fmt.Fprintf(b, "<%T>", v)
	}
}

func writeItems(b *strings.Builder, items []any, open []*dict) {
	for i, it := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		writeRepr(b, it, open)
	}
}

// deepSize measures a value (string bytes plus container entries, nested),
// giving up once it passes budget. Lists share their items, so [x] * n
// repeated can describe a value far larger than the memory it takes; the
// limits apply to this size, which is what printing would produce.
func deepSize(v any, budget int, open []*dict) int {
	switch v := v.(type) {
	case string:
		return len(v)
	case []any:
		return itemsSize(v, budget, open)
	case tuple:
		return itemsSize(v, budget, open)
	case *namespace:
		return deepSize(v.attrs, budget, open)
	case *dict:
		for _, d := range open {
			if d == v {
				return 0
			}
		}
		open = append(open, v)
		n := len(v.keys)
		for i := range v.keys {
			n += deepSize(v.keys[i], budget-n, open) + deepSize(v.vals[i], budget-n, open)
			if n > budget {
				break
			}
		}
		return n
	}
	return 1
}

func itemsSize(items []any, budget int, open []*dict) int {
	n := len(items)
	for _, it := range items {
		if n > budget {
			break
		}
		n += deepSize(it, budget-n, open)
	}
	return n
}

// pyFloat is Python's repr(float): the shortest digits that round-trip,
// positional for exponents -4..15 and scientific (1e+16, 1e-05) outside.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign = "-"
		exp = -exp
	}
	return fmt.Sprintf("%se%s%02d", mant, sign, exp)
}

// pyRepr is Python's repr(str).
func pyRepr(s string) string {
	quote := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == rune(quote) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x80 || unicode.IsPrint(r): // Python's str.isprintable
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

// fromGo converts caller-supplied data into template values. Only JSON-like
// Go values are accepted, so a template can reach nothing else.
func fromGo(v any) (any, error) {
	switch v := v.(type) {
	case nil, bool, int64, float64, string:
		return v, nil
	case int:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case float32:
		return float64(v), nil
	case uint8:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case []string:
		out := make([]any, len(v))
		for i, s := range v {
			out[i] = s
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			c, err := fromGo(x)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		// Go maps have no order; sorted keys keep renders reproducible.
		// Callers who need the order of a JSON object pass json.RawMessage.
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := newDict(len(keys))
		for _, k := range keys {
			c, err := fromGo(v[k])
			if err != nil {
				return nil, fmt.Errorf("[%q]: %w", k, err)
			}
			_ = d.set(k, c)
		}
		return d, nil
	case json.RawMessage:
		return decodeOrderedJSON(v)
	}
	return nil, fmt.Errorf("unsupported value of Go type %T (use nil, bool, int, float64, string, []any, map[string]any or json.RawMessage)", v)
}
