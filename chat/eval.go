package chat

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// renderer executes one Render call. It is not shared between calls.
type renderer struct {
	tmpl   *Template
	out    *strings.Builder
	root   *scope // template top level
	limits Limits
	now    func() time.Time
	steps  int
	depth  int // macro calls in progress
}

// scope is one level of variables. Levels hold a handful of names, so a
// slice searched linearly beats a map, and loops make one per iteration.
type scope struct {
	vars   []binding
	parent *scope
	buf    [3]binding // first bindings, allocated with the scope
}

type binding struct {
	name string
	v    any
}

func newScope(parent *scope) *scope {
	s := &scope{parent: parent}
	s.vars = s.buf[:0]
	return s
}

func (s *scope) get(name string) (any, bool) {
	for i := range s.vars {
		if s.vars[i].name == name {
			return s.vars[i].v, true
		}
	}
	return nil, false
}

func (s *scope) set(name string, v any) {
	for i := range s.vars {
		if s.vars[i].name == name {
			s.vars[i].v = v
			return
		}
	}
	s.vars = append(s.vars, binding{name, v})
}

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.get(name); ok {
			return v, true
		}
	}
	return nil, false
}

type control int

const (
	ctlNone control = iota
	ctlBreak
	ctlContinue
)

// located reports that err already carries a template position.
func located(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// at wraps err with the position of the construct that failed, unless an
// inner construct already did.
func (r *renderer) at(off int, construct string, err error) error {
	if err == nil || located(err) {
		return err
	}
	line, col := r.tmpl.position(off)
	return &Error{Template: r.tmpl.name, Line: line, Column: col, Construct: construct, Err: err}
}

func (r *renderer) step() error {
	r.steps++
	if r.steps > r.limits.MaxSteps {
		return &LimitError{Limit: "evaluation steps", Max: r.limits.MaxSteps}
	}
	return nil
}

// charge counts work proportional to data size (bytes / 64) against the
// step limit, so a template cannot do quadratic work (a string grown one
// piece at a time, a list rebuilt each iteration) within few steps.
func (r *renderer) charge(size int) error {
	r.steps += size / 64
	if r.steps > r.limits.MaxSteps {
		return &LimitError{Limit: "evaluation steps", Max: r.limits.MaxSteps}
	}
	return nil
}

// iterate is the free iterate, charged: a string becomes one item per
// character, allocated up front.
func (r *renderer) iterate(v any) ([]any, error) {
	if s, ok := v.(string); ok {
		if err := r.charge(len(s) * 64); err != nil {
			return nil, err
		}
	}
	return iterate(v)
}

func (r *renderer) write(s string) error {
	if err := r.charge(len(s)); err != nil {
		return err
	}
	r.out.WriteString(s)
	if r.out.Len() > r.limits.MaxOutputBytes {
		return &LimitError{Limit: "output bytes", Max: r.limits.MaxOutputBytes}
	}
	return nil
}

// checkSize bounds the values operators, literals, calls and filters build
// (see deepSize), which could otherwise grow without producing output.
func (r *renderer) checkSize(v any) (any, error) {
	switch v.(type) {
	case string, []any, tuple, *dict:
		n := deepSize(v, r.limits.MaxOutputBytes, nil)
		if n > r.limits.MaxOutputBytes {
			return nil, &LimitError{Limit: "output bytes", Max: r.limits.MaxOutputBytes}
		}
		if err := r.charge(n); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (r *renderer) execBody(body []stmt, sc *scope) (control, error) {
	for _, s := range body {
		ctl, err := r.exec(s, sc)
		if err != nil || ctl != ctlNone {
			return ctl, err
		}
	}
	return ctlNone, nil
}

// capture renders body into a string of its own.
func (r *renderer) capture(body []stmt, sc *scope) (string, control, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	ctl, err := r.execBody(body, sc)
	r.out = saved
	return b.String(), ctl, err
}

func stmtConstruct(s stmt) string {
	switch s := s.(type) {
	case *outputStmt:
		return "print"
	case *ifStmt:
		return "tag if"
	case *forStmt:
		return "tag for"
	case *setStmt, *setBlockStmt:
		return "tag set"
	case *macroStmt:
		return "tag macro"
	case *filterBlockStmt:
		return "tag filter"
	case *withStmt:
		return "tag with"
	case *scopeStmt:
		return "tag " + s.tag
	}
	return ""
}

func (r *renderer) exec(s stmt, sc *scope) (control, error) {
	if err := r.step(); err != nil {
		return ctlNone, r.at(s.offset(), stmtConstruct(s), err)
	}
	ctl, err := r.execInner(s, sc)
	return ctl, r.at(s.offset(), stmtConstruct(s), err)
}

func (r *renderer) execInner(s stmt, sc *scope) (control, error) {
	switch s := s.(type) {
	case *textStmt:
		return ctlNone, r.write(s.text)
	case *outputStmt:
		v, err := r.eval(s.x, sc)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, r.write(toStr(v))
	case *ifStmt:
		for i, c := range s.conds {
			v, err := r.eval(c, sc)
			if err != nil {
				return ctlNone, err
			}
			if truthy(v) {
				return r.execBody(s.bodies[i], sc)
			}
		}
		return r.execBody(s.els, sc)
	case *forStmt:
		return r.execFor(s, sc)
	case *setStmt:
		v, err := r.eval(s.value, sc)
		if err != nil {
			return ctlNone, err
		}
		return ctlNone, r.assign(s.target, v, sc)
	case *setBlockStmt:
		text, _, err := r.capture(s.body, newScope(sc))
		if err != nil {
			return ctlNone, err
		}
		var v any = text
		for _, f := range s.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return ctlNone, err
			}
		}
		return ctlNone, r.assign(s.target, v, sc)
	case *macroStmt:
		sc.set(s.name, &macro{name: s.name, params: s.params, defaults: s.defaults, body: s.body, scope: sc})
		return ctlNone, nil
	case *filterBlockStmt:
		text, ctl, err := r.capture(s.body, newScope(sc))
		if err != nil {
			return ctlNone, err
		}
		var v any = text
		for _, f := range s.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return ctlNone, err
			}
		}
		if err := r.write(toStr(v)); err != nil {
			return ctlNone, err
		}
		return ctl, nil
	case *withStmt:
		inner := newScope(sc)
		for i, tg := range s.targets {
			v, err := r.eval(s.values[i], sc)
			if err != nil {
				return ctlNone, err
			}
			if err := r.assign(tg, v, inner); err != nil {
				return ctlNone, err
			}
		}
		return r.execBody(s.body, inner)
	case *scopeStmt:
		if s.tag == "block" {
			// Blocks see the template's top level, not enclosing loops.
			return r.execBody(s.body, newScope(r.root))
		}
		return r.execBody(s.body, sc)
	case *breakStmt:
		return ctlBreak, nil
	case *continueStmt:
		return ctlContinue, nil
	}
	return ctlNone, fmt.Errorf("internal error: unknown statement %T", s)
}

