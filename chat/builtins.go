package chat

import (
	"fmt"
	"html"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Filters, tests, globals and the Python methods of str, list and dict that
// templates call. Lookups are switch statements rather than maps so that no
// package state can be changed at run time.

type filterFunc func(r *renderer, v any, args []any, kw *dict) (any, error)

type testFunc func(r *renderer, v any, args []any) (bool, error)

// bind matches positional and keyword arguments to params, as Python does,
// filling defaults (a missing default is an error).
func bind(what string, params []string, defaults []any, args []any, kw *dict) ([]any, error) {
	if len(args) > len(params) {
		return nil, fmt.Errorf("%s takes at most %d argument(s) (%d given)", what, len(params), len(args))
	}
	out := make([]any, len(params))
	set := make([]bool, len(params))
	for i, a := range args {
		out[i], set[i] = a, true
	}
	if kw != nil {
		for i, k := range kw.keys {
			name, _ := k.(string)
			j := -1
			for n, p := range params {
				if p == name {
					j = n
				}
			}
			if j < 0 {
				return nil, fmt.Errorf("%s got an unexpected keyword argument %s", what, pyRepr(name))
			}
			if set[j] {
				return nil, fmt.Errorf("%s got multiple values for argument %s", what, pyRepr(name))
			}
			out[j], set[j] = kw.vals[i], true
		}
	}
	first := len(params) - len(defaults)
	for i := range params {
		if set[i] {
			continue
		}
		if i < first {
			return nil, fmt.Errorf("%s missing required argument %s", what, pyRepr(params[i]))
		}
		out[i] = defaults[i-first]
	}
	return out, nil
}

func asInt(what string, v any) (int64, error) {
	switch n := v.(type) {
	case int64:
		return n, nil
	case bool:
		return boolInt(n), nil
	}
	return 0, fmt.Errorf("%s: an integer is required, not %s", what, typeName(v))
}

func asOptString(what string, v any) (*string, error) {
	switch s := v.(type) {
	case nil:
		return nil, nil
	case string:
		return &s, nil
	}
	return nil, fmt.Errorf("%s: expected a string or None, not %s", what, typeName(v))
}

func lookupFilter(name string) filterFunc {
	switch name {
	case "abs":
		return filterAbs
	case "capitalize":
		return strFilter(pyCapitalize)
	case "count", "length":
		return filterLength
	case "d", "default":
		return filterDefault
	case "dictsort":
		return filterDictsort
	case "e", "escape", "forceescape":
		return strFilter(html.EscapeString)
	case "first":
		return filterFirst
	case "float":
		return filterFloat
	case "indent":
		return filterIndent
	case "int":
		return filterInt
	case "items":
		return filterItems
	case "join":
		return filterJoin
	case "last":
		return filterLast
	case "list":
		return filterList
	case "lower":
		return strFilter(pyLower)
	case "map":
		return filterMap
	case "max":
		return filterMinMax(false)
	case "min":
		return filterMinMax(true)
	case "reject":
		return filterSelect(false, false)
	case "rejectattr":
		return filterSelect(false, true)
	case "replace":
		return filterReplace
	case "reverse":
		return filterReverse
	case "round":
		return filterRound
	case "safe", "string":
		return strFilter(func(s string) string { return s })
	case "select":
		return filterSelect(true, false)
	case "selectattr":
		return filterSelect(true, true)
	case "sort":
		return filterSort
	case "sum":
		return filterSum
	case "title":
		return strFilter(jinjaTitle)
	case "tojson":
		return filterToJSON
	case "trim":
		return filterTrim
	case "unique":
		return filterUnique
	case "upper":
		return strFilter(pyUpper)
	case "wordcount":
		return strFilter(nil)
	}
	return nil
}

func (r *renderer) applyFilter(f *filterExpr, v any, sc *scope) (any, error) {
	fn := lookupFilter(f.name)
	if fn == nil {
		return nil, fmt.Errorf("no filter named %q", f.name)
	}
	args, err := r.evalAll(f.args, sc)
	if err != nil {
		return nil, err
	}
	kw, err := r.evalKwargs(f.kwargs, sc)
	if err != nil {
		return nil, err
	}
	out, err := fn(r, v, args, kw)
	if err != nil {
		return nil, r.at(f.off, "filter "+f.name, err)
	}
	return r.checkSize(out)
}

// strFilter makes a filter of a string function applied to str(value);
// nil means wordcount.
func strFilter(fn func(string) string) filterFunc {
	return func(_ *renderer, v any, args []any, kw *dict) (any, error) {
		if len(args) > 0 || kw.len() > 0 {
			return nil, fmt.Errorf("filter takes no arguments")
		}
		if fn == nil {
			return int64(countWords(toStr(v))), nil
		}
		return fn(toStr(v)), nil
	}
}

// countWords counts matches of Python's \w+.
func countWords(s string) int {
	n, in := 0, false
	for _, c := range s {
		w := c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c) || unicode.Is(unicode.Mn, c)
		if w && !in {
			n++
		}
		in = w
	}
	return n
}

