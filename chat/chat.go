// Package chat renders Hugging Face chat templates (the Jinja "chat_template"
// of a tokenizer_config.json) exactly as transformers' apply_chat_template
// renders them.
//
// transformers compiles a template with jinja2's
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) and the
// loopcontrols extension, adds the globals raise_exception and strftime_now
// and a tojson filter that does not escape HTML, and renders it with
// messages, tools, documents, add_generation_prompt, the special tokens and
// any extra keyword arguments. This package implements that dialect of
// Jinja itself (lexer, parser and evaluator with Python's value semantics),
// because no Go Jinja library reproduced it faithfully or could bound a
// runaway template; chat/testdata holds goldens made with Python's jinja2
// and @huggingface/jinja that the tests compare against.
//
// Templates are sandboxed: they see only the values passed in, converted to
// Python-like values; lists and dicts cannot be modified; and every render
// runs under Limits on evaluation steps, output size and macro recursion.
package chat

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// Message is one chat turn as the template sees it: a dict with "role",
// "content" and the keys in Fields.
type Message struct {
	Role    string
	Content string
	// Fields holds the other keys a template may read (reasoning_content,
	// tool_calls, name, tool_call_id, ...). Values must be JSON-like: nil,
	// bool, int, float64, string, []any, map[string]any or json.RawMessage
	// (decoded keeping key order). A "content" key replaces Content, which is
	// how content that is not a string (None, a list of parts) is passed.
	// Keys after role and content appear in sorted order.
	Fields map[string]any
}

// Options are the rest of apply_chat_template's render arguments.
type Options struct {
	AddGenerationPrompt bool
	// Special tokens. An empty string leaves the variable undefined, as
	// transformers leaves out special tokens a tokenizer does not set.
	BOS, EOS, UNK, PAD string
	// Extra holds further template variables: tools and documents (None
	// when absent, as transformers passes them), enable_thinking,
	// date_string, and so on. Values follow the rules of Message.Fields.
	Extra map[string]any
	// Now is the clock strftime_now reads; nil means time.Now. Templates
	// such as Llama 3.2's print today's date unless date_string is given.
	Now func() time.Time
	// Limits bounds the work of one render; zero fields take the defaults.
	Limits Limits
}

// Limits bound one render so a hostile or broken template fails with a
// *LimitError instead of running away. range() is also capped at 100000
// items, as jinja2's sandbox caps it.
type Limits struct {
	MaxSteps       int // statements and expressions evaluated
	MaxOutputBytes int // size of the output and of any string or list built
	MaxDepth       int // nested macro calls
}

// DefaultLimits are generous for real chat templates: Qwen3's template on a
// 1000-message conversation takes about 66k steps and 32 KB of output, and
// hitting the step limit takes about a second.
func DefaultLimits() Limits {
	return Limits{MaxSteps: 5_000_000, MaxOutputBytes: 64 << 20, MaxDepth: 100}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxSteps > 0 {
		d.MaxSteps = l.MaxSteps
	}
	if l.MaxOutputBytes > 0 {
		d.MaxOutputBytes = l.MaxOutputBytes
	}
	if l.MaxDepth > 0 {
		d.MaxDepth = l.MaxDepth
	}
	return d
}

// Template is a parsed chat template. It is immutable and safe for
// concurrent use.
type Template struct {
	name       string
	body       []stmt
	lineStarts []int // byte offsets of line starts in the normalised source
	src        string
}

// Parse parses a chat template. name is used in error messages. Syntax
// errors, unknown tags, and unknown filters or tests outside a condition
// (where jinja2 also fails at compile time) are reported as *Error.
func Parse(name, source string) (t *Template, err error) {
	defer recoverInternal(name, &err)
	src := normalizeNewlines(source)
	t = &Template{name: name, src: src, lineStarts: []int{0}}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			t.lineStarts = append(t.lineStarts, i+1)
		}
	}
	toks, err := tokenize(src)
	if err != nil {
		le := err.(*lexError)
		return nil, t.errorAt(le.off, "", le)
	}
	body, err := parse(toks)
	if err != nil {
		pe := err.(*parseError)
		return nil, t.errorAt(pe.off, pe.construct, pe)
	}
	t.body = body
	return t, nil
}

// Name is the name given to Parse.
func (t *Template) Name() string { return t.name }

// position turns a byte offset into a 1-based line and column (columns count
// characters).
func (t *Template) position(off int) (line, col int) {
	i := sort.SearchInts(t.lineStarts, off+1) - 1
	if i < 0 {
		i = 0
	}
	if off > len(t.src) {
		off = len(t.src)
	}
	return i + 1, utf8.RuneCountInString(t.src[t.lineStarts[i]:off]) + 1
}

