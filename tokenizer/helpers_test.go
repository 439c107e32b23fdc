package tokenizer

import "testing"

// mustEncode is Encode for tests, whose tokenizers' patterns never run
// past their time budget.
func mustEncode(t testing.TB, tok *Tokenizer, s string, addSpecial bool) Encoding {
	t.Helper()
	e, err := tok.Encode(s, addSpecial)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func mustEncodeBatch(t testing.TB, tok *Tokenizer, texts []string, addSpecial bool, workers int) []Encoding {
	t.Helper()
	es, err := tok.EncodeBatch(texts, addSpecial, workers)
	if err != nil {
		t.Fatal(err)
	}
	return es
}