func filterTrim(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("trim", []string{"chars"}, []any{nil}, args, kw)
	if err != nil {
		return nil, err
	}
	chars, err := asOptString("trim", a[0])
	if err != nil {
		return nil, err
	}
	return pyStrip(toStr(v), chars, true, true), nil
}

func length(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case []any:
		return len(x), nil
	case tuple:
		return len(x), nil
	case *dict:
		return x.len(), nil
	case *undefined:
		return 0, nil
	case *namespace:
		return 0, fmt.Errorf("object of type 'Namespace' has no len()")
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

func filterLength(r *renderer, v any, args []any, kw *dict) (any, error) {
	if len(args) > 0 || kw.len() > 0 {
		return nil, fmt.Errorf("length takes no arguments")
	}
	n, err := length(v)
	return int64(n), err
}

func filterDefault(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("default", []string{"default_value", "boolean"}, []any{"", false}, args, kw)
	if err != nil {
		return nil, err
	}
	if _, isU := v.(*undefined); isU || (truthy(a[1]) && !truthy(v)) {
		return a[0], nil
	}
	return v, nil
}

func filterFirst(r *renderer, v any, args []any, kw *dict) (any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &undefined{msg: "No first item, sequence was empty."}, nil
	}
	return items[0], nil
}

func filterLast(r *renderer, v any, args []any, kw *dict) (any, error) {
	if _, ok := v.(*dict); ok {
		return nil, fmt.Errorf("'dict' object is not reversible")
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return &undefined{msg: "No last item, sequence was empty."}, nil
	}
	return items[len(items)-1], nil
}

