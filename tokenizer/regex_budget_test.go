package tokenizer

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A Split pattern that backtracks catastrophically used to hang Encode
// (regexp2 ran with no timeout: 2 s at 24 characters, past a minute at
// 34). Now the search stops when the text's time budget is spent, and the
// error names the file, the pattern and where it is.
func TestCatastrophicRegexFailsInBoundedTime(t *testing.T) {
	for _, tc := range []struct{ name, json, path string }{
		{"split pre-tokenizer", strings.Replace(minimalJSON,
			`"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`,
			`"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]}`, 1),
			"$.pre_tokenizer.pretokenizers[0].pattern.Regex"},
		{"replace normalizer", strings.Replace(minimalJSON, `"normalizer": {"type": "NFC"}`,
			`"normalizer": {"type": "Replace", "pattern": {"Regex": "(a|aa)+$"}, "content": "b"}`, 1),
			"$.normalizer.pattern.Regex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Parse("hostile.json", []byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := tok.Encode(strings.Repeat("a", 60)+"!", false)
				done <- err
			}()
			select {
			case err = <-done:
			case <-time.After(2 * time.Minute):
				t.Fatal("Encode did not return: the regex runs unbounded")
			}
			var te *RegexTimeoutError
			if !errors.As(err, &te) {
				t.Fatalf("Encode: %v, want a *RegexTimeoutError", err)
			}
			for _, want := range []string{"tokenizer: hostile.json: ", tc.path + ": the regex ", te.Pattern, "backtracks catastrophically"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			// the same tokenizer still encodes text its pattern is fast on
			if _, err := tok.Encode("ab ab", false); err != nil {
				t.Errorf("Encode after a timeout: %v", err)
			}
		})
	}
}

// A Replace decoder with a regex is refused: Decode has no error to
// report a regex that runs past its budget with.
func TestRegexReplaceDecoderRefused(t *testing.T) {
	_, err := Parse("test.json", []byte(strings.Replace(minimalJSON, `"decoder": {"type": "ByteLevel"}`,
		`"decoder": {"type": "Replace", "pattern": {"Regex": "(a+)+$"}, "content": "b"}`, 1)))
	if want := `$.decoder.pattern: a Regex pattern in a Replace decoder is not supported`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Parse: %v, want %q", err, want)
	}
}

// BenchmarkRegexPatterns reports regexp2's time per byte on the real
// tokenizers' patterns (which normally run on hand-written matchers) over
// the corpus's 1 MB document, against matchTimePerByte, the budget.
func BenchmarkRegexPatterns(b *testing.B) {
	doc := document(b)
	for _, tc := range []struct{ name, expr string }{
		{"gpt2", gpt2Regex}, {"llama3", llama3Regex}, {"qwen2", qwen2Regex},
		{"deepseek-digits", deepseekDigitsRegex}, {"deepseek-cjk", deepseekCJKRegex}, {"deepseek-words", deepseekWordsRegex},
		{"synth-suffix", `[\p{L}\p{N}]+|[^\p{L}\p{N}\s]+`},
	} {
		p, err := compileRegex(tc.expr, "$.bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for range b.N {
				budget := newMatchBudget(len(doc))
				p.findMatches(nil, doc, budget)
				if budget.err != nil {
					b.Fatal(budget.err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(doc)), "ns/byte")
		})
	}
}
