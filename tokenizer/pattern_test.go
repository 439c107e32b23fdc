package tokenizer

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
)

func matchesString(s string, ms []match) string {
	var parts []string
	for _, m := range ms {
		flag := ""
		if m.isMatch {
			flag = "*"
		}
		parts = append(parts, fmt.Sprintf("%s%q", flag, s[m.start:m.end]))
	}
	return strings.Join(parts, " ")
}

// TestFastPatternsMatchRegexp2 runs the hand-written matchers and regexp2
// on the same patterns over the whole corpus and some more strings.
func TestFastPatternsMatchRegexp2(t *testing.T) {
	texts := corpus(t)
	for _, expr := range []string{gpt2Regex, llama3Regex, qwen2Regex, deepseekDigitsRegex, deepseekCJKRegex, deepseekWordsRegex} {
		fast, err := newPattern(expr, "$.test")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := fast.(*regexPattern); ok {
			t.Fatalf("%s has no fast matcher", expr)
		}
		slow, err := compileRegex(expr, "$.test")
		if err != nil {
			t.Fatal(err)
		}
		extra := []string{"", " ", "  x", "\n\n", " \n x", "a\u3000\u3000b", "\u00a0\u00a0", "x\r\n\r\n  y",
			"1234567", "١٢٣٤", " 12", "5th 12ab", "(Hello) 'sx", " \u0301x", "\u200dx", "\x00\x01a", "日本語とカタカナ漢字",
			"a\u0301\u0301 \u0301", "$$$x", " ++\r\n", "x\u00a0\u00a0y", "\u2028\n", "'sx", "it'ſ", "'Re", "'LL", "'lL", "''s", "\t\tword", "\u0085x", "a \u2003 b"}
		diffs := 0
		for _, s := range append(extra, texts...) {
			if hasUnicode16(s) {
				continue // regexp2 has Go's Unicode 15.0 tables
			}
			got := matchesString(s, fast.findMatches(nil, s, nil))
			want := matchesString(s, slow.findMatches(nil, s, nil))
			if got == want {
				continue
			}
			diffs++
			if diffs <= 5 {
				t.Errorf("pattern %.30q on %q:\n fast %s\n want %s", expr, s, got, want)
			}
		}
		if diffs > 0 {
			t.Errorf("pattern %.30q: %d strings differ", expr, diffs)
		}
	}
}

// hasUnicode16 reports whether s has characters that Go's unicode tables
// (15.0) do not have but Hugging Face's (16.0) classify.
func hasUnicode16(s string) bool {
	for _, r := range s {
		known := unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs, unicode.Zl, unicode.Zp, unicode.Cc, unicode.Cf, unicode.Co)
		if !known && unicode.In(r, hfLetter, hfNumber, hfSpace, hfMark, hfPunctSymbol) {
			return true
		}
	}
	return false
}

func TestSplitBehaviors(t *testing.T) {
	s := "a-b--c-"
	cases := []struct {
		b    splitBehavior
		want string
	}{
		{behaviorRemoved, `"a" "b" "c"`},
		{behaviorIsolated, `"a" "-" "b" "-" "-" "c" "-"`},
		{behaviorMergedWithPrevious, `"a-" "b-" "-" "c-"`},
		{behaviorMergedWithNext, `"a" "-b" "-" "-c" "-"`},
		{behaviorContiguous, `"a" "-" "b" "--" "c" "-"`},
	}
	for _, c := range cases {
		n := nstr{s: s}
		var got []string
		emitSplits(&n, literalPattern{"-"}.findMatches(nil, s, nil), c.b, func(p nstr) { got = append(got, fmt.Sprintf("%q", p.s)) })
		if strings.Join(got, " ") != c.want {
			t.Errorf("behavior %d: %s, want %s", c.b, strings.Join(got, " "), c.want)
		}
	}
}

func TestRegexEmptyMatches(t *testing.T) {
	// Oniguruma's find_iter refuses an empty match where the previous
	// match ended.
	p, err := compileRegex(`x*`, "$.test")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := matchesString("axxb", p.findMatches(nil, "axxb", nil)), `*"" "a" *"xx" "b" *""`; got != want {
		t.Errorf("x* on axxb: %s, want %s", got, want)
	}
}

// TestKnownPatternsAreFast checks that the real tokenizers' patterns are
// recognized, so that they run on the fast matchers.
func TestKnownPatternsAreFast(t *testing.T) {
	for _, name := range []string{"llama3", "llama3_1", "qwen3", "deepseek_v3", "claude"} {
		tok := fixtureTokenizer(t, name)
		n := 0
		for _, p := range tok.pre {
			var pat pattern
			switch p := p.(type) {
			case splitPreTokenizer:
				pat = p.pat
			case *byteLevelPreTokenizer:
				if !p.useRegex {
					continue
				}
				pat = p.regex
			default:
				continue
			}
			n++
			if _, slow := pat.(*regexPattern); slow {
				t.Errorf("%s: a pattern runs on regexp2", name)
			}
		}
		if n == 0 {
			t.Errorf("%s: no pattern found", name)
		}
	}
}