func filterList(r *renderer, v any, args []any, kw *dict) (any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

func filterReverse(r *renderer, v any, args []any, kw *dict) (any, error) {
	if s, ok := v.(string); ok {
		rs := []rune(s)
		for i, j := 0, len(rs)-1; i < j; i, j = i+1, j-1 {
			rs[i], rs[j] = rs[j], rs[i]
		}
		return string(rs), nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	return out, nil
}

func filterJoin(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("join", []string{"d", "attribute"}, []any{"", nil}, args, kw)
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if a[1] != nil {
		if items, err = mapAttr(items, a[1], nil); err != nil {
			return nil, err
		}
	}
	var b strings.Builder
	sep := toStr(a[0])
	for i, it := range items {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(toStr(it))
		if b.Len() > r.limits.MaxOutputBytes {
			return nil, &LimitError{Limit: "output bytes", Max: r.limits.MaxOutputBytes}
		}
	}
	return b.String(), nil
}

// attrPath follows Jinja's attribute="a.b.0" paths used by map, sort,
// selectattr and friends: each part is an item lookup (an integer part
// indexes).
func attrPath(item any, attr any) (any, error) {
	path, ok := attr.(string)
	if !ok {
		if i, isInt := attr.(int64); isInt {
			return getItem(item, i)
		}
		return getItem(item, attr)
	}
	v := item
	for _, part := range strings.Split(path, ".") {
		var key any = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func mapAttr(items []any, attr any, def any) ([]any, error) {
	out := make([]any, len(items))
	for i, it := range items {
		v, err := attrPath(it, attr)
		if err != nil {
			return nil, err
		}
		if _, isU := v.(*undefined); isU && def != nil {
			v = def
		}
		out[i] = v
	}
	return out, nil
}

func filterMap(r *renderer, v any, args []any, kw *dict) (any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if attr, ok := kw.get("attribute"); ok && len(args) == 0 {
		def, _ := kw.get("default")
		return mapAttr(items, attr, def)
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("map requires a filter argument")
	}
	name, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("map: the filter name must be a string")
	}
	fn := lookupFilter(name)
	if fn == nil {
		return nil, fmt.Errorf("no filter named %q", name)
	}
	out := make([]any, len(items))
	for i, it := range items {
		if err := r.step(); err != nil {
			return nil, err
		}
		if out[i], err = fn(r, it, args[1:], kw); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// filterSelect builds select, reject, selectattr and rejectattr.
func filterSelect(keep, byAttr bool) filterFunc {
	return func(r *renderer, v any, args []any, kw *dict) (any, error) {
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		var attr any
		if byAttr {
			if len(args) == 0 {
				return nil, fmt.Errorf("missing parameter for attribute name")
			}
			attr, args = args[0], args[1:]
		}
		var test testFunc
		if len(args) > 0 {
			name, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("the test name must be a string")
			}
			if test = lookupTest(name); test == nil {
				return nil, fmt.Errorf("no test named %q", name)
			}
			args = args[1:]
		}
		out := []any{}
		for _, it := range items {
			if err := r.step(); err != nil {
				return nil, err
			}
			subject := it
			if byAttr {
				if subject, err = attrPath(it, attr); err != nil {
					return nil, err
				}
			}
			ok := truthy(subject)
			if test != nil {
				if ok, err = test(r, subject, args); err != nil {
					return nil, err
				}
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return out, nil
	}
}

func filterItems(r *renderer, v any, args []any, kw *dict) (any, error) {
	switch d := v.(type) {
	case *undefined:
		return []any{}, nil
	case *dict:
		return dictItems(d), nil
	}
	return nil, fmt.Errorf("Can only get item pairs from a mapping.")
}

func dictItems(d *dict) []any {
	out := make([]any, d.len())
	for i, k := range d.keys {
		out[i] = tuple{k, d.vals[i]}
	}
	return out
}

func filterIndent(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("indent", []string{"width", "first", "blank"}, []any{int64(4), false, false}, args, kw)
	if err != nil {
		return nil, err
	}
	var ind string
	switch w := a[0].(type) {
	case string:
		ind = w
	default:
		n, err := asInt("indent", w)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			ind = strings.Repeat(" ", int(min(n, 1<<20)))
		}
	}
	s := toStr(v) + "\n" // Jinja's trick so splitlines keeps a last empty line
	lines := pySplitlines(s)
	var out string
	if truthy(a[2]) {
		out = strings.Join(lines, "\n"+ind)
	} else {
		out = lines[0]
		rest := lines[1:]
		for i, l := range rest {
			if l != "" {
				rest[i] = ind + l
			}
		}
		if len(rest) > 0 {
			out += "\n" + strings.Join(rest, "\n")
		}
	}
	if truthy(a[1]) {
		out = ind + out
	}
	return out, nil
}

func filterReplace(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("replace", []string{"old", "new", "count"}, []any{nil}, args, kw)
	if err != nil {
		return nil, err
	}
	count := int64(-1)
	if a[2] != nil {
		if count, err = asInt("replace", a[2]); err != nil {
			return nil, err
		}
	}
	return pyReplace(toStr(v), toStr(a[0]), toStr(a[1]), count), nil
}

// pyReplace is str.replace; an empty old inserts new between characters,
// as Python does (strings.Replace agrees, counting runes).
func pyReplace(s, old, new string, count int64) string {
	if count < 0 {
		return strings.ReplaceAll(s, old, new)
	}
	return strings.Replace(s, old, new, int(min(count, math.MaxInt32)))
}

func filterAbs(r *renderer, v any, args []any, kw *dict) (any, error) {
	switch n := v.(type) {
	case bool:
		return boolInt(n), nil
	case int64:
		if n == math.MinInt64 {
			return nil, errIntOverflow
		}
		return abs64(n), nil
	case float64:
		return math.Abs(n), nil
	}
	return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
}

func filterInt(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("int", []string{"default", "base"}, []any{int64(0), int64(10)}, args, kw)
	if err != nil {
		return nil, err
	}
	switch n := v.(type) {
	case bool:
		return boolInt(n), nil
	case int64:
		return n, nil
	case float64:
		if math.IsNaN(n) || math.IsInf(n, 0) || math.Abs(n) >= 1<<63 {
			return a[0], nil
		}
		return int64(n), nil
	case string:
		s := strings.ReplaceAll(pyStrip(n, nil, true, true), "_", "")
		base, err := asInt("int", a[1])
		if err != nil {
			return nil, err
		}
		if i, ok := parsePyInt(s, base); ok {
			return i, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && math.Abs(f) < 1<<63 {
			return int64(f), nil
		}
	}
	return a[0], nil
}

// parsePyInt is Python's int(s, base): base 0 reads the 0x/0o/0b prefix,
// and bases 16, 8 and 2 accept their own prefix.
func parsePyInt(s string, base int64) (int64, bool) {
	if base != 0 && (base < 2 || base > 36) {
		return 0, false
	}
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if len(body) > 2 && body[0] == '0' {
		p := unicode.ToLower(rune(body[1]))
		if (p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2) {
			body = body[2:]
		}
	}
	if neg {
		body = "-" + body
	}
	i, err := strconv.ParseInt(body, int(base), 64)
	return i, err == nil
}

func filterFloat(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("float", []string{"default"}, []any{0.0}, args, kw)
	if err != nil {
		return nil, err
	}
	switch n := v.(type) {
	case bool:
		return float64(boolInt(n)), nil
	case int64:
		return float64(n), nil
	case float64:
		return n, nil
	case string:
		s := strings.ReplaceAll(pyStrip(n, nil, true, true), "_", "")
		if f, err := strconv.ParseFloat(s, 64); err == nil || isRangeErr(err) {
			return f, nil
		}
	}
	return a[0], nil
}

func filterRound(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("round", []string{"precision", "method"}, []any{int64(0), "common"}, args, kw)
	if err != nil {
		return nil, err
	}
	n, ok := numeric(v)
	if !ok {
		return nil, fmt.Errorf("type %s doesn't define __round__ method", typeName(v))
	}
	prec, err := asInt("round", a[0])
	if err != nil {
		return nil, err
	}
	f := toFloat(n)
	scale := math.Pow(10, float64(prec))
	switch a[1] {
	case "common":
		// Python's round() is correctly rounded, half to even; formatting
		// with a precision rounds the same way.
		if prec >= 0 && prec < 300 {
			if r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(prec), 64), 64); err == nil {
				return r, nil
			}
		}
		return math.RoundToEven(f*scale) / scale, nil
	case "floor":
		return math.Floor(f*scale) / scale, nil
	case "ceil":
		return math.Ceil(f*scale) / scale, nil
	}
	return nil, fmt.Errorf("method must be 'common', 'ceil' or 'floor'")
}

// sortKey lowers strings for case-insensitive comparisons.
func sortKey(v any, caseSensitive bool) any {
	if s, ok := v.(string); ok && !caseSensitive {
		return pyLower(s)
	}
	return v
}

func sortItems(items []any, keyOf func(any) (any, error), reverse bool) ([]any, error) {
	keys := make([]any, len(items))
	for i, it := range items {
		k, err := keyOf(it)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var cmpErr error
	sort.SliceStable(idx, func(i, j int) bool {
		a, b := keys[idx[i]], keys[idx[j]]
		if reverse {
			a, b = b, a
		}
		lt, err := pyLess(a, b)
		if err != nil && cmpErr == nil {
			cmpErr = err
		}
		return lt
	})
	if cmpErr != nil {
		return nil, cmpErr
	}
	out := make([]any, len(items))
	for i, j := range idx {
		out[i] = items[j]
	}
	return out, nil
}

func filterSort(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("sort", []string{"reverse", "case_sensitive", "attribute"}, []any{false, false, nil}, args, kw)
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	return sortItems(items, func(it any) (any, error) {
		if a[2] != nil {
			x, err := attrPath(it, a[2])
			return sortKey(x, truthy(a[1])), err
		}
		return sortKey(it, truthy(a[1])), nil
	}, truthy(a[0]))
}

func filterDictsort(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("dictsort", []string{"case_sensitive", "by", "reverse"}, []any{false, "key", false}, args, kw)
	if err != nil {
		return nil, err
	}
	d, ok := v.(*dict)
	if !ok {
		return nil, fmt.Errorf("dictsort: expected a mapping, got %s", typeName(v))
	}
	pos := 0
	switch a[1] {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, fmt.Errorf("You can only sort by either \"key\" or \"value\"")
	}
	return sortItems(dictItems(d), func(it any) (any, error) {
		return sortKey(it.(tuple)[pos], truthy(a[0])), nil
	}, truthy(a[2]))
}

func filterUnique(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("unique", []string{"case_sensitive", "attribute"}, []any{false, nil}, args, kw)
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	seen := newDict(len(items))
	out := []any{}
	for _, it := range items {
		k := it
		if a[1] != nil {
			if k, err = attrPath(it, a[1]); err != nil {
				return nil, err
			}
		}
		k = sortKey(k, truthy(a[0]))
		if _, dup := seen.get(k); dup {
			continue
		}
		if err := seen.set(k, true); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, nil
}

func filterSum(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("sum", []string{"attribute", "start"}, []any{nil, int64(0)}, args, kw)
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if a[0] != nil {
		if items, err = mapAttr(items, a[0], nil); err != nil {
			return nil, err
		}
	}
	total := a[1]
	for _, it := range items {
		if total, err = binaryOp("+", total, it); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterMinMax(isMin bool) filterFunc {
	return func(r *renderer, v any, args []any, kw *dict) (any, error) {
		a, err := bind("min/max", []string{"case_sensitive", "attribute"}, []any{false, nil}, args, kw)
		if err != nil {
			return nil, err
		}
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return &undefined{msg: "No aggregated item, sequence was empty."}, nil
		}
		key := func(it any) (any, error) {
			if a[1] != nil {
				x, err := attrPath(it, a[1])
				return sortKey(x, truthy(a[0])), err
			}
			return sortKey(it, truthy(a[0])), nil
		}
		best := items[0]
		bestKey, err := key(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := key(it)
			if err != nil {
				return nil, err
			}
			var better bool
			if isMin {
				better, err = pyLess(k, bestKey)
			} else {
				better, err = pyLess(bestKey, k)
			}
			if err != nil {
				return nil, err
			}
			if better {
				best, bestKey = it, k
			}
		}
		return best, nil
	}
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=None, separators=None, sort_keys=False), which unlike Jinja's own
// filter leaves <, >, & and ' unescaped.
func filterToJSON(r *renderer, v any, args []any, kw *dict) (any, error) {
	a, err := bind("tojson", []string{"ensure_ascii", "indent", "separators", "sort_keys"}, []any{false, nil, nil, false}, args, kw)
	if err != nil {
		return nil, err
	}
	o := newJSONOptions()
	o.ensureASCII = truthy(a[0])
	o.sortKeys = truthy(a[3])
	switch ind := a[1].(type) {
	case nil:
	case string:
		o.indent = &ind
	default:
		n, err := asInt("tojson indent", ind)
		if err != nil {
			return nil, err
		}
		s := strings.Repeat(" ", int(max(0, min(n, 1<<10))))
		o.indent = &s
		o.itemSep = ","
	}
	if a[2] != nil {
		seps, err := iterate(a[2])
		if err != nil || len(seps) != 2 {
			return nil, fmt.Errorf("tojson separators must be a pair of strings")
		}
		item, ok1 := seps[0].(string)
		key, ok2 := seps[1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("tojson separators must be a pair of strings")
		}
		o.itemSep, o.keySep = item, key
	}
	return pyDumps(v, o, r.limits.MaxOutputBytes)
}

func lookupTest(name string) testFunc {
	switch name {
	case "defined":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, u := v.(*undefined); return !u, nil }
	case "undefined":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, u := v.(*undefined); return u, nil }
	case "none":
		return func(_ *renderer, v any, _ []any) (bool, error) { return v == nil, nil }
	case "boolean":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, ok := v.(bool); return ok, nil }
	case "true":
		return func(_ *renderer, v any, _ []any) (bool, error) { b, ok := v.(bool); return ok && b, nil }
	case "false":
		return func(_ *renderer, v any, _ []any) (bool, error) { b, ok := v.(bool); return ok && !b, nil }
	case "integer":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, ok := v.(int64); return ok, nil }
	case "float":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, ok := v.(float64); return ok, nil }
	case "number":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, ok := numeric(v); return ok, nil }
	case "string":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, ok := v.(string); return ok, nil }
	case "mapping":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, ok := v.(*dict); return ok, nil }
	case "iterable":
		return func(_ *renderer, v any, _ []any) (bool, error) { _, err := iterate(v); return err == nil, nil }
	case "sequence":
		return func(_ *renderer, v any, _ []any) (bool, error) {
			switch v.(type) {
			case string, []any, tuple, *dict, *undefined:
				return true, nil
			}
			return false, nil
		}
	case "callable":
		return func(_ *renderer, v any, _ []any) (bool, error) {
			switch v.(type) {
			case *function, *macro:
				return true, nil
			}
			return false, nil
		}
	case "escaped":
		return func(_ *renderer, v any, _ []any) (bool, error) { return false, nil }
	case "odd", "even":
		want := int64(0)
		if name == "odd" {
			want = 1
		}
		return func(_ *renderer, v any, _ []any) (bool, error) {
			m, err := binaryOp("%", v, int64(2))
			if err != nil {
				return false, err
			}
			return pyEqual(m, want), nil
		}
	case "divisibleby":
		return func(_ *renderer, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("divisibleby takes one argument")
			}
			m, err := binaryOp("%", v, args[0])
			if err != nil {
				return false, err
			}
			return pyEqual(m, int64(0)), nil
		}
	case "lower":
		return func(_ *renderer, v any, _ []any) (bool, error) { return isLowerUpper(toStr(v), true), nil }
	case "upper":
		return func(_ *renderer, v any, _ []any) (bool, error) { return isLowerUpper(toStr(v), false), nil }
	case "sameas":
		return func(_ *renderer, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("sameas takes one argument")
			}
			return sameAs(v, args[0]), nil
		}
	case "in":
		return func(_ *renderer, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("in takes one argument")
			}
			return contains2(args[0], v)
		}
	case "eq", "equalto", "==":
		return cmpTest("==")
	case "ne", "!=":
		return cmpTest("!=")
	case "lt", "lessthan", "<":
		return cmpTest("<")
	case "le", "<=":
		return cmpTest("<=")
	case "gt", "greaterthan", ">":
		return cmpTest(">")
	case "ge", ">=":
		return cmpTest(">=")
	}
	return nil
}

