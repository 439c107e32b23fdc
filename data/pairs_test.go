package data

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParsePairs(t *testing.T) {
	f := ByteFormat()
	in := `{"prompt": "2+2=", "chosen": "4", "rejected": "5"}

{"prompt": "", "chosen": "yes", "rejected": "no"}
`
	ps, err := ParsePairs("p.jsonl", strings.NewReader(in), f, 32)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].Line != 1 || ps[1].Line != 3 {
		t.Fatalf("%d pairs, lines %v", len(ps), ps)
	}
	// BOS "2+2=" "4" EOS: targets the completion and EOS only
	c := ps[0].Chosen
	if len(c.IDs) != 7 || promptLen(c) != 5 || !c.Target[5] || !c.Target[6] {
		t.Errorf("chosen %v %v", c.IDs, c.Target)
	}
	b := BatchPairs(ps, 8, 0)
	if b.Rows != 4 || b.Pairs != 2 || b.Tokens[0] != 2 || b.Tokens[1] != 4 || b.Tokens[2] != 2 || b.Tokens[3] != 3 || b.ChosenTokens != 6 || b.NumTargets != 11 {
		t.Errorf("batch rows %d, tokens %v, chosen %d, targets %d", b.Rows, b.Tokens, b.ChosenTokens, b.NumTargets)
	}
	// row 0: inputs BOS 2 + 2 = 4 pad pad; targets on "4" (predicted at "=") and EOS
	if got := b.Targets[0:8]; got[3] != IgnoreIndex || got[4] != int('4') || got[5] != c.IDs[6] || got[6] != IgnoreIndex {
		t.Errorf("row 0 targets %v", got)
	}
}

// Too long a pair loses prompt tokens from its start (after BOS), the
// same in both sequences; the completions stay whole.
func TestParsePairsTruncatesThePromptFirst(t *testing.T) {
	ps, err := ParsePairs("p.jsonl", strings.NewReader(`{"prompt": "abcdef", "chosen": "XY", "rejected": "Z"}`), ByteFormat(), 6)
	if err != nil {
		t.Fatal(err)
	}
	// BOS abcdef XY EOS is 10 tokens, the limit 7: drop "abc"
	c, r := ps[0].Chosen, ps[0].Rejected
	if len(c.IDs) != 7 || c.IDs[1] != int('d') || len(r.IDs) != 6 || r.IDs[1] != int('d') || promptLen(c) != 4 {
		t.Errorf("chosen %v, rejected %v", c.IDs, r.IDs)
	}
}

func TestParsePairsErrors(t *testing.T) {
	for _, c := range []struct{ row, want string }{
		{`{"prompt": "a", "chosen": "b"}`, `needs "rejected"`},
		{`{"chosen": "b", "rejected": "c"}`, `needs "prompt"`},
		{`{"prompt": "a", "chosen": "b", "rejected": "b"}`, "the same"},
		{`{"prompt": "a", "chosen": "", "rejected": "b"}`, `"chosen" is empty`},
		{`{"prompt": "a", "chosen": "b", "rejected": "c", "score": 1}`, `unknown field "score"`},
		{`{"prompt": "a", "chosen": 3, "rejected": "c"}`, `"chosen"`},
		{`{"prompt": "abc", "chosen": "0123456789", "rejected": "c"}`, "leave no room"},
		{`[1]`, "JSON object"},
	} {
		_, err := ParsePairs("p.jsonl", strings.NewReader("\n"+c.row+"\n"), ByteFormat(), 8)
		var le *LineError
		if !errors.As(err, &le) || le.Line != 2 || le.File != "p.jsonl" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want p.jsonl:2 and %q", c.row, err, c.want)
		}
	}
}

// The loader yields whole epochs of pairs, each pair once per epoch.
func TestPairLoaderEpoch(t *testing.T) {
	in := `{"prompt": "a", "chosen": "b", "rejected": "c"}
{"prompt": "d", "chosen": "e", "rejected": "f"}
{"prompt": "g", "chosen": "h", "rejected": "i"}
{"prompt": "j", "chosen": "k", "rejected": "l"}`
	ps, err := ParsePairs("p.jsonl", strings.NewReader(in), ByteFormat(), 8)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewPairLoader(ps, 2, 8, 0, true, 7)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for range 2 * l.StepsPerEpoch {
		b := l.Next()
		for r := range b.Pairs {
			seen[b.Inputs[r*8+1]]++ // the prompt's one byte
		}
	}
	for _, p := range "adgj" {
		if seen[int(p)] != 2 {
			t.Errorf("prompt %q seen %d times in two epochs", p, seen[int(p)])
		}
	}
	// a loader restored to a state goes on as the saving one does
	l.Next()
	st := l.State()
	want := l.Next()
	l2, _ := NewPairLoader(ps, 2, 8, 0, true, 7)
	if err := l2.Restore(st); err != nil {
		t.Fatal(err)
	}
	if got := l2.Next(); !slices.Equal(got.Inputs, want.Inputs) {
		t.Errorf("restored loader gave %v, want %v", got.Inputs, want.Inputs)
	}
	other, _ := NewPairLoader(ps, 2, 8, 0, true, 8)
	if err := other.Restore(st); err == nil {
		t.Error("a loader of another seed took the state")
	}
}

// Conversational pairs go through the chat template; only the final
// assistant turn (with its end-of-turn token) is trained on, not an
// assistant turn of the prompt.
func TestParseConversationalPairs(t *testing.T) {
	f := ByteFormat()
	f.Chat = chatML{}
	row := `{"prompt": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hey"}, {"role": "user", "content": "2+2?"}],` +
		` "chosen": [{"role": "assistant", "content": "4"}], "rejected": [{"role": "assistant", "content": "5"}]}`
	ps, err := ParsePairs("c.jsonl", strings.NewReader(row), f, 200)
	if err != nil {
		t.Fatal(err)
	}
	tok := NewByteTokenizer()
	for _, c := range []struct {
		e       Example
		targets string
	}{{ps[0].Chosen, "4<|im_end|>"}, {ps[0].Rejected, "5<|im_end|>"}} {
		var got []int
		for i, on := range c.e.Target {
			if on {
				got = append(got, c.e.IDs[i])
			}
		}
		text := tok.Decode(got)
		if !strings.HasPrefix(text, c.targets) || len(text) > len(c.targets)+1 {
			t.Errorf("targets %q, want %q (then at most the newline)", text, c.targets)
		}
	}
	for _, c := range []struct{ row, want string }{
		{`{"prompt": [{"role": "user", "content": "a"}], "chosen": "b", "rejected": [{"role": "assistant", "content": "c"}]}`, "all strings or all message lists"},
		{`{"prompt": [{"role": "user", "content": "a"}], "chosen": [{"role": "user", "content": "b"}], "rejected": [{"role": "assistant", "content": "c"}]}`, "one assistant message"},
		{`{"prompt": [{"role": "user", "content": "a"}], "chosen": [{"role": "assistant", "content": "b"}], "rejected": [{"role": "assistant", "content": "b"}]}`, "the same"},
	} {
		if _, err := ParsePairs("c.jsonl", strings.NewReader(c.row), f, 200); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.row, err, c.want)
		}
	}
}
