package chat

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// Python's operators on template values. Integers are 64-bit here where
// Python's are unbounded; a result that does not fit is an error rather than
// a silently wrong number.

var errIntOverflow = errors.New("integer overflow: the result does not fit in 64 bits")

// numeric widens bool to int, as Python does in arithmetic.
func numeric(v any) (any, bool) {
	switch n := v.(type) {
	case bool:
		return boolInt(n), true
	case int64, float64:
		return n, true
	}
	return nil, false
}

func toFloat(v any) float64 {
	switch n := v.(type) {
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return 0
}

func unsupported(op string, l, r any) error {
	return fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func binaryOp(op string, l, r any) (any, error) {
	if u, ok := l.(*undefined); ok {
		return nil, &UndefinedError{Message: u.msg}
	}
	if u, ok := r.(*undefined); ok {
		return nil, &UndefinedError{Message: u.msg}
	}
	ln, lok := numeric(l)
	rn, rok := numeric(r)
	if lok && rok {
		return numberOp(op, ln, rn)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				return a + b, nil
			}
			return nil, fmt.Errorf("can only concatenate str (not %q) to str", typeName(r))
		case []any:
			if b, ok := r.([]any); ok {
				return append(append(make([]any, 0, len(a)+len(b)), a...), b...), nil
			}
			return nil, fmt.Errorf("can only concatenate list (not %q) to list", typeName(r))
		case tuple:
			if b, ok := r.(tuple); ok {
				return append(append(make(tuple, 0, len(a)+len(b)), a...), b...), nil
			}
			return nil, fmt.Errorf("can only concatenate tuple (not %q) to tuple", typeName(r))
		}
	case "*":
		seq, n := l, r
		if _, ok := numeric(l); ok {
			seq, n = r, l
		}
		count, ok := n.(int64)
		if b, isBool := n.(bool); isBool {
			count, ok = boolInt(b), true
		}
		if !ok {
			if _, isSeq := seq.(string); isSeq || isList(seq) {
				return nil, fmt.Errorf("can't multiply sequence by non-int of type '%s'", typeName(n))
			}
			break
		}
		if count < 0 {
			count = 0
		}
		switch s := seq.(type) {
		case string:
			if count > 0 && int64(len(s)) > math.MaxInt32/count {
				return nil, &LimitError{Limit: "output bytes", Max: math.MaxInt32}
			}
			return strings.Repeat(s, int(count)), nil
		case []any, tuple:
			items, _ := iterate(s)
			if count > 0 && int64(len(items)) > math.MaxInt32/count {
				return nil, &LimitError{Limit: "output bytes", Max: math.MaxInt32}
			}
			out := make([]any, 0, len(items)*int(count))
			for i := int64(0); i < count; i++ {
				out = append(out, items...)
			}
			if _, isTuple := s.(tuple); isTuple {
				return tuple(out), nil
			}
			return out, nil
		}
	case "%":
		if f, ok := l.(string); ok {
			return percentFormat(f, r)
		}
	}
	return nil, unsupported(op, l, r)
}

func isList(v any) bool {
	switch v.(type) {
	case []any, tuple:
		return true
	}
	return false
}

func numberOp(op string, l, r any) (any, error) {
	a, aInt := l.(int64)
	b, bInt := r.(int64)
	if aInt && bInt {
		return intOp(op, a, b)
	}
	x, y := toFloat(l), toFloat(r)
	switch op {
	case "+":
		return x + y, nil
	case "-":
		return x - y, nil
	case "*":
		return x * y, nil
	case "/":
		if y == 0 {
			return nil, fmt.Errorf("float division by zero")
		}
		return x / y, nil
	case "//":
		if y == 0 {
			return nil, fmt.Errorf("float floor division by zero")
		}
		return math.Floor(x / y), nil
	case "%":
		if y == 0 {
			return nil, fmt.Errorf("float modulo")
		}
		m := math.Mod(x, y)
		if m != 0 && (m < 0) != (y < 0) {
			m += y
		}
		return m, nil
	case "**":
		if x == 0 && y < 0 {
			return nil, fmt.Errorf("0.0 cannot be raised to a negative power")
		}
		return math.Pow(x, y), nil
	}
	return nil, unsupported(op, l, r)
}

func intOp(op string, a, b int64) (any, error) {
	switch op {
	case "+":
		s := a + b
		if (s > a) != (b > 0) {
			return nil, errIntOverflow
		}
		return s, nil
	case "-":
		s := a - b
		if (s < a) != (b > 0) {
			return nil, errIntOverflow
		}
		return s, nil
	case "*":
		hi, lo := bits.Mul64(uint64(abs64(a)), uint64(abs64(b)))
		if hi != 0 || lo > math.MaxInt64 || a == math.MinInt64 || b == math.MinInt64 {
			return nil, errIntOverflow
		}
		if (a < 0) != (b < 0) {
			return -int64(lo), nil
		}
		return int64(lo), nil
	case "/":
		if b == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return float64(a) / float64(b), nil
	case "//":
		if b == 0 {
			return nil, fmt.Errorf("integer division or modulo by zero")
		}
		if a == math.MinInt64 && b == -1 {
			return nil, errIntOverflow
		}
		q := a / b
		if (a%b != 0) && ((a < 0) != (b < 0)) {
			q--
		}
		return q, nil
	case "%":
		if b == 0 {
			return nil, fmt.Errorf("integer modulo by zero")
		}
		if b == -1 {
			return int64(0), nil
		}
		m := a % b
		if m != 0 && (m < 0) != (b < 0) {
			m += b
		}
		return m, nil
	case "**":
		if b < 0 {
			if a == 0 {
				return nil, fmt.Errorf("0.0 cannot be raised to a negative power")
			}
			return math.Pow(float64(a), float64(b)), nil
		}
		result := int64(1)
		base := a
		for e := b; e > 0; e >>= 1 {
			if e&1 == 1 {
				v, err := intOp("*", result, base)
				if err != nil {
					return nil, err
				}
				result = v.(int64)
			}
			if e > 1 {
				v, err := intOp("*", base, base)
				if err != nil {
					return nil, err
				}
				base = v.(int64)
			}
		}
		return result, nil
	}
	return nil, fmt.Errorf("unsupported operator %s", op)
}