func cmpTest(op string) testFunc {
	return func(_ *renderer, v any, args []any) (bool, error) {
		if len(args) != 1 {
			return false, fmt.Errorf("test takes one argument")
		}
		return compare(op, v, args[0])
	}
}

// sameAs is Python's "is": identity for containers, value for the
// immutable singletons and small values Python interns.
func sameAs(a, b any) bool {
	switch x := a.(type) {
	case nil, bool:
		return a == b
	case *dict, *namespace, *undefined, *function, *macro, *loopContext:
		return a == b
	case []any:
		y, ok := b.([]any)
		return ok && len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
	}
	return false
}

func isLowerUpper(s string, lower bool) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsTitle(r) {
			if lower {
				return false
			}
			cased = true
		} else if unicode.IsLower(r) {
			if !lower {
				return false
			}
			cased = true
		}
	}
	return cased
}

func (r *renderer) applyTest(t *testExpr, sc *scope) (any, error) {
	v, err := r.eval(t.x, sc)
	if err != nil {
		return nil, err
	}
	fn := lookupTest(t.name)
	if fn == nil {
		return nil, fmt.Errorf("no test named %q", t.name)
	}
	args, err := r.evalAll(t.args, sc)
	if err != nil {
		return nil, err
	}
	if len(t.kwargs) > 0 {
		return nil, fmt.Errorf("test %q takes no keyword arguments", t.name)
	}
	return fn(r, v, args)
}

