package chat

import (
	"fmt"
	"strings"
)

// The parser mirrors jinja2/parser.py: the same precedence climb
// (condexpr > or > and > not > compare > + - > ~ > * / // % > ** > unary >
// primary, with filters and tests binding to the unary operand), the same
// statements, and the same treatment of unknown filters and tests (an error
// at parse time unless they sit under a condition, where jinja2 defers the
// error to the moment they run).

// maxNesting bounds the parser's recursion (nested expressions and blocks),
// so hostile templates cannot exhaust the stack.
const maxNesting = 200

type parseError struct {
	off       int
	construct string
	msg       string
}

func (e *parseError) Error() string { return e.msg }

type parser struct {
	toks  []token
	i     int
	depth int
}

func parse(toks []token) ([]stmt, error) {
	p := &parser{toks: toks}
	body, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if t := p.cur(); t.kind != tokEOF {
		return nil, p.fail(t, "", "unexpected %s", t.describe())
	}
	if err := checkUnknown(body, false); err != nil {
		return nil, err
	}
	return body, nil
}

// checkUnknown reports an unknown filter or test outside any condition.
// jinja2 fails at compile time for those, and defers the error to run time
// under an if (condition and branches) or a conditional expression, where
// the branch may never run.
func checkUnknown(body []stmt, soft bool) error {
	for _, s := range body {
		var err error
		switch s := s.(type) {
		case *outputStmt:
			err = checkUnknownExpr(s.x, soft)
		case *ifStmt:
			for i := range s.conds {
				if err = checkUnknownExpr(s.conds[i], true); err == nil {
					err = checkUnknown(s.bodies[i], true)
				}
				if err != nil {
					return err
				}
			}
			err = checkUnknown(s.els, true)
		case *forStmt:
			err = firstErr(checkUnknownExpr(s.iter, soft), checkUnknownExpr(s.cond, soft),
				checkUnknown(s.body, soft), checkUnknown(s.els, soft))
		case *setStmt:
			err = checkUnknownExpr(s.value, soft)
		case *setBlockStmt:
			err = firstErr(checkUnknownFilters(s.filters, soft), checkUnknown(s.body, soft))
		case *macroStmt:
			for _, d := range s.defaults {
				if err = checkUnknownExpr(d, soft); err != nil {
					return err
				}
			}
			err = checkUnknown(s.body, false)
		case *filterBlockStmt:
			err = firstErr(checkUnknownFilters(s.filters, soft), checkUnknown(s.body, soft))
		case *withStmt:
			for _, v := range s.values {
				if err = checkUnknownExpr(v, soft); err != nil {
					return err
				}
			}
			err = checkUnknown(s.body, soft)
		case *scopeStmt:
			err = checkUnknown(s.body, soft)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkUnknownFilters(fs []*filterExpr, soft bool) error {
	for _, f := range fs {
		if err := checkUnknownExpr(f, soft); err != nil {
			return err
		}
	}
	return nil
}

func checkUnknownExprs(xs []expr, kws []kwarg, soft bool) error {
	for _, x := range xs {
		if err := checkUnknownExpr(x, soft); err != nil {
			return err
		}
	}
	for _, kw := range kws {
		if err := checkUnknownExpr(kw.value, soft); err != nil {
			return err
		}
	}
	return nil
}

func checkUnknownExpr(x expr, soft bool) error {
	switch x := x.(type) {
	case nil:
		return nil
	case *filterExpr:
		if !x.known && !soft {
			return &parseError{off: x.off, construct: "filter " + x.name, msg: fmt.Sprintf("no filter named %q", x.name)}
		}
		return firstErr(checkUnknownExpr(x.x, soft), checkUnknownExprs(x.args, x.kwargs, soft))
	case *testExpr:
		if !x.known && !soft {
			return &parseError{off: x.off, construct: "test " + x.name, msg: fmt.Sprintf("no test named %q", x.name)}
		}
		return firstErr(checkUnknownExpr(x.x, soft), checkUnknownExprs(x.args, x.kwargs, soft))
	case *condExpr:
		return firstErr(checkUnknownExpr(x.then, true), checkUnknownExpr(x.cond, true), checkUnknownExpr(x.els, true))
	case *listExpr:
		return checkUnknownExprs(x.items, nil, soft)
	case *tupleExpr:
		return checkUnknownExprs(x.items, nil, soft)
	case *dictExpr:
		return firstErr(checkUnknownExprs(x.keys, nil, soft), checkUnknownExprs(x.values, nil, soft))
	case *attrExpr:
		return checkUnknownExpr(x.x, soft)
	case *itemExpr:
		return firstErr(checkUnknownExpr(x.x, soft), checkUnknownExpr(x.key, soft))
	case *sliceExpr:
		return firstErr(checkUnknownExpr(x.x, soft), checkUnknownExpr(x.start, soft),
			checkUnknownExpr(x.stop, soft), checkUnknownExpr(x.step, soft))
	case *callExpr:
		return firstErr(checkUnknownExpr(x.fn, soft), checkUnknownExprs(x.args, x.kwargs, soft))
	case *unaryExpr:
		return checkUnknownExpr(x.x, soft)
	case *binExpr:
		return firstErr(checkUnknownExpr(x.l, soft), checkUnknownExpr(x.r, soft))
	case *compareExpr:
		return firstErr(checkUnknownExpr(x.first, soft), checkUnknownExprs(x.rest, nil, soft))
	case *concatExpr:
		return checkUnknownExprs(x.items, nil, soft)
	}
	return nil
}

func (p *parser) cur() token { return p.toks[p.i] }

func (p *parser) look() token {
	if p.i+1 < len(p.toks) {
		return p.toks[p.i+1]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) fail(t token, construct, format string, args ...any) error {
	return &parseError{off: t.off, construct: construct, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tokOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		t := p.cur()
		return p.fail(t, "", "expected '%s', got %s", op, t.describe())
	}
	return nil
}

func (p *parser) expectName() (token, error) {
	t := p.cur()
	if t.kind != tokName {
		return t, p.fail(t, "", "expected a name, got %s", t.describe())
	}
	return p.next(), nil
}

func (p *parser) expectKind(k tokKind, what string) error {
	t := p.cur()
	if t.kind != k {
		return p.fail(t, "", "expected %s, got %s", what, t.describe())
	}
	p.next()
	return nil
}

func (p *parser) enter(t token) error {
	p.depth++
	if p.depth > maxNesting {
		return p.fail(t, "", "template nested too deeply (more than %d levels of expressions and blocks)", maxNesting)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// subparse parses until a block tag whose name is in ends (left unconsumed,
// positioned at the name) or the end of the template.
func (p *parser) subparse(ends []string) ([]stmt, error) {
	var body []stmt
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			if ends != nil {
				return nil, p.fail(t, "", "unexpected end of template, expected %s", quoteList(ends))
			}
			return body, nil
		case tokData:
			p.next()
			body = append(body, &textStmt{at{t.off}, t.val})
		case tokVarBegin:
			p.next()
			x, err := p.parseTuple(false, true, nil, false)
			if err != nil {
				return nil, err
			}
			if err := p.expectKind(tokVarEnd, "end of print statement"); err != nil {
				return nil, err
			}
			body = append(body, &outputStmt{at{t.off}, x})
		case tokBlockBegin:
			p.next()
			if n := p.cur(); n.kind == tokName && contains(ends, n.val) {
				return body, nil
			}
			s, err := p.parseStatement(t)
			if err != nil {
				return nil, err
			}
			if err := p.expectKind(tokBlockEnd, "end of statement block"); err != nil {
				return nil, err
			}
			if s != nil {
				body = append(body, s)
			}
		default:
			return nil, p.fail(t, "", "unexpected %s", t.describe())
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, " or ")
}

// parseStatements parses a body up to one of ends; with drop the end tag's
// name is consumed too.
func (p *parser) parseStatements(ends []string, drop bool) ([]stmt, error) {
	if err := p.enter(p.cur()); err != nil {
		return nil, err
	}
	defer p.leave()
	// The statement's own tag ends first.
	if err := p.expectKind(tokBlockEnd, "end of statement block"); err != nil {
		return nil, err
	}
	body, err := p.subparse(ends)
	if err != nil {
		return nil, err
	}
	if drop {
		p.next()
	}
	return body, nil
}

func (p *parser) parseStatement(begin token) (stmt, error) {
	t := p.cur()
	if t.kind != tokName {
		return nil, p.fail(t, "", "tag name expected, got %s", t.describe())
	}
	construct := "tag " + t.val
	switch t.val {
	case "for":
		return p.parseFor()
	case "if":
		return p.parseIf()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "filter":
		return p.parseFilterBlock()
	case "with":
		return p.parseWith()
	case "print":
		p.next()
		x, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return nil, err
		}
		return &outputStmt{at{t.off}, x}, nil
	case "block", "generation":
		p.next()
		end := "end" + t.val
		if t.val == "block" {
			if _, err := p.expectName(); err != nil {
				return nil, err
			}
			if p.isName("scoped") || p.isName("required") {
				return nil, p.fail(p.cur(), construct, "block modifier %q is not supported", p.cur().val)
			}
		}
		body, err := p.parseStatements([]string{end}, true)
		if err != nil {
			return nil, err
		}
		if t.val == "block" && p.cur().kind == tokName {
			p.next() // {% endblock name %}
		}
		return &scopeStmt{at{t.off}, t.val, body}, nil
	case "break", "continue":
		p.next()
		if t.val == "break" {
			return &breakStmt{at{t.off}}, nil
		}
		return &continueStmt{at{t.off}}, nil
	case "include", "import", "from", "extends":
		return nil, p.fail(t, construct, "tag %q is not supported: chat templates are rendered without a template loader", t.val)
	case "call", "autoescape", "trans", "pluralize", "do":
		return nil, p.fail(t, construct, "tag %q is not supported", t.val)
	}
	return nil, p.fail(t, construct, "unknown tag %q", t.val)
}

func (p *parser) parseFor() (stmt, error) {
	t := p.next()
	tg, err := p.parseAssignTarget(true, false, []string{"in"}, false)
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.fail(p.cur(), "tag for", "expected 'in', got %s", p.cur().describe())
	}
	iter, err := p.parseTuple(false, false, []string{"recursive"}, false)
	if err != nil {
		return nil, err
	}
	var cond expr
	if p.skipName("if") {
		if cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.fail(p.cur(), "tag for", "recursive loops are not supported")
	}
	body, err := p.parseStatements([]string{"endfor", "else"}, false)
	if err != nil {
		return nil, err
	}
	var els []stmt
	if p.next().val == "else" {
		if els, err = p.parseStatements([]string{"endfor"}, true); err != nil {
			return nil, err
		}
	}
	return &forStmt{at{t.off}, tg, iter, cond, body, els}, nil
}

func (p *parser) parseIf() (stmt, error) {
	t := p.next()
	n := &ifStmt{at: at{t.off}}
	for {
		cond, err := p.parseTuple(false, false, nil, false)
		if err != nil {
			return nil, err
		}
		body, err := p.parseStatements([]string{"elif", "else", "endif"}, false)
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch p.next().val {
		case "elif":
			continue
		case "else":
			if n.els, err = p.parseStatements([]string{"endif"}, true); err != nil {
				return nil, err
			}
		}
		return n, nil
	}
}

func (p *parser) parseSet() (stmt, error) {
	t := p.next()
	tg, err := p.parseAssignTarget(true, false, nil, true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		v, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return nil, err
		}
		return &setStmt{at{t.off}, tg, v}, nil
	}
	filters, err := p.parseFilterChain(false)
	if err != nil {
		return nil, err
	}
	body, err := p.parseStatements([]string{"endset"}, true)
	if err != nil {
		return nil, err
	}
	return &setBlockStmt{at{t.off}, tg, filters, body}, nil
}

func (p *parser) parseMacro() (stmt, error) {
	t := p.next()
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	m := &macroStmt{at: at{t.off}, name: name.val}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	for !p.isOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		arg, err := p.expectName()
		if err != nil {
			return nil, err
		}
		m.params = append(m.params, arg.val)
		if p.skipOp("=") {
			d, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			m.defaults = append(m.defaults, d)
		} else if len(m.defaults) > 0 {
			return nil, p.fail(arg, "tag macro", "non-default argument follows default argument")
		}
	}
	p.next()
	if m.body, err = p.parseStatements([]string{"endmacro"}, true); err != nil {
		return nil, err
	}
	return m, nil
}

func (p *parser) parseFilterBlock() (stmt, error) {
	t := p.next()
	filters, err := p.parseFilterChain(true)
	if err != nil {
		return nil, err
	}
	body, err := p.parseStatements([]string{"endfilter"}, true)
	if err != nil {
		return nil, err
	}
	return &filterBlockStmt{at{t.off}, filters, body}, nil
}

func (p *parser) parseWith() (stmt, error) {
	t := p.next()
	w := &withStmt{at: at{t.off}}
	for p.cur().kind != tokBlockEnd {
		if len(w.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		tg, err := p.parseAssignTarget(true, false, nil, false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		w.targets = append(w.targets, tg)
		w.values = append(w.values, v)
	}
	body, err := p.parseStatements([]string{"endwith"}, true)
	if err != nil {
		return nil, err
	}
	w.body = body
	return w, nil
}

// parseAssignTarget parses a name, a tuple of names, or (withNamespace)
// name.attr.
func (p *parser) parseAssignTarget(withTuple, nameOnly bool, extraEnds []string, withNamespace bool) (target, error) {
	t := p.cur()
	if withNamespace && t.kind == tokName && p.look().kind == tokOp && p.look().val == "." {
		p.next()
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return target{}, err
		}
		return target{at: at{t.off}, names: []string{t.val}, attr: attr.val}, nil
	}
	if nameOnly {
		n, err := p.expectName()
		if err != nil {
			return target{}, err
		}
		return target{at: at{t.off}, names: []string{n.val}}, nil
	}
	var x expr
	var err error
	if withTuple {
		x, err = p.parseTuple(true, true, extraEnds, false)
	} else {
		x, err = p.parsePrimary()
	}
	if err != nil {
		return target{}, err
	}
	switch x := x.(type) {
	case *nameExpr:
		if err := checkAssignable(p, t, x.name); err != nil {
			return target{}, err
		}
		return target{at: at{t.off}, names: []string{x.name}}, nil
	case *tupleExpr:
		tg := target{at: at{t.off}, tuple: true}
		for _, it := range x.items {
			n, ok := it.(*nameExpr)
			if !ok {
				return target{}, p.fail(t, "", "can't assign to %s", exprKind(it))
			}
			if err := checkAssignable(p, t, n.name); err != nil {
				return target{}, err
			}
			tg.names = append(tg.names, n.name)
		}
		return tg, nil
	}
	return target{}, p.fail(t, "", "can't assign to %s", exprKind(x))
}

func checkAssignable(p *parser, t token, name string) error {
	switch name {
	case "true", "false", "none", "True", "False", "None":
		return p.fail(t, "", "can't assign to constant %q", name)
	}
	return nil
}

func exprKind(x expr) string {
	switch x.(type) {
	case *constExpr:
		return "a constant"
	case *attrExpr, *itemExpr:
		return "an attribute or item (only namespace attributes can be set)"
	case *callExpr:
		return "a call"
	}
	return "an expression"
}

// parseTuple parses comma-separated expressions; one without a comma is
// returned alone. simplified parses primaries only (assignment targets);
// withCond allows "a if b else c" in the items.
func (p *parser) parseTuple(simplified, withCond bool, extraEnds []string, explicitParens bool) (expr, error) {
	t := p.cur()
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isTupleEnd(extraEnds) {
			break
		}
		var x expr
		var err error
		switch {
		case simplified:
			x, err = p.parsePrimary()
		default:
			x, err = p.parseExpression(withCond)
		}
		if err != nil {
			return nil, err
		}
		items = append(items, x)
		if !p.isOp(",") {
			break
		}
		isTuple = true
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.fail(p.cur(), "", "expected an expression, got %s", p.cur().describe())
		}
	}
	return &tupleExpr{at{t.off}, items}, nil
}

