package tokenizer

import (
	"strings"
	"testing"
)

// benchNames are the tokenizers of the benchmarks, as in
// `node scripts/gen_tokenizer_fixtures.js bench`.
var benchNames = []string{"llama3", "qwen3", "llama2", "deepseek_v3"}

// BenchmarkEncode encodes the ~1 MB document in one call.
func BenchmarkEncode(b *testing.B) {
	doc := document(b)
	for _, name := range benchNames {
		b.Run(name, func(b *testing.B) {
			tok := fixtureTokenizer(b, name)
			mustEncode(b, tok, doc, false)
			b.SetBytes(int64(len(doc)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				mustEncode(b, tok, doc, false)
			}
		})
	}
}

// BenchmarkEncodeLines encodes the document's lines one call each.
func BenchmarkEncodeLines(b *testing.B) {
	doc := document(b)
	lines := strings.Split(doc, "\n")
	for _, name := range benchNames {
		b.Run(name, func(b *testing.B) {
			tok := fixtureTokenizer(b, name)
			b.SetBytes(int64(len(doc)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, l := range lines {
					mustEncode(b, tok, l, false)
				}
			}
		})
	}
}

// BenchmarkEncodeBatch encodes the document's lines on two goroutines.
func BenchmarkEncodeBatch(b *testing.B) {
	doc := document(b)
	lines := strings.Split(doc, "\n")
	for _, name := range benchNames {
		b.Run(name, func(b *testing.B) {
			tok := fixtureTokenizer(b, name)
			b.SetBytes(int64(len(doc)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				mustEncodeBatch(b, tok, lines, false, 2)
			}
		})
	}
}
