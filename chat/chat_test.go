package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func render(t *testing.T, src string, msgs []Message, opts Options) (string, error) {
	t.Helper()
	tmpl, err := Parse("t", src)
	if err != nil {
		return "", err
	}
	return tmpl.Render(msgs, opts)
}

// TestBadTemplates pins the exact messages of templates that cannot be
// parsed or rendered: each names the template, the position and the
// construct at fault.
func TestBadTemplates(t *testing.T) {
	small := Options{Limits: Limits{MaxSteps: 10_000, MaxOutputBytes: 1000, MaxDepth: 20}}
	tests := []struct {
		name, src string
		opts      Options
		want      string
		cause     any // pointer to the error type errors.As must find, or nil
	}{
		{"unclosed if", "{% if x %}\nyes", Options{},
			`chat template "t", line 2, column 4: unexpected end of template, expected 'elif' or 'else' or 'endif'`, nil},
		{"unclosed for", "{% for m in messages %}{{ m }}", Options{},
			`chat template "t", line 1, column 31: unexpected end of template, expected 'endfor' or 'else'`, nil},
		{"unclosed print", "a {{ x ", Options{},
			`chat template "t", line 1, column 8: expected end of print statement, got end of template`, nil},
		{"bad expression", "{{ x + }}", Options{},
			`chat template "t", line 1, column 8: unexpected end of print statement`, nil},
		{"unbalanced bracket", "{{ [1, 2) }}", Options{},
			`chat template "t", line 1, column 9: unexpected ')', expected ']'`, nil},
		{"unknown filter", "{{ messages|frobnicate }}", Options{},
			`chat template "t", line 1, column 13 (filter frobnicate): no filter named "frobnicate"`, nil},
		{"unknown test", "{% for m in messages %}{{ m is frobbed }}{% endfor %}", Options{},
			`chat template "t", line 1, column 32 (test frobbed): no test named "frobbed"`, nil},
		{"unknown tag", "x\n  {% frobnicate %}", Options{},
			`chat template "t", line 2, column 6 (tag frobnicate): unknown tag "frobnicate"`, nil},
		{"unsupported include", "{% include 'other.jinja' %}", Options{},
			`chat template "t", line 1, column 4 (tag include): tag "include" is not supported: chat templates are rendered without a template loader`, nil},
		{"unclosed comment", "a {# note", Options{},
			`chat template "t", line 1, column 3: missing end of comment tag`, nil},
		{"bad escape", `{{ '\x4' }}`, Options{},
			`chat template "t", line 1, column 4: truncated \xXX escape`, nil},
		{"nesting", "{{ " + strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300) + " }}", Options{},
			`chat template "t", line 1, column 104: template nested too deeply (more than 200 levels of expressions and blocks)`, nil},
		{"raise_exception", "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with a user message') }}{% endif %}", Options{},
			`chat template "t", line 1, column 39 (call raise_exception): raise_exception: Conversation must start with a user message`, new(*RaiseError)},
		{"undefined attribute", "{{ foo.bar }}", Options{},
			`chat template "t", line 1, column 8 (attribute bar): undefined: 'foo' is undefined`, new(*UndefinedError)},
		{"attribute of a missing key", "{{ messages[0].name.first }}", Options{},
			`chat template "t", line 1, column 21 (attribute first): undefined: 'dict object' has no attribute 'name'`, new(*UndefinedError)},
		{"type error", "{{ messages[0].content + 1 }}", Options{},
			`chat template "t", line 1, column 24 (operator +): can only concatenate str (not "int") to str`, nil},
		{"step limit", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", Options{Limits: Limits{MaxSteps: 10_000}},
			`chat template "t", line 1, column 32 (tag for): limit exceeded: more than 10000 evaluation steps`, new(*LimitError)},
		{"output limit", "{% for i in range(400) %}0123456789{% endfor %}", small,
			`chat template "t", line 1, column 26: limit exceeded: more than 1000 output bytes`, new(*LimitError)},
		{"string growth limit", "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", small,
			`chat template "t", line 1, column 71 (operator ~): limit exceeded: more than 1000 output bytes`, new(*LimitError)},
		{"repeat limit", "{{ 'x' * 100000 }}", small,
			`chat template "t", line 1, column 8 (operator *): limit exceeded: more than 1000 output bytes`, new(*LimitError)},
		{"shared list growth limit", "{% set ns = namespace(x=[1]) %}{% for i in range(40) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}", small,
			`chat template "t", line 1, column 70: limit exceeded: more than 1000 output bytes`, new(*LimitError)},
		{"quadratic growth is charged", "{% set ns = namespace(s='') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxx' %}{% endfor %}", Options{},
			`chat template "t", line 1, column 73 (operator ~): limit exceeded: more than 5000000 evaluation steps`, new(*LimitError)},
		{"recursion limit", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", small,
			`chat template "t", line 1, column 20 (call f): limit exceeded: more than 20 nested macro calls`, new(*LimitError)},
		{"range cap", "{{ range(1000000)|length }}", Options{},
			`chat template "t", line 1, column 4 (call range): Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).`, nil},
		{"sandbox", "{{ messages.append(messages[0]) }}", Options{},
			`chat template "t", line 1, column 13 (call append): undefined: access to attribute 'append' of 'list' object is unsafe.`, new(*UndefinedError)},
		{"break outside loop", "{% break %}", Options{},
			`chat template "t": 'break' or 'continue' outside a loop`, nil},
	}
	msgs := []Message{{Role: "assistant", Content: "hi"}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.src, msgs, tc.opts)
			if err == nil {
				t.Fatalf("rendered %q, want error %q", out, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %s\nwant %s", err, tc.want)
			}
			var pe *Error
			if !strings.Contains(tc.want, "line ") == errors.As(err, &pe) {
				t.Errorf("error %T: *Error expected exactly when a position is reported", err)
			}
			if tc.cause != nil && !errors.As(err, tc.cause) {
				t.Errorf("error %v does not wrap %T", err, tc.cause)
			}
		})
	}
}