func (r *renderer) execFor(s *forStmt, sc *scope) (control, error) {
	iter, err := r.eval(s.iter, sc)
	if err != nil {
		return ctlNone, err
	}
	items, err := r.iterate(iter)
	if err != nil {
		return ctlNone, err
	}
	if s.cond != nil {
		// The "if" clause filters before the loop runs, so loop.length and
		// loop.last count only the kept items.
		kept := items[:0:0]
		for _, it := range items {
			if err := r.step(); err != nil {
				return ctlNone, err
			}
			probe := newScope(sc)
			if err := r.assign(s.target, it, probe); err != nil {
				return ctlNone, err
			}
			ok, err := r.eval(s.cond, probe)
			if err != nil {
				return ctlNone, err
			}
			if truthy(ok) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		_, err := r.execBody(s.els, sc)
		return ctlNone, err
	}
	var lastChanged []any
	// One loop object advances through the iterations, as jinja2's
	// LoopContext does.
	loop := &loopContext{items: items, lastCh: &lastChanged}
	for i, it := range items {
		if err := r.step(); err != nil {
			return ctlNone, err
		}
		// Each iteration gets a fresh scope: in Jinja, variables set in a loop
		// body neither survive to the next iteration nor leak out.
		inner := newScope(sc)
		if err := r.assign(s.target, it, inner); err != nil {
			return ctlNone, err
		}
		loop.index0 = i
		inner.set("loop", loop)
		ctl, err := r.execBody(s.body, inner)
		if err != nil {
			return ctlNone, err
		}
		if ctl == ctlBreak {
			break
		}
	}
	return ctlNone, nil
}

// assign binds v to a set/for/with target.
func (r *renderer) assign(tg target, v any, sc *scope) error {
	if tg.attr != "" {
		obj, _ := sc.lookup(tg.names[0])
		ns, ok := obj.(*namespace)
		if !ok {
			return fmt.Errorf("cannot assign attribute on non-namespace object")
		}
		return ns.attrs.set(tg.attr, v)
	}
	if !tg.tuple {
		sc.set(tg.names[0], v)
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return fmt.Errorf("cannot unpack non-iterable %s object", typeName(v))
	}
	if _, ok := v.(*undefined); ok {
		return &UndefinedError{Message: v.(*undefined).msg}
	}
	if len(items) < len(tg.names) {
		return fmt.Errorf("not enough values to unpack (expected %d, got %d)", len(tg.names), len(items))
	}
	if len(items) > len(tg.names) {
		return fmt.Errorf("too many values to unpack (expected %d)", len(tg.names))
	}
	for i, n := range tg.names {
		sc.set(n, items[i])
	}
	return nil
}

// iterate lists the items a for loop or filter sees: list and tuple items,
// string characters, dict keys; Undefined iterates as empty.
func iterate(v any) ([]any, error) {
	switch v := v.(type) {
	case []any:
		return v, nil
	case tuple:
		return v, nil
	case string:
		out := make([]any, 0, utf8.RuneCountInString(v))
		for _, c := range v {
			out = append(out, string(c))
		}
		return out, nil
	case *dict:
		return append([]any(nil), v.keys...), nil
	case *undefined:
		return nil, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

func exprConstruct(x expr) string {
	switch x := x.(type) {
	case *nameExpr:
		return "variable " + x.name
	case *attrExpr:
		return "attribute " + x.name
	case *itemExpr:
		return "subscript"
	case *sliceExpr:
		return "slice"
	case *callExpr:
		switch f := x.fn.(type) {
		case *nameExpr:
			return "call " + f.name
		case *attrExpr:
			return "call " + f.name
		}
		return "call"
	case *filterExpr:
		return "filter " + x.name
	case *testExpr:
		return "test " + x.name
	case *binExpr:
		return "operator " + x.op
	case *unaryExpr:
		return "operator " + x.op
	case *compareExpr:
		return "comparison"
	case *concatExpr:
		return "operator ~"
	case *condExpr:
		return "conditional expression"
	}
	return ""
}

func (r *renderer) eval(x expr, sc *scope) (any, error) {
	if err := r.step(); err != nil {
		return nil, r.at(x.offset(), exprConstruct(x), err)
	}
	v, err := r.evalInner(x, sc)
	if err != nil {
		return nil, r.at(x.offset(), exprConstruct(x), err)
	}
	return v, nil
}

func (r *renderer) evalAll(xs []expr, sc *scope) ([]any, error) {
	out := make([]any, len(xs))
	for i, x := range xs {
		v, err := r.eval(x, sc)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (r *renderer) evalKwargs(kws []kwarg, sc *scope) (*dict, error) {
	d := newDict(len(kws))
	for _, kw := range kws {
		v, err := r.eval(kw.value, sc)
		if err != nil {
			return nil, err
		}
		_ = d.set(kw.name, v)
	}
	return d, nil
}

func (r *renderer) evalInner(x expr, sc *scope) (any, error) {
	switch x := x.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(x.name); ok {
			return v, nil
		}
		return undefinedName(x.name), nil
	case *listExpr:
		items, err := r.evalAll(x.items, sc)
		if err != nil {
			return nil, err
		}
		return r.checkSize(items)
	case *tupleExpr:
		items, err := r.evalAll(x.items, sc)
		if err != nil {
			return nil, err
		}
		return r.checkSize(tuple(items))
	case *dictExpr:
		d := newDict(len(x.keys))
		for i := range x.keys {
			k, err := r.eval(x.keys[i], sc)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(x.values[i], sc)
			if err != nil {
				return nil, err
			}
			if err := d.set(k, v); err != nil {
				return nil, err
			}
		}
		return r.checkSize(d)
	case *attrExpr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, x.name)
	case *itemExpr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		key, err := r.eval(x.key, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, key)
	case *sliceExpr:
		return r.evalSlice(x, sc)
	case *callExpr:
		fn, err := r.eval(x.fn, sc)
		if err != nil {
			return nil, err
		}
		args, err := r.evalAll(x.args, sc)
		if err != nil {
			return nil, err
		}
		kwargs, err := r.evalKwargs(x.kwargs, sc)
		if err != nil {
			return nil, err
		}
		v, err := r.call(fn, args, kwargs)
		if err != nil {
			return nil, err
		}
		return r.checkSize(v)
	case *filterExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(x, v, sc)
	case *testExpr:
		return r.applyTest(x, sc)
	case *unaryExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		if x.op == "not" {
			return !truthy(v), nil
		}
		return unaryOp(x.op, v)
	case *binExpr:
		l, err := r.eval(x.l, sc)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return r.eval(x.r, sc)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return r.eval(x.r, sc)
		}
		rv, err := r.eval(x.r, sc)
		if err != nil {
			return nil, err
		}
		v, err := binaryOp(x.op, l, rv)
		if err != nil {
			return nil, err
		}
		return r.checkSize(v)
	case *compareExpr:
		left, err := r.eval(x.first, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range x.ops {
			right, err := r.eval(x.rest[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := compare(op, left, right)
			if err != nil || !ok {
				return false, err
			}
			left = right
		}
		return true, nil
	case *concatExpr:
		var b strings.Builder
		for _, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			b.WriteString(toStr(v))
			if b.Len() > r.limits.MaxOutputBytes {
				return nil, &LimitError{Limit: "output bytes", Max: r.limits.MaxOutputBytes}
			}
		}
		if err := r.charge(b.Len()); err != nil {
			return nil, err
		}
		return b.String(), nil
	case *condExpr:
		c, err := r.eval(x.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(x.then, sc)
		}
		if x.els == nil {
			line, _ := r.tmpl.position(x.off)
			return &undefined{msg: fmt.Sprintf("the inline if-expression on line %d evaluated to false and no else section was defined.", line)}, nil
		}
		return r.eval(x.els, sc)
	}
	return nil, fmt.Errorf("internal error: unknown expression %T", x)
}

func (r *renderer) evalSlice(x *sliceExpr, sc *scope) (any, error) {
	obj, err := r.eval(x.x, sc)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, b := range []expr{x.start, x.stop, x.step} {
		if b == nil {
			continue
		}
		v, err := r.eval(b, sc)
		if err != nil {
			return nil, err
		}
		switch n := v.(type) {
		case nil:
		case int64:
			bounds[i] = &n
		case bool:
			var k int64
			if n {
				k = 1
			}
			bounds[i] = &k
		default:
			return nil, fmt.Errorf("slice indices must be integers or None or have an __index__ method")
		}
	}
	if bounds[2] != nil && *bounds[2] == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	switch o := obj.(type) {
	case *undefined:
		return nil, &UndefinedError{Message: o.msg}
	case []any:
		return sliceItems(o, bounds), nil
	case tuple:
		return tuple(sliceItems(o, bounds)), nil
	case string:
		rs := []rune(o)
		items := make([]any, len(rs))
		for i, c := range rs {
			items[i] = c
		}
		var b strings.Builder
		for _, c := range sliceItems(items, bounds) {
			b.WriteRune(c.(rune))
		}
		return b.String(), nil
	}
	return undefinedAttr(obj, "slice"), nil
}

// sliceItems applies Python's slice(start, stop, step).indices(len).
func sliceItems(items []any, b [3]*int64) []any {
	n := int64(len(items))
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	clamp := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += n
			if v < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		}
		if v >= n {
			if step < 0 {
				return n - 1
			}
			return n
		}
		return v
	}
	var out []any
	if step > 0 {
		start, stop := clamp(b[0], 0), clamp(b[1], n)
		for i := start; i < stop; i += step {
			out = append(out, items[i])
		}
	} else {
		start, stop := clamp(b[0], n-1), clamp(b[1], -1)
		if b[1] == nil {
			stop = -1
		}
		for i := start; i > stop; i += step {
			out = append(out, items[i])
		}
	}
	if out == nil {
		out = []any{}
	}
	return out
}

func (r *renderer) call(fn any, args []any, kwargs *dict) (any, error) {
	switch f := fn.(type) {
	case *function:
		return f.call(r, args, kwargs)
	case *macro:
		return r.callMacro(f, args, kwargs)
	case *undefined:
		return nil, &UndefinedError{Message: f.msg}
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func (r *renderer) callMacro(m *macro, args []any, kwargs *dict) (any, error) {
	if len(args) > len(m.params) {
		return nil, fmt.Errorf("macro %s takes not more than %d argument(s)", pyRepr(m.name), len(m.params))
	}
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > r.limits.MaxDepth {
		return nil, &LimitError{Limit: "nested macro calls", Max: r.limits.MaxDepth}
	}
	sc := newScope(m.scope)
	for i, k := range kwargs.keys {
		name := k.(string)
		idx := -1
		for j, p := range m.params {
			if p == name {
				idx = j
			}
		}
		if idx < 0 {
			return nil, fmt.Errorf("macro %s takes no keyword argument %s", pyRepr(m.name), pyRepr(name))
		}
		if idx < len(args) {
			return nil, fmt.Errorf("macro %s got multiple values for argument %s", pyRepr(m.name), pyRepr(name))
		}
		sc.set(name, kwargs.vals[i])
	}
	firstDefault := len(m.params) - len(m.defaults)
	for i, p := range m.params {
		if i < len(args) {
			sc.set(p, args[i])
			continue
		}
		if _, set := sc.get(p); set {
			continue
		}
		if i >= firstDefault {
			v, err := r.eval(m.defaults[i-firstDefault], sc)
			if err != nil {
				return nil, err
			}
			sc.set(p, v)
		} else {
			sc.set(p, &undefined{msg: fmt.Sprintf("parameter %s was not provided", pyRepr(p))})
		}
	}
	text, _, err := r.capture(m.body, sc)
	return text, err
}

// getAttr is jinja2's sandboxed getattr for obj.name: the Python attribute
// (a method) first, then the item.
func getAttr(obj any, name string) (any, error) {
	switch o := obj.(type) {
	case *undefined:
		return nil, &UndefinedError{Message: o.msg}
	case *dict:
		if m := dictMethod(o, name); m != nil {
			return m, nil
		}
		if v, ok := o.get(name); ok {
			return v, nil
		}
	case string:
		if m := strMethod(o, name); m != nil {
			return m, nil
		}
	case []any:
		if m := listMethod(o, "list", name); m != nil {
			return m, nil
		}
	case tuple:
		if m := listMethod(o, "tuple", name); m != nil {
			return m, nil
		}
	case *namespace:
		if v, ok := o.attrs.get(name); ok {
			return v, nil
		}
	case *loopContext:
		if v, ok := o.attr(name); ok {
			return v, nil
		}
	}
	return undefinedAttr(obj, name), nil
}

// getItem is jinja2's sandboxed getitem for obj[key]: the item first, then
// for string keys the attribute.
func getItem(obj, key any) (any, error) {
	switch o := obj.(type) {
	case *undefined:
		return nil, &UndefinedError{Message: o.msg}
	case *dict:
		if v, ok := o.get(key); ok {
			return v, nil
		}
	case []any:
		if v, ok := index(o, key); ok {
			return v, nil
		}
	case tuple:
		if v, ok := index(o, key); ok {
			return v, nil
		}
	case string:
		if i, ok := intIndex(key); ok {
			rs := []rune(o)
			if i < 0 {
				i += int64(len(rs))
			}
			if i >= 0 && i < int64(len(rs)) {
				return string(rs[i]), nil
			}
		}
	}
	if s, ok := key.(string); ok {
		v, err := getAttr(obj, s)
		if u, isU := v.(*undefined); err == nil && isU && !strings.HasPrefix(u.msg, "access to") {
			return undefinedAttr(obj, key), nil
		}
		return v, err
	}
	return undefinedAttr(obj, key), nil
}

func intIndex(key any) (int64, bool) {
	switch k := key.(type) {
	case int64:
		return k, true
	case bool:
		if k {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func index(items []any, key any) (any, bool) {
	i, ok := intIndex(key)
	if !ok {
		return nil, false
	}
	if i < 0 {
		i += int64(len(items))
	}
	if i < 0 || i >= int64(len(items)) {
		return nil, false
	}
	return items[i], true
}

func (l *loopContext) attr(name string) (any, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.index0 + 1), true
	case "index0":
		return int64(l.index0), true
	case "revindex":
		return int64(n - l.index0), true
	case "revindex0":
		return int64(n - l.index0 - 1), true
	case "first":
		return l.index0 == 0, true
	case "last":
		return l.index0 == n-1, true
	case "length":
		return int64(n), true
	case "depth":
		return int64(1), true
	case "depth0":
		return int64(0), true
	case "previtem":
		if l.index0 == 0 {
			return &undefined{msg: "there is no previous item"}, true
		}
		return l.items[l.index0-1], true
	case "nextitem":
		if l.index0 == n-1 {
			return &undefined{msg: "there is no next item"}, true
		}
		return l.items[l.index0+1], true
	case "cycle":
		return &function{name: "cycle", call: func(_ *renderer, args []any, _ *dict) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("no items for cycling given")
			}
			return args[l.index0%len(args)], nil
		}}, true
	case "changed":
		return &function{name: "changed", call: func(_ *renderer, args []any, _ *dict) (any, error) {
			if *l.lastCh != nil && pyEqual([]any(*l.lastCh), args) {
				return false, nil
			}
			*l.lastCh = args
			return true, nil
		}}, true
	}
	return nil, false
}

func unaryOp(op string, v any) (any, error) {
	switch n := v.(type) {
	case *undefined:
		return nil, &UndefinedError{Message: n.msg}
	case bool:
		v = boolInt(n)
	}
	switch n := v.(type) {
	case int64:
		if op == "-" {
			if n == math.MinInt64 {
				return nil, errIntOverflow
			}
			return -n, nil
		}
		return n, nil
	case float64:
		if op == "-" {
			return -n, nil
		}
		return n, nil
	}
	return nil, fmt.Errorf("bad operand type for unary %s: '%s'", op, typeName(v))
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
