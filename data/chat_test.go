package data

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mixtune/mixtune/chat"
)

// chatML renders ChatML as Qwen2.5's template does; with dropThinking, an
// assistant turn before the last user turn loses its <think> block, as
// Qwen3's does, so turns render differently once later ones follow.
type chatML struct{ dropThinking bool }

func (c chatML) Name() string { return "chatml-test" }

func (c chatML) Render(msgs []Message, gen bool) (string, error) {
	lastUser := -1
	for i, m := range msgs {
		if m.Role == RoleUser {
			lastUser = i
		}
	}
	var b strings.Builder
	for i, m := range msgs {
		content := m.Content
		if c.dropThinking && m.Role == RoleAssistant && i < lastUser {
			if j := strings.Index(content, "</think>"); j >= 0 {
				content = strings.TrimLeft(content[j+len("</think>"):], "\n")
			}
		}
		b.WriteString("<|im_start|>" + m.Role + "\n" + content + "<|im_end|>\n")
	}
	if gen {
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String(), nil
}

func TestRenderConversationSpans(t *testing.T) {
	conv := []Message{
		{RoleSystem, "Be brief."},
		{RoleUser, "Hi"},
		{RoleAssistant, "<think>greet</think>\nHello!"},
		{RoleUser, "Date?"},
		{RoleAssistant, "Today."},
	}
	markers := []string{"<|im_start|>", "<|im_end|>"}
	for _, tc := range []struct {
		name string
		r    Renderer
		on   LossOn
		want []string // the text of each span
	}{
		{"every assistant turn, its end-of-turn token included", chatML{}, LossAssistant,
			[]string{"<think>greet</think>\nHello!<|im_end|>", "Today.<|im_end|>"}},
		{"last turn only", chatML{}, LossLastTurn, []string{"Today.<|im_end|>"}},
		{"whole conversation", chatML{}, LossAll, nil},
		{"history rendered differently (Qwen3's reasoning)", chatML{dropThinking: true}, LossAssistant,
			[]string{"Hello!<|im_end|>", "Today.<|im_end|>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, spans, err := RenderConversation(tc.r, conv, tc.on, markers)
			if err != nil {
				t.Fatal(err)
			}
			if tc.on == LossAll {
				if len(spans) != 1 || spans[0] != (Span{0, len(text)}) {
					t.Fatalf("spans %v", spans)
				}
				return
			}
			var got []string
			for _, s := range spans {
				got = append(got, text[s.Start:s.End])
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("spans %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRenderConversationErrors(t *testing.T) {
	for _, tc := range []struct {
		msgs []Message
		want string
	}{
		{nil, "the conversation is empty"},
		{[]Message{{"user", "a"}, {"bot", "b"}}, `messages[1]: unknown role "bot" (want system, user or assistant)`},
		{[]Message{{"user", "a"}}, "the conversation has no assistant turn to train on"},
	} {
		if _, _, err := RenderConversation(chatML{}, tc.msgs, LossAssistant, nil); err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v, want %q", tc.msgs, err, tc.want)
		}
	}
}

func TestTargetsFromSpans(t *testing.T) {
	// tokens: "ab" "c" "" (an added token) "de" "f"; spans cover "c..de"
	tokens := []Span{{0, 2}, {2, 3}, {3, 3}, {3, 5}, {5, 6}}
	got := targetsFromSpans(tokens, []Span{{2, 5}})
	want := []bool{false, true, false, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("targets %v, want %v", got, want)
		}
	}
}

// Conversation rows of each kind: rendered through the template, tokenized
// once, trained on the assistant turns and their end-of-turn tokens.
func TestConversationRows(t *testing.T) {
	f := ByteFormat()
	f.Chat = chatML{}
	rows := strings.Join([]string{
		`{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}`,
		`{"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Yo"}]}`,
		`{"instruction": "Add", "input": "1 2", "output": "3"}`,
		`{"instruction": "Greet", "output": "Yo"}`,
	}, "\n")
	ex, err := ParseJSONL("c.jsonl", strings.NewReader(rows), f)
	if err != nil {
		t.Fatal(err)
	}
	tok := NewByteTokenizer()
	for i, want := range []struct{ text, targets string }{
		{"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n", "Yo<|im_end|>"},
		{"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n", "Yo<|im_end|>"},
		{"<|im_start|>user\nAdd\n\n1 2<|im_end|>\n<|im_start|>assistant\n3<|im_end|>\n", "3<|im_end|>"},
		{"<|im_start|>user\nGreet<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n", "Yo<|im_end|>"},
	} {
		e := ex[i]
		if e.IDs[0] != tok.BOS() || tok.Decode(e.IDs) != want.text {
			t.Errorf("row %d: %q", i+1, tok.Decode(e.IDs))
		}
		var tg []int
		for j, isT := range e.Target {
			if isT {
				tg = append(tg, e.IDs[j])
			}
		}
		if got := tok.Decode(tg); got != want.targets {
			t.Errorf("row %d trains on %q, want %q", i+1, got, want.targets)
		}
	}
	// the Alpaca prompt instead of the template: loss on the output and EOS
	f.Alpaca = true
	ex, err = ParseJSONL("a.jsonl", strings.NewReader(`{"instruction": "Add", "input": "", "output": "3"}`), f)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Decode(ex[0].IDs); !strings.HasSuffix(got, "### Instruction:\nAdd\n\n### Response:\n3") || !ex[0].Target[len(ex[0].IDs)-1] || ex[0].Target[len(ex[0].IDs)-3] {
		t.Errorf("alpaca prompt: %q %v", got, ex[0].Target)
	}
}

func TestConversationRowErrors(t *testing.T) {
	f := ByteFormat()
	f.Chat = chatML{}
	for _, tc := range []struct{ row, want string }{
		{`{"messages": []}`, `c.jsonl:1: "messages" is empty: the conversation has no turns`},
		{`{"messages": [{"role": "bot", "content": "x"}]}`, `c.jsonl:1: messages[0]: unknown role "bot" (want system, user or assistant)`},
		{`{"messages": [{"role": "user", "content": ["x"]}]}`, `c.jsonl:1: messages[0]: "content" must be a string`},
		{`{"messages": [{"role": "user", "content": null}]}`, `c.jsonl:1: messages[0]: "content" must be a string`},
		{`{"messages": [{"role": "user", "content": "x", "name": "n"}]}`, `c.jsonl:1: messages[0]: unknown field "name" (want "role" and "content")`},
		{`{"messages": [{"role": "user", "content": "x"}]}`, `c.jsonl:1: the conversation has no assistant turn to train on`},
		{`{"messages": {"role": "user"}}`, `c.jsonl:1: "messages" must be a list of {"role", "content"} objects`},
		{`{"conversations": [{"from": "robot", "value": "x"}]}`, `c.jsonl:1: conversations[0]: unknown "from" "robot" (want human, gpt or system)`},
		{`{"instruction": "x"}`, `c.jsonl:1: "instruction" without "output"`},
		{`{"instruction": "x", "output": ""}`, `c.jsonl:1: "output" is empty`},
		{`{"messages": [{"role": "user", "content": "x"}], "text": "y"}`, `c.jsonl:1: both "text" and "messages"`},
	} {
		if _, err := ParseJSONL("c.jsonl", strings.NewReader(tc.row), f); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.row, err, tc.want)
		}
	}
	if _, err := ParseJSONL("c.jsonl", strings.NewReader(`{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}`), ByteFormat()); err == nil ||
		!strings.Contains(err.Error(), "needs a chat template") {
		t.Errorf("no template: %v", err)
	}
}

// A task row asks what precedes the answer and wants the answer: a
// prompt/completion pair, or a conversation through the template with
// the generation prompt.
func TestLoadTasks(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/t.jsonl"
	rows := `{"prompt": "Q:", "completion": " A"}` + "\n" +
		`{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}` + "\n" +
		`{"instruction": "Add", "input": "1 2", "output": "3"}` + "\n"
	if err := os.WriteFile(path, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	f := ByteFormat()
	f.Chat = chatML{}
	tasks, err := LoadTasks(path, f, 0)
	if err != nil {
		t.Fatal(err)
	}
	tok := NewByteTokenizer()
	for i, want := range []struct{ prompt, answer string }{
		{"Q:", " A"},
		{"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "Yo"},
		{"<|im_start|>user\nAdd\n\n1 2<|im_end|>\n<|im_start|>assistant\n", "3"},
	} {
		if tasks[i].Prompt[0] != tok.BOS() || tok.Decode(tasks[i].Prompt) != want.prompt || tasks[i].Want != want.answer || tasks[i].Line != i+1 {
			t.Errorf("task %d: %q wants %q", i, tok.Decode(tasks[i].Prompt), tasks[i].Want)
		}
	}
	if tasks, _ := LoadTasks(path, f, 2); len(tasks) != 2 {
		t.Errorf("limit 2 gave %d", len(tasks))
	}
	if err := os.WriteFile(path, []byte(`{"messages": [{"role": "user", "content": "Hi"}]}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTasks(path, f, 0); err == nil || !strings.HasSuffix(err.Error(), "t.jsonl:1: a task conversation must end with the assistant's answer") {
		t.Errorf("%v", err)
	}
}

// A real chat template through ChatTemplate: Qwen2.5's, whose default
// system prompt appears when the conversation has none.
func TestChatTemplateRenderer(t *testing.T) {
	bt, ok := chat.Builtin("qwen2.5")
	if !ok {
		t.Fatal("no built-in qwen2.5")
	}
	tmpl, err := chat.Parse(bt.Name, bt.Source)
	if err != nil {
		t.Fatal(err)
	}
	r := ChatTemplate(tmpl, bt.Source, chat.Options{EOS: bt.EOS})
	text, spans, err := RenderConversation(r, []Message{{RoleUser, "Hi"}, {RoleAssistant, "Yo"}}, LossAssistant, []string{"<|im_start|>", "<|im_end|>"})
	if err != nil {
		t.Fatal(err)
	}
	if len(spans) != 1 || text[spans[0].Start:spans[0].End] != "Yo<|im_end|>" || !strings.Contains(text, "<|im_start|>system\n") {
		t.Fatalf("%q spans %v", text, spans)
	}
	if !strings.HasPrefix(r.Name(), "qwen2.5@") {
		t.Fatalf("name %q", r.Name())
	}
}

// Every built-in template locates every assistant turn of a multi-turn
// conversation: the span holds the reply and ends at the template's
// end-of-turn marker (or, for a template that ends turns with plain text,
// the reply itself).
func TestRenderConversationWithEveryBuiltin(t *testing.T) {
	conv := []Message{
		{RoleSystem, "You are terse."},
		{RoleUser, "Hi there"},
		{RoleAssistant, "Hello."},
		{RoleUser, "And the date?"},
		{RoleAssistant, "March 19, 2033"},
	}
	markers := []string{"<|im_end|>", "<|eot_id|>", "</s>", "<end_of_turn>", "<｜end▁of▁sentence｜>", "<|endoftext|>"}
	for _, name := range chat.BuiltinNames() {
		bt, _ := chat.Builtin(name)
		tmpl, err := chat.Parse(bt.Name, bt.Source)
		if err != nil {
			t.Fatal(err)
		}
		r := ChatTemplate(tmpl, bt.Source, chat.Options{BOS: bt.BOS, EOS: bt.EOS, Now: func() time.Time { return time.Date(2025, 3, 14, 0, 0, 0, 0, time.UTC) }})
		msgs := conv
		if name == "gemma3" || name == "mistral" || name == "llama2" {
			msgs = conv[1:] // no system role, or only as part of the first user turn
		}
		text, spans, err := RenderConversation(r, msgs, LossAssistant, append(markers, bt.EOS))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(spans) != 2 {
			t.Errorf("%s: %d spans", name, len(spans))
			continue
		}
		for i, reply := range []string{"Hello.", "March 19, 2033"} {
			got := text[spans[i].Start:spans[i].End]
			if !strings.Contains(got, reply) || strings.Contains(got, "terse") || strings.Contains(got, "date?") {
				t.Errorf("%s: turn %d span %q", name, i, got)
			}
		}
		t.Logf("%s: %q", name, text[spans[1].Start:spans[1].End])
	}
}
