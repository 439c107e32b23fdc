package chat

// Syntax tree of a parsed template. Every node keeps the byte offset of the
// construct it came from, so errors can name a line and column.

type stmt interface{ offset() int }

type expr interface{ offset() int }

type at struct{ off int }

func (a at) offset() int { return a.off }

type (
	textStmt struct {
		at
		text string
	}
	outputStmt struct {
		at
		x expr
	}
	ifStmt struct {
		at
		conds  []expr
		bodies [][]stmt
		els    []stmt
	}
	forStmt struct {
		at
		target target
		iter   expr
		cond   expr // nil without an "if" clause
		body   []stmt
		els    []stmt
	}
	setStmt struct {
		at
		target target
		value  expr
	}
	setBlockStmt struct {
		at
		target  target
		filters []*filterExpr // applied to the captured text, innermost first
		body    []stmt
	}
	macroStmt struct {
		at
		name     string
		params   []string
		defaults []expr // aligned to the end of params, as in Python
		body     []stmt
	}
	filterBlockStmt struct {
		at
		filters []*filterExpr
		body    []stmt
	}
	withStmt struct {
		at
		targets []target
		values  []expr
		body    []stmt
	}
	// scopeStmt renders its body in place: {% block %} without inheritance
	// and transformers' {% generation %}.
	scopeStmt struct {
		at
		tag  string
		body []stmt
	}
	breakStmt    struct{ at }
	continueStmt struct{ at }
)

// target is the left side of set/for/with: a name, a namespace attribute
// (ns.attr) or a tuple of names.
type target struct {
	at
	names []string // one name, or the names of a tuple
	tuple bool
	attr  string // set when the target is names[0].attr
}

type (
	constExpr struct {
		at
		v any
	}
	nameExpr struct {
		at
		name string
	}
	listExpr struct {
		at
		items []expr
	}
	tupleExpr struct {
		at
		items []expr
	}
	dictExpr struct {
		at
		keys, values []expr
	}
	attrExpr struct {
		at
		x    expr
		name string
	}
	itemExpr struct {
		at
		x, key expr
	}
	sliceExpr struct {
		at
		x                 expr
		start, stop, step expr // nil when omitted
	}
	callExpr struct {
		at
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	filterExpr struct {
		at
		x      expr // nil in filter blocks and {% set x | f %}
		name   string
		args   []expr
		kwargs []kwarg
		known  bool // false: unknown filter under a condition, an error only if reached
	}
	testExpr struct {
		at
		x      expr
		name   string
		args   []expr
		kwargs []kwarg
		known  bool
	}
	unaryExpr struct {
		at
		op string // "-", "+", "not"
		x  expr
	}
	binExpr struct {
		at
		op   string // + - * / // % ** and or
		l, r expr
	}
	compareExpr struct {
		at
		first expr
		ops   []string // == != < <= > >= in notin
		rest  []expr
	}
	concatExpr struct {
		at
		items []expr
	}
	condExpr struct {
		at
		then, cond, els expr // els nil when omitted
	}
)

type kwarg struct {
	name  string
	value expr
}