func (t *Template) errorAt(off int, construct string, err error) *Error {
	line, col := t.position(off)
	return &Error{Template: t.name, Line: line, Column: col, Construct: construct, Err: err}
}

// Render renders the conversation. A template that calls raise_exception
// fails with an *Error wrapping a *RaiseError carrying its message.
func (t *Template) Render(msgs []Message, opts Options) (out string, err error) {
	defer recoverInternal(t.name, &err)
	vars, err := renderVars(msgs, opts)
	if err != nil {
		return "", fmt.Errorf("chat template %q: %w", t.name, err)
	}
	var b strings.Builder
	root := newScope(globalScope())
	for k, v := range vars {
		root.set(k, v)
	}
	r := &renderer{tmpl: t, out: &b, root: root, limits: opts.Limits.withDefaults(), now: opts.Now}
	if r.now == nil {
		r.now = time.Now
	}
	ctl, err := r.execBody(t.body, root)
	if err != nil {
		return "", err
	}
	if ctl != ctlNone {
		// jinja2 rejects break/continue outside a loop when compiling; here
		// it surfaces when reached.
		return "", fmt.Errorf("chat template %q: 'break' or 'continue' outside a loop", t.name)
	}
	return b.String(), nil
}

// renderVars builds the variables transformers passes to render().
func renderVars(msgs []Message, opts Options) (map[string]any, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		d, err := messageDict(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		list[i] = d
	}
	vars := map[string]any{
		"messages":              list,
		"add_generation_prompt": opts.AddGenerationPrompt,
		"tools":                 nil,
		"documents":             nil,
	}
	for name, tok := range map[string]string{"bos_token": opts.BOS, "eos_token": opts.EOS, "unk_token": opts.UNK, "pad_token": opts.PAD} {
		if tok != "" {
			vars[name] = tok
		}
	}
	for k, v := range opts.Extra {
		if k == "messages" || k == "add_generation_prompt" {
			return nil, fmt.Errorf("Options.Extra[%q]: set this through the messages and Options.AddGenerationPrompt", k)
		}
		c, err := fromGo(v)
		if err != nil {
			return nil, fmt.Errorf("Options.Extra[%q]: %w", k, err)
		}
		vars[k] = c
	}
	return vars, nil
}

func messageDict(m Message) (*dict, error) {
	d := newDict(2 + len(m.Fields))
	_ = d.set("role", m.Role)
	_ = d.set("content", m.Content)
	keys := make([]string, 0, len(m.Fields))
	for k := range m.Fields {
		if k == "role" {
			return nil, fmt.Errorf("Fields[\"role\"]: the role is set through Message.Role")
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := fromGo(m.Fields[k])
		if err != nil {
			return nil, fmt.Errorf("Fields[%q]: %w", k, err)
		}
		_ = d.set(k, v)
	}
	return d, nil
}

// Error is a template that failed to parse or render, with the position of
// the construct at fault.
type Error struct {
	Template  string // the name given to Parse
	Line      int    // 1-based line in the template source
	Column    int    // 1-based column, in characters
	Construct string // what failed, e.g. "tag for", "filter tojson", "call raise_exception"; may be empty
	Err       error  // the cause: *RaiseError, *UndefinedError, *LimitError or a plain error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("chat template %q, line %d, column %d", e.Template, e.Line, e.Column)
	if e.Construct != "" {
		s += " (" + e.Construct + ")"
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// RaiseError is a template's own raise_exception(Message), such as
// "Conversation roles must alternate user/assistant/user/assistant/...".
type RaiseError struct{ Message string }

func (e *RaiseError) Error() string { return "raise_exception: " + e.Message }

// UndefinedError is jinja2's UndefinedError: an undefined value was used in
// a way that needs a value (an attribute or item of it, a call, arithmetic).
// Message is jinja2's text, e.g. "'dict object' has no attribute 'x'".
type UndefinedError struct{ Message string }

func (e *UndefinedError) Error() string { return "undefined: " + e.Message }

// LimitError is a render that exceeded one of its Limits.
type LimitError struct {
	Limit string // "evaluation steps", "output bytes" or "nested macro calls"
	Max   int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("limit exceeded: more than %d %s", e.Max, e.Limit)
}

// InternalError is a bug in this package caught at the API boundary, so that
// no input makes the caller panic. Tests and the fuzz targets fail on it.
type InternalError struct{ Panic string }

func (e *InternalError) Error() string { return "internal error in package chat: " + e.Panic }

func recoverInternal(name string, err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("chat template %q: %w", name, &InternalError{Panic: fmt.Sprint(p)})
	}
}