func (p *parser) isTupleEnd(extraEnds []string) bool {
	t := p.cur()
	switch {
	case t.kind == tokVarEnd, t.kind == tokBlockEnd, t.kind == tokEOF:
		return true
	case t.kind == tokOp && t.val == ")":
		return true
	case t.kind == tokName && contains(extraEnds, t.val):
		return true
	}
	return false
}

func (p *parser) parseExpression(withCond bool) (expr, error) {
	if err := p.enter(p.cur()); err != nil {
		return nil, err
	}
	defer p.leave()
	if withCond {
		return p.parseCondExpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondExpr() (expr, error) {
	t := p.cur()
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.skipName("else") {
			if els, err = p.parseCondExpr(); err != nil {
				return nil, err
			}
		}
		x = &condExpr{at{t.off}, x, cond, els}
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	x, err := p.parseAnd()
	for err == nil && p.isName("or") {
		t := p.next()
		var r expr
		if r, err = p.parseAnd(); err == nil {
			x = &binExpr{at{t.off}, "or", x, r}
		}
	}
	return x, err
}

func (p *parser) parseAnd() (expr, error) {
	x, err := p.parseNot()
	for err == nil && p.isName("and") {
		t := p.next()
		var r expr
		if r, err = p.parseNot(); err == nil {
			x = &binExpr{at{t.off}, "and", x, r}
		}
	}
	return x, err
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		t := p.next()
		if err := p.enter(t); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{at{t.off}, "not", x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	t := p.cur()
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{at: at{t.off}, first: x}
	for {
		var op string
		switch cur := p.cur(); {
		case cur.kind == tokOp && (cur.val == "==" || cur.val == "!=" || cur.val == "<" || cur.val == "<=" || cur.val == ">" || cur.val == ">="):
			op = cur.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.look().kind == tokName && p.look().val == "in":
			op = "notin"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return x, nil
	}
	return c, nil
}

func (p *parser) parseMath1() (expr, error) {
	x, err := p.parseConcat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		t := p.next()
		var r expr
		if r, err = p.parseConcat(); err == nil {
			x = &binExpr{at{t.off}, t.val, x, r}
		}
	}
	return x, err
}

func (p *parser) parseConcat() (expr, error) {
	t := p.cur()
	x, err := p.parseMath2()
	if err != nil || !p.isOp("~") {
		return x, err
	}
	items := []expr{x}
	for p.skipOp("~") {
		r, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		items = append(items, r)
	}
	return &concatExpr{at{t.off}, items}, nil
}

func (p *parser) parseMath2() (expr, error) {
	x, err := p.parsePow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		t := p.next()
		var r expr
		if r, err = p.parsePow(); err == nil {
			x = &binExpr{at{t.off}, t.val, x, r}
		}
	}
	return x, err
}

func (p *parser) parsePow() (expr, error) {
	x, err := p.parseUnary(true)
	for err == nil && p.isOp("**") {
		t := p.next()
		var r expr
		if r, err = p.parseUnary(true); err == nil {
			x = &binExpr{at{t.off}, "**", x, r}
		}
	}
	return x, err
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	t := p.cur()
	if err := p.enter(t); err != nil {
		return nil, err
	}
	defer p.leave()
	var x expr
	var err error
	switch {
	case p.isOp("-") || p.isOp("+"):
		p.next()
		var operand expr
		if operand, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		x = &unaryExpr{at{t.off}, t.val, operand}
	default:
		if x, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{at{t.off}, true}, nil
		case "false", "False":
			return &constExpr{at{t.off}, false}, nil
		case "none", "None":
			return &constExpr{at{t.off}, nil}, nil
		}
		return &nameExpr{at{t.off}, t.val}, nil
	case tokString:
		// Adjacent literals concatenate, as in Python.
		s := p.next().val
		for p.cur().kind == tokString {
			s += p.next().val
		}
		return &constExpr{at{t.off}, s}, nil
	case tokInt, tokFloat:
		p.next()
		return &constExpr{at{t.off}, t.num}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			x, err := p.parseTuple(false, true, nil, true)
			if err != nil {
				return nil, err
			}
			if err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return x, nil
		case "[":
			return p.parseList()
		case "{":
			return p.parseDict()
		}
	}
	return nil, p.fail(t, "", "unexpected %s", t.describe())
}