func abs64(a int64) int64 {
	if a < 0 {
		return -a
	}
	return a
}

// percentFormat is Python's "%" string formatting for the conversions
// templates use: %s, %r, %d, %i, %f and %%.
func percentFormat(f string, arg any) (any, error) {
	args := []any{arg}
	if t, ok := arg.(tuple); ok {
		args = t
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			b.WriteByte(f[i])
			continue
		}
		if i+1 >= len(f) {
			return nil, fmt.Errorf("incomplete format")
		}
		i++
		c := f[i]
		if c == '%' {
			b.WriteByte('%')
			continue
		}
		if n >= len(args) {
			return nil, fmt.Errorf("not enough arguments for format string")
		}
		a := args[n]
		n++
		switch c {
		case 's':
			b.WriteString(toStr(a))
		case 'r':
			b.WriteString(reprValue(a))
		case 'd', 'i':
			v, ok := numeric(a)
			if !ok {
				return nil, fmt.Errorf("%%%c format: a real number is required, not %s", c, typeName(a))
			}
			if fl, isF := v.(float64); isF {
				v = int64(fl)
			}
			fmt.Fprintf(&b, "%d", v)
		case 'f':
			v, ok := numeric(a)
			if !ok {
				return nil, fmt.Errorf("must be real number, not %s", typeName(a))
			}
			fmt.Fprintf(&b, "%f", toFloat(v))
		default:
			return nil, fmt.Errorf("format conversion %%%c is not supported", c)
		}
	}
	if n < len(args) {
		return nil, fmt.Errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// pyEqual is Python's == on template values.
func pyEqual(a, b any) bool {
	an, aok := numeric(a)
	bn, bok := numeric(b)
	if aok && bok {
		ai, aInt := an.(int64)
		bi, bInt := bn.(int64)
		if aInt && bInt {
			return ai == bi
		}
		return toFloat(an) == toFloat(bn)
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		return ok && equalItems(x, y)
	case tuple:
		y, ok := b.(tuple)
		return ok && equalItems(x, y)
	case *dict:
		y, ok := b.(*dict)
		if !ok || x.len() != y.len() {
			return false
		}
		for i, k := range x.keys {
			v, found := y.get(k)
			if !found || !pyEqual(x.vals[i], v) {
				return false
			}
		}
		return true
	case *undefined:
		_, ok := b.(*undefined)
		return ok
	}
	return a == b
}

func equalItems(x, y []any) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if !pyEqual(x[i], y[i]) {
			return false
		}
	}
	return true
}

// pyLess is Python's < ; it fails for types Python cannot order.
func pyLess(a, b any) (bool, error) {
	if u, ok := a.(*undefined); ok {
		return false, &UndefinedError{Message: u.msg}
	}
	if u, ok := b.(*undefined); ok {
		return false, &UndefinedError{Message: u.msg}
	}
	an, aok := numeric(a)
	bn, bok := numeric(b)
	if aok && bok {
		ai, aInt := an.(int64)
		bi, bInt := bn.(int64)
		if aInt && bInt {
			return ai < bi, nil
		}
		return toFloat(an) < toFloat(bn), nil
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return x < y, nil
		}
	case []any:
		if y, ok := b.([]any); ok {
			return lessItems(x, y)
		}
	case tuple:
		if y, ok := b.(tuple); ok {
			return lessItems(x, y)
		}
	}
	return false, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func lessItems(x, y []any) (bool, error) {
	for i := 0; i < len(x) && i < len(y); i++ {
		if !pyEqual(x[i], y[i]) {
			return pyLess(x[i], y[i])
		}
	}
	return len(x) < len(y), nil
}

func compare(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return pyEqual(a, b), nil
	case "!=":
		return !pyEqual(a, b), nil
	case "<":
		return pyLess(a, b)
	case ">":
		return pyLess(b, a)
	case "<=":
		lt, err := pyLess(b, a)
		return !lt && err == nil, err
	case ">=":
		lt, err := pyLess(a, b)
		return !lt && err == nil, err
	case "in":
		return contains2(b, a)
	case "notin":
		in, err := contains2(b, a)
		return !in && err == nil, err
	}
	return false, fmt.Errorf("unsupported comparison %s", op)
}

// contains2 is Python's "item in container".
func contains2(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case []any:
		return containsItem(c, item), nil
	case tuple:
		return containsItem(c, item), nil
	case *dict:
		if _, err := hashKey(item); err != nil {
			return false, err
		}
		_, ok := c.get(item)
		return ok, nil
	case *undefined:
		return false, nil
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

func containsItem(items []any, item any) bool {
	for _, it := range items {
		if pyEqual(it, item) {
			return true
		}
	}
	return false
}