// method returns a bound method value.
func method(name string, fn func(r *renderer, args []any, kw *dict) (any, error)) *function {
	return &function{name: name, call: fn}
}

// unsafeMethod is what the immutable sandbox gives for methods that would
// modify a list or dict: an undefined that fails when called.
func unsafeMethod(typ, name string) *undefined {
	return &undefined{msg: fmt.Sprintf("access to attribute %s of %s object is unsafe.", pyRepr(name), pyRepr(typ))}
}

func strMethod(s, name string) any {
	noArgs := func(fn func(string) any) any {
		return method(name, func(_ *renderer, args []any, kw *dict) (any, error) {
			if len(args) > 0 || kw.len() > 0 {
				return nil, fmt.Errorf("str.%s() takes no arguments", name)
			}
			return fn(s), nil
		})
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		return method(name, func(_ *renderer, args []any, kw *dict) (any, error) {
			a, err := bind("str."+name, []string{"chars"}, []any{nil}, args, kw)
			if err != nil {
				return nil, err
			}
			chars, err := asOptString("str."+name, a[0])
			if err != nil {
				return nil, err
			}
			return pyStrip(s, chars, name != "rstrip", name != "lstrip"), nil
		})
	case "split", "rsplit":
		return method(name, func(_ *renderer, args []any, kw *dict) (any, error) {
			a, err := bind("str."+name, []string{"sep", "maxsplit"}, []any{nil, int64(-1)}, args, kw)
			if err != nil {
				return nil, err
			}
			sep, err := asOptString("str."+name, a[0])
			if err != nil {
				return nil, err
			}
			n, err := asInt("str."+name, a[1])
			if err != nil {
				return nil, err
			}
			if n > math.MaxInt32 {
				n = -1
			}
			if name == "rsplit" {
				return pyRsplit(s, sep, int(n))
			}
			return pySplit(s, sep, int(n))
		})
	case "splitlines":
		return noArgs(func(s string) any {
			out := []any{}
			for _, l := range pySplitlines(s) {
				out = append(out, l)
			}
			return out
		})
	case "startswith", "endswith":
		return method(name, func(_ *renderer, args []any, kw *dict) (any, error) {
			if len(args) != 1 || kw.len() > 0 {
				return nil, fmt.Errorf("str.%s() takes exactly one argument", name)
			}
			var cands []any
			switch p := args[0].(type) {
			case string:
				cands = []any{p}
			case tuple:
				cands = p
			default:
				return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
			}
			for _, c := range cands {
				p, ok := c.(string)
				if !ok {
					return nil, fmt.Errorf("tuple for %s must only contain str, not %s", name, typeName(c))
				}
				if (name == "startswith" && strings.HasPrefix(s, p)) || (name == "endswith" && strings.HasSuffix(s, p)) {
					return true, nil
				}
			}
			return false, nil
		})
	case "upper":
		return noArgs(func(s string) any { return pyUpper(s) })
	case "lower":
		return noArgs(func(s string) any { return pyLower(s) })
	case "title":
		return noArgs(func(s string) any { return pyTitle(s) })
	case "capitalize":
		return noArgs(func(s string) any { return pyCapitalize(s) })
	case "isdigit", "isalpha", "isalnum", "isspace":
		return noArgs(func(s string) any { return strIs(s, name) })
	case "isupper":
		return noArgs(func(s string) any { return isLowerUpper(s, false) })
	case "islower":
		return noArgs(func(s string) any { return isLowerUpper(s, true) })
	case "replace":
		return method(name, func(_ *renderer, args []any, kw *dict) (any, error) {
			a, err := bind("str.replace", []string{"old", "new", "count"}, []any{int64(-1)}, args, kw)
			if err != nil {
				return nil, err
			}
			old, ok1 := a[0].(string)
			nw, ok2 := a[1].(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("replace() arguments must be str")
			}
			n, err := asInt("str.replace", a[2])
			if err != nil {
				return nil, err
			}
			return pyReplace(s, old, nw, n), nil
		})
	case "find", "rfind", "index", "rindex", "count":
		return method(name, func(_ *renderer, args []any, kw *dict) (any, error) {
			if len(args) != 1 || kw.len() > 0 {
				return nil, fmt.Errorf("str.%s() takes exactly one argument here", name)
			}
			sub, ok := args[0].(string)
			if !ok {
				return nil, fmt.Errorf("must be str, not %s", typeName(args[0]))
			}
			if name == "count" {
				if sub == "" {
					return int64(utf8.RuneCountInString(s) + 1), nil
				}
				return int64(strings.Count(s, sub)), nil
			}
			i := strings.Index(s, sub)
			if name[0] == 'r' {
				i = strings.LastIndex(s, sub)
			}
			if i < 0 {
				if strings.HasSuffix(name, "index") {
					return nil, fmt.Errorf("substring not found")
				}
				return int64(-1), nil
			}
			return int64(utf8.RuneCountInString(s[:i])), nil
		})
	case "join":
		return method(name, func(r *renderer, args []any, kw *dict) (any, error) {
			if len(args) != 1 || kw.len() > 0 {
				return nil, fmt.Errorf("str.join() takes exactly one argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, fmt.Errorf("can only join an iterable")
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return r.checkSize(strings.Join(parts, s))
		})
	case "format", "format_map", "encode", "casefold", "center", "ljust", "rjust", "zfill", "partition",
		"rpartition", "expandtabs", "swapcase", "translate", "removeprefix", "removesuffix", "isdecimal",
		"isnumeric", "isidentifier", "isprintable", "isascii", "istitle":
		return method(name, func(*renderer, []any, *dict) (any, error) {
			return nil, fmt.Errorf("str.%s is not supported by this renderer", name)
		})
	}
	return nil
}

func strIs(s, name string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		var ok bool
		switch name {
		case "isdigit":
			ok = unicode.IsDigit(r)
		case "isalpha":
			ok = unicode.IsLetter(r)
		case "isalnum":
			ok = unicode.IsLetter(r) || unicode.IsNumber(r)
		case "isspace":
			ok = pyIsSpace(r)
		}
		if !ok {
			return false
		}
	}
	return true
}

func dictMethod(d *dict, name string) any {
	switch name {
	case "items":
		return method(name, func(*renderer, []any, *dict) (any, error) { return dictItems(d), nil })
	case "keys":
		return method(name, func(*renderer, []any, *dict) (any, error) { return append([]any{}, d.keys...), nil })
	case "values":
		return method(name, func(*renderer, []any, *dict) (any, error) { return append([]any{}, d.vals...), nil })
	case "get":
		return method(name, func(_ *renderer, args []any, kw *dict) (any, error) {
			if len(args) < 1 || len(args) > 2 || kw.len() > 0 {
				return nil, fmt.Errorf("get expected 1 or 2 arguments, got %d", len(args))
			}
			if _, err := hashKey(args[0]); err != nil {
				return nil, err
			}
			if v, ok := d.get(args[0]); ok {
				return v, nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, nil
		})
	case "copy":
		return method(name, func(*renderer, []any, *dict) (any, error) {
			c := newDict(d.len())
			for i, k := range d.keys {
				_ = c.set(k, d.vals[i])
			}
			return c, nil
		})
	case "update", "pop", "popitem", "setdefault", "clear":
		return unsafeMethod("dict", name)
	case "fromkeys":
		return method(name, func(*renderer, []any, *dict) (any, error) {
			return nil, fmt.Errorf("dict.fromkeys is not supported by this renderer")
		})
	}
	return nil
}

func listMethod(items []any, typ, name string) any {
	switch name {
	case "index", "count":
		return method(name, func(_ *renderer, args []any, kw *dict) (any, error) {
			if len(args) != 1 || kw.len() > 0 {
				return nil, fmt.Errorf("%s.%s() takes exactly one argument here", typ, name)
			}
			n := int64(0)
			for i, it := range items {
				if pyEqual(it, args[0]) {
					if name == "index" {
						return int64(i), nil
					}
					n++
				}
			}
			if name == "index" {
				return nil, fmt.Errorf("%s is not in %s", reprValue(args[0]), typ)
			}
			return n, nil
		})
	case "copy":
		if typ == "list" {
			return method(name, func(*renderer, []any, *dict) (any, error) { return append([]any{}, items...), nil })
		}
	case "append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear":
		if typ == "list" {
			return unsafeMethod(typ, name)
		}
	}
	return nil
}

// globalScope holds the globals transformers' environment provides.
func globalScope() *scope {
	g := newScope(nil)
	g.set("range", &function{name: "range", call: globalRange})
	g.set("namespace", &function{name: "namespace", call: globalNamespace})
	g.set("dict", &function{name: "dict", call: globalDict})
	g.set("raise_exception", &function{name: "raise_exception", call: globalRaise})
	g.set("strftime_now", &function{name: "strftime_now", call: globalStrftime})
	return g
}

// maxRange is jinja2's sandbox MAX_RANGE.
const maxRange = 100000

func globalRange(_ *renderer, args []any, kw *dict) (any, error) {
	if kw.len() > 0 {
		return nil, fmt.Errorf("range() takes no keyword arguments")
	}
	n := make([]int64, len(args))
	for i, a := range args {
		v, err := asInt("range", a)
		if err != nil {
			return nil, fmt.Errorf("'%s' object cannot be interpreted as an integer", typeName(a))
		}
		n[i] = v
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(n) {
	case 1:
		stop = n[0]
	case 2:
		start, stop = n[0], n[1]
	case 3:
		start, stop, step = n[0], n[1], n[2]
	default:
		return nil, fmt.Errorf("range expected 1 to 3 arguments, got %d", len(n))
	}
	if step == 0 {
		return nil, fmt.Errorf("range() arg 3 must not be zero")
	}
	var count float64
	if step > 0 && stop > start {
		count = math.Ceil((float64(stop) - float64(start)) / float64(step))
	} else if step < 0 && stop < start {
		count = math.Ceil((float64(start) - float64(stop)) / -float64(step))
	}
	if count > maxRange {
		return nil, fmt.Errorf("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	out := make([]any, 0, int(count))
	for i := int64(0); i < int64(count); i++ {
		out = append(out, start+i*step)
	}
	return out, nil
}

// dictFrom is Python's dict(*args, **kwargs) with at most one mapping or
// iterable of pairs.
func dictFrom(what string, args []any, kw *dict) (*dict, error) {
	if len(args) > 1 {
		return nil, fmt.Errorf("%s expected at most 1 argument, got %d", what, len(args))
	}
	d := newDict(kw.len())
	if len(args) == 1 {
		switch src := args[0].(type) {
		case *dict:
			for i, k := range src.keys {
				_ = d.set(k, src.vals[i])
			}
		default:
			pairs, err := iterate(src)
			if err != nil {
				return nil, err
			}
			for _, p := range pairs {
				kv, err := iterate(p)
				if err != nil || len(kv) != 2 {
					return nil, fmt.Errorf("%s: each element must be a pair", what)
				}
				if err := d.set(kv[0], kv[1]); err != nil {
					return nil, err
				}
			}
		}
	}
	for i, k := range kw.keys {
		_ = d.set(k, kw.vals[i])
	}
	return d, nil
}

func globalNamespace(_ *renderer, args []any, kw *dict) (any, error) {
	d, err := dictFrom("namespace", args, kw)
	if err != nil {
		return nil, err
	}
	return &namespace{attrs: d}, nil
}

func globalDict(_ *renderer, args []any, kw *dict) (any, error) {
	return dictFrom("dict", args, kw)
}

func globalRaise(_ *renderer, args []any, kw *dict) (any, error) {
	a, err := bind("raise_exception", []string{"message"}, nil, args, kw)
	if err != nil {
		return nil, err
	}
	return nil, &RaiseError{Message: toStr(a[0])}
}

func globalStrftime(r *renderer, args []any, kw *dict) (any, error) {
	a, err := bind("strftime_now", []string{"format"}, nil, args, kw)
	if err != nil {
		return nil, err
	}
	f, ok := a[0].(string)
	if !ok {
		return nil, fmt.Errorf("strftime() argument 1 must be str, not %s", typeName(a[0]))
	}
	return pyStrftime(r.now(), f), nil
}