func (p *parser) parseList() (expr, error) {
	t := p.next()
	l := &listExpr{at: at{t.off}}
	for !p.isOp("]") {
		if len(l.items) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("]") {
				break
			}
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		l.items = append(l.items, x)
	}
	p.next()
	return l, nil
}

func (p *parser) parseDict() (expr, error) {
	t := p.next()
	d := &dictExpr{at: at{t.off}}
	for !p.isOp("}") {
		if len(d.keys) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("}") {
				break
			}
		}
		k, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp(":"); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		d.keys = append(d.keys, k)
		d.values = append(d.values, v)
	}
	p.next()
	return d, nil
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp(".") || p.isOp("["):
			x, err = p.parseSubscript(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("|"):
			var fs []*filterExpr
			if fs, err = p.parseFilterChain(false); err == nil {
				for _, f := range fs {
					f.x = x
					x = f
				}
			}
		case p.isName("is"):
			x, err = p.parseTest(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(x expr) (expr, error) {
	t := p.next()
	if t.val == "." {
		a := p.cur()
		switch a.kind {
		case tokName:
			p.next()
			return &attrExpr{at{a.off}, x, a.val}, nil
		case tokInt:
			p.next()
			return &itemExpr{at{a.off}, x, &constExpr{at{a.off}, a.num}}, nil
		}
		return nil, p.fail(a, "", "expected name or number after '.', got %s", a.describe())
	}
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		a, err := p.parseSubscribed()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	p.next()
	if len(args) == 0 {
		return nil, p.fail(t, "subscript", "expected an expression, got ']'")
	}
	if len(args) == 1 {
		if s, ok := args[0].(*sliceExpr); ok {
			s.x = x
			return s, nil
		}
		return &itemExpr{at{t.off}, x, args[0]}, nil
	}
	return &itemExpr{at{t.off}, x, &tupleExpr{at{t.off}, args}}, nil
}

// parseSubscribed parses one subscript: an expression or a start:stop:step
// slice.
func (p *parser) parseSubscribed() (expr, error) {
	t := p.cur()
	var parts []expr
	if p.skipOp(":") {
		parts = []expr{nil}
	} else {
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.skipOp(":") {
			return x, nil
		}
		parts = []expr{x}
	}
	optional := func() (expr, error) {
		if p.isOp(":") || p.isOp("]") || p.isOp(",") {
			return nil, nil
		}
		return p.parseExpression(true)
	}
	stop, err := optional()
	if err != nil {
		return nil, err
	}
	parts = append(parts, stop)
	var step expr
	if p.skipOp(":") {
		if step, err = optional(); err != nil {
			return nil, err
		}
	}
	return &sliceExpr{at: at{t.off}, start: parts[0], stop: parts[1], step: step}, nil
}

func (p *parser) parseCallArgs() ([]expr, []kwarg, error) {
	open := p.cur()
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kwargs []kwarg
	for !p.isOp(")") {
		if len(args)+len(kwargs) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, p.fail(p.cur(), "call", "*args and **kwargs in calls are not supported")
		}
		if p.cur().kind == tokName && p.look().kind == tokOp && p.look().val == "=" {
			name := p.next().val
			p.next()
			v, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name, v})
			continue
		}
		if len(kwargs) > 0 {
			return nil, nil, p.fail(p.cur(), "call", "invalid syntax for function call expression: positional argument after keyword argument")
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	if !p.skipOp(")") {
		return nil, nil, p.fail(open, "call", "unclosed '('")
	}
	return args, kwargs, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	args, kwargs, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	// Errors in a call point at what is called, not at the parenthesis.
	return &callExpr{at{fn.offset()}, fn, args, kwargs}, nil
}

// parseFilterChain parses "| f(args) | g ..."; inline means the first
// filter has no leading "|" ({% filter f %}).
func (p *parser) parseFilterChain(inline bool) ([]*filterExpr, error) {
	var out []*filterExpr
	for inline || p.isOp("|") {
		if !inline {
			p.next()
		}
		inline = false
		t := p.cur()
		name, err := p.dottedName()
		if err != nil {
			return nil, err
		}
		f := &filterExpr{at: at{t.off}, name: name, known: lookupFilter(name) != nil}
		if p.isOp("(") {
			if f.args, f.kwargs, err = p.parseCallArgs(); err != nil {
				return nil, err
			}
		}
		out = append(out, f)
	}
	return out, nil
}

func (p *parser) dottedName() (string, error) {
	n, err := p.expectName()
	if err != nil {
		return "", err
	}
	name := n.val
	for p.isOp(".") {
		p.next()
		m, err := p.expectName()
		if err != nil {
			return "", err
		}
		name += "." + m.val
	}
	return name, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	isTok := p.next()
	negated := p.skipName("not")
	t := p.cur()
	name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	te := &testExpr{at: at{t.off}, x: x, name: name, known: lookupTest(name) != nil}
	cur := p.cur()
	switch {
	case p.isOp("("):
		if te.args, te.kwargs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case (cur.kind == tokName || cur.kind == tokString || cur.kind == tokInt || cur.kind == tokFloat ||
		(cur.kind == tokOp && (cur.val == "[" || cur.val == "{"))) &&
		!(cur.kind == tokName && (cur.val == "else" || cur.val == "or" || cur.val == "and")):
		if cur.kind == tokName && cur.val == "is" {
			return nil, p.fail(cur, "test "+name, "you cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		te.args = []expr{arg}
	}
	if negated {
		return &unaryExpr{at{isTok.off}, "not", te}, nil
	}
	return te, nil
}
