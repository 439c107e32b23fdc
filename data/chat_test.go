package data

import (
	"strings"
	"testing"
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