// TestRaiseMessage checks the message a caller gets from a built-in
// template that refuses a conversation.
func TestRaiseMessage(t *testing.T) {
	bt, ok := Builtin("mistral")
	if !ok {
		t.Fatal("no built-in mistral")
	}
	tmpl, err := Parse(bt.Name, bt.Source)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render([]Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}, Options{BOS: bt.BOS, EOS: bt.EOS})
	var re *RaiseError
	if !errors.As(err, &re) || re.Message != "Conversation roles must alternate user/assistant/user/assistant/..." {
		t.Fatalf("got %v", err)
	}
}

func TestBuiltins(t *testing.T) {
	want := []string{"chatml", "deepseek_v3", "gemma3", "llama2", "llama3", "llama3.1", "llama3.2", "mistral", "qwen2", "qwen2.5", "qwen3", "zephyr"}
	got := BuiltinNames()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("BuiltinNames() = %v, want %v", got, want)
	}
	for _, name := range got {
		bt, ok := Builtin(name)
		if !ok || bt.Name != name || bt.Source == "" || !strings.Contains(bt.Origin, "npm") {
			t.Errorf("Builtin(%q) = %+v, %v", name, bt, ok)
			continue
		}
		if _, err := Parse(name, bt.Source); err != nil {
			t.Errorf("built-in %s does not parse: %v", name, err)
		}
	}
	if _, ok := Builtin("nope"); ok {
		t.Error("Builtin(nope) found")
	}
	if bt, _ := Builtin("llama3.1"); bt.BOS != "<|begin_of_text|>" || bt.EOS != "<|eot_id|>" {
		t.Errorf("llama3.1 special tokens: %+v", bt)
	}
}

func TestRenderInputs(t *testing.T) {
	fixed := func() time.Time { return time.Date(2024, 12, 25, 8, 5, 0, 0, time.UTC) }
	tests := []struct {
		name string
		src  string
		msgs []Message
		opts Options
		want string
	}{
		{"unset special tokens are undefined", "{{ bos_token is defined }}|{{ eos_token }}|{{ pad_token is defined }}",
			nil, Options{EOS: "</s>"}, "False|</s>|False"},
		{"tools and documents default to none", "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }}",
			nil, Options{AddGenerationPrompt: true}, "True True True"},
		{"clock", "{{ strftime_now('%d %b %Y, %H:%M') }}", nil, Options{Now: fixed}, "25 Dec 2024, 08:05"},
		{"message keys in order", "{% for k, v in messages[0]|items %}{{ k }}={{ v }};{% endfor %}",
			[]Message{{Role: "assistant", Content: "x", Fields: map[string]any{"reasoning_content": "r", "name": "n"}}}, Options{},
			"role=assistant;content=x;name=n;reasoning_content=r;"},
		{"content none", "{{ messages[0].content is none }} {{ messages[0].tool_calls[0].function.name }}",
			[]Message{{Role: "assistant", Fields: map[string]any{"content": nil,
				"tool_calls": json.RawMessage(`[{"function": {"name": "f", "arguments": {"b": 1, "a": 2.0}}}]`)}}},
			Options{}, "True f"},
		{"raw JSON keeps order and number kinds", "{{ tools|tojson }}", nil,
			Options{Extra: map[string]any{"tools": json.RawMessage(`[{"z": 1, "a": 1.0, "m": [1e3, -0, "é"]}]`)}},
			`[{"z": 1, "a": 1.0, "m": [1000.0, 0, "é"]}]`},
		{"Go maps are sorted", "{{ x|tojson }}", nil, Options{Extra: map[string]any{"x": map[string]any{"b": 1, "a": []string{"s"}}}},
			`{"a": ["s"], "b": 1}`},
		{"extra kwargs", "{{ enable_thinking is false }} {{ date_string }}", nil,
			Options{Extra: map[string]any{"enable_thinking": false, "date_string": "01 Jan 2025"}}, "True 01 Jan 2025"},
		{"jinja in content is data", "{{ messages[0].content }}", []Message{{Role: "user", Content: "{{ 7 * 7 }}{% if %}"}}, Options{},
			"{{ 7 * 7 }}{% if %}"},
		{"self-containing namespace prints as in Python", "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", nil, Options{},
			"<Namespace {'me': <Namespace {...}>}>"},
		{"generation tag renders its body", "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}",
			[]Message{{Role: "assistant", Content: "a"}}, Options{}, "[a]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := render(t, tc.src, tc.msgs, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestInputErrors(t *testing.T) {
	tests := []struct {
		name string
		msgs []Message
		opts Options
		want string
	}{
		{"role in Fields", []Message{{Role: "user", Fields: map[string]any{"role": "x"}}}, Options{},
			`chat template "t": message 0: Fields["role"]: the role is set through Message.Role`},
		{"Go type", []Message{{Role: "user", Fields: map[string]any{"when": time.Time{}}}}, Options{},
			`chat template "t": message 0: Fields["when"]: unsupported value of Go type time.Time (use nil, bool, int, float64, string, []any, map[string]any or json.RawMessage)`},
		{"nested Go type", nil, Options{Extra: map[string]any{"tools": []any{map[string]any{"f": func() {}}}}},
			`chat template "t": Options.Extra["tools"]: [0]: ["f"]: unsupported value of Go type func() (use nil, bool, int, float64, string, []any, map[string]any or json.RawMessage)`},
		{"messages in Extra", nil, Options{Extra: map[string]any{"messages": nil}},
			`chat template "t": Options.Extra["messages"]: set this through the messages and Options.AddGenerationPrompt`},
		{"bad JSON", nil, Options{Extra: map[string]any{"tools": json.RawMessage(`[1,`)}},
			`chat template "t": Options.Extra["tools"]: decoding JSON: EOF`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, "x", tc.msgs, tc.opts)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestPositions checks line and column counting: newlines of any style,
// and columns in characters, not bytes.
func TestPositions(t *testing.T) {
	tests := []struct {
		src       string
		line, col int
	}{
		{"{{ x|nope }}", 1, 6},
		{"a\r\nb\r\n  {{ x|nope }}", 3, 8},
		{"a\rb\n{{ x|nope }}", 3, 6},
		{"héllo 😀 {{ x|nope }}", 1, 14},
	}
	for _, tc := range tests {
		_, err := Parse("p", tc.src)
		var pe *Error
		if !errors.As(err, &pe) || pe.Line != tc.line || pe.Column != tc.col {
			t.Errorf("%q: got %v, want line %d column %d", tc.src, err, tc.line, tc.col)
		}
	}
}

// TestConcurrentRender renders one parsed template from many goroutines;
// a Template holds no render state.
func TestConcurrentRender(t *testing.T) {
	bt, _ := Builtin("qwen3")
	tmpl, err := Parse(bt.Name, bt.Source)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for g := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				msgs := []Message{{Role: "user", Content: fmt.Sprintf("q%d%d", g, i)}, {Role: "assistant", Content: "<think>r</think>a"}}
				out, err := tmpl.Render(msgs, Options{AddGenerationPrompt: true})
				want := fmt.Sprintf("<|im_start|>user\nq%d%d<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</think>\n\na<|im_end|>\n<|im_start|>assistant\n", g, i)
				if err != nil || out != want {
					errs[g] = fmt.Errorf("goroutine %d render %d: %q, %v", g, i, out, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestLongConversation renders a 2000-message conversation with Qwen3's
// template within the default limits.
func TestLongConversation(t *testing.T) {
	bt, _ := Builtin("qwen3")
	tmpl, err := Parse(bt.Name, bt.Source)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []Message
	for i := 0; i < 1000; i++ {
		msgs = append(msgs, Message{Role: "user", Content: "q"}, Message{Role: "assistant", Content: "<think>r</think>a"})
	}
	out, err := tmpl.Render(msgs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "<|im_start|>assistant\n"); n != 1000 {
		t.Errorf("%d assistant turns rendered", n)
	}
}
