package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mixtune/mixtune/data"
	"golang.org/x/text/unicode/norm"
)

func TestLossyUTF8(t *testing.T) {
	// Expected values from Python's bytes.decode("utf-8", "replace"),
	// which replaces as Rust's String::from_utf8_lossy does.
	cases := []struct{ in, want string }{
		{"\xe2\x82", "\uFFFD"},
		{"\xf0\x80\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"a\xffb", "a\uFFFDb"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xe0\x9f\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xf1\x80\x80", "\uFFFD"},
		{"\xe2\x82\xac\xe2", "€\uFFFD"},
		{"valid é", "valid é"},
	}
	for _, c := range cases {
		if got := lossyUTF8([]byte(c.in)); got != c.want {
			t.Errorf("lossyUTF8(%q) = %q, want %q", c.in, got, c.want)
		}
		if got, _ := sanitize(c.in); got != c.want {
			t.Errorf("sanitize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestInvalidUTF8 checks that invalid bytes are encoded as U+FFFD would
// be, with offsets into the caller's bytes.
func TestInvalidUTF8(t *testing.T) {
	for _, name := range []string{"llama3", "llama2", "qwen3", "tiny-byte"} {
		tok := fixtureTokenizer(t, name)
		in := "a\xffb \xe2\x82c\xf0\x9f"
		replaced := "a\uFFFDb \uFFFDc\uFFFD"
		got, want := mustEncode(t, tok, in, false), mustEncode(t, tok, replaced, false)
		if !slices.Equal(got.IDs, want.IDs) {
			t.Errorf("%s: ids %v, want those of %q: %v", name, got.IDs, replaced, want.IDs)
		}
		// Map the offsets of the valid text back by hand.
		back := map[int]int{0: 0, 1: 1, 4: 2, 5: 3, 6: 4, 9: 6, 10: 7, 13: 9}
		for i, o := range want.Offsets {
			exp := [2]int{back[o[0]], back[o[1]]}
			if got.Offsets[i] != exp {
				t.Errorf("%s: token %d offsets %v, want %v", name, i, got.Offsets[i], exp)
			}
		}
	}
}

func TestEncodeBatchSameForAnyWorkers(t *testing.T) {
	texts := corpus(t)[:600]
	for _, name := range []string{"llama3", "qwen3", "llama2"} {
		tok := fixtureTokenizer(t, name)
		one := mustEncodeBatch(t, tok, texts, true, 1)
		for _, w := range []int{2, 7} {
			many := mustEncodeBatch(t, tok, texts, true, w)
			for i := range texts {
				if !slices.Equal(one[i].IDs, many[i].IDs) || !slices.Equal(one[i].Offsets, many[i].Offsets) || !slices.Equal(one[i].Special, many[i].Special) {
					t.Fatalf("%s: string %d differs with %d workers", name, i, w)
				}
			}
		}
	}
}

// TestTinyByteIsTheByteTokenizer checks that the tiny-byte tokenizer.json
// encodes as mixtune's byte tokenizer (data.ByteTokenizer) and that its
// specials are 256, 257 and 258.
func TestTinyByteIsTheByteTokenizer(t *testing.T) {
	tok := fixtureTokenizer(t, "tiny-byte")
	var bt data.ByteTokenizer
	n := 0
	for _, s := range corpus(t) {
		if strings.Contains(s, "<|im_") || strings.Contains(s, "<|endoftext|>") {
			continue
		}
		n++
		enc := mustEncode(t, tok, s, false)
		ids, spans, _ := bt.Encode(s)
		if !slices.Equal(enc.IDs, ids) {
			t.Fatalf("%.40q: ids %v, byte tokenizer %v", s, enc.IDs, ids)
		}
		for i, sp := range spans {
			// HF gives byte tokens the range of their whole character.
			a, b := runeBounds(s, sp.Start)
			if enc.Offsets[i] != [2]int{a, b} {
				t.Fatalf("%.40q: token %d offsets %v, want %v", s, i, enc.Offsets[i], [2]int{a, b})
			}
		}
		if utf8.ValidString(s) && tok.Decode(ids, true) != bt.Decode(ids) {
			t.Fatalf("%.40q: decodings differ", s)
		}
	}
	if n < 2000 {
		t.Fatalf("only %d strings checked", n)
	}
	enc := mustEncode(t, tok, "<|im_start|>user\nhi<|im_end|>\n<|endoftext|>", true)
	if want := []int{256, 256, 117, 115, 101, 114, 10, 104, 105, 257, 10, 258}; !slices.Equal(enc.IDs, want) {
		t.Fatalf("chat text ids %v, want %v", enc.IDs, want)
	}
	if tok.VocabSize() != 259 || !tok.IsSpecial(258) || tok.IsSpecial(65) {
		t.Fatalf("VocabSize %d, specials %v", tok.VocabSize(), tok.SpecialTokens())
	}
	// A run of byte tokens that is not valid UTF-8 decodes to one U+FFFD
	// per byte, the valid ones included (ByteFallback), where the byte
	// tokenizer keeps the bytes.
	if got := tok.Decode([]int{104, 0xE2, 0x82, 105}, true); got != "\uFFFD\uFFFD\uFFFD\uFFFD" {
		t.Fatalf("decode of a cut character: %q", got)
	}
}

func TestAPI(t *testing.T) {
	tok := fixtureTokenizer(t, "llama3_1")
	if tok.VocabSize() != 128256 {
		t.Errorf("VocabSize %d, want 128256", tok.VocabSize())
	}
	if id, ok := tok.TokenID("<|eot_id|>"); !ok || id != 128009 {
		t.Errorf("TokenID(<|eot_id|>) = %d, %v", id, ok)
	}
	if s, ok := tok.Token(128009); !ok || s != "<|eot_id|>" {
		t.Errorf("Token(128009) = %q, %v", s, ok)
	}
	if s, ok := tok.Token(9906); !ok || s != "Hello" {
		t.Errorf("Token(9906) = %q, %v", s, ok)
	}
	if _, ok := tok.Token(1 << 40); ok {
		t.Errorf("Token(1<<40) found")
	}
	if sp := tok.SpecialTokens(); len(sp) != 256 || sp[0] != "<|begin_of_text|>" {
		t.Errorf("SpecialTokens: %d, first %q", len(sp), sp[0])
	}
	if len(tok.Fingerprint()) != 64 || !strings.HasPrefix(tok.Name(), "llama3_1@") || strings.Contains(tok.Name(), fixtureTokenizer(t, "llama3").Fingerprint()[:16]) {
		t.Errorf("Name %q, Fingerprint %q", tok.Name(), tok.Fingerprint())
	}
	enc := mustEncode(t, tok, "Hi<|eot_id|>", true)
	if want := []bool{true, false, true}; !slices.Equal(enc.Special, want) {
		t.Errorf("Special %v, want %v", enc.Special, want)
	}
	if got := mustEncode(t, tok, "", false); got.IDs == nil || len(got.IDs) != 0 {
		t.Errorf("Encode(\"\") = %#v", got)
	}
}

// TestNFCOfNormalText checks what lets a normalized text skip the
// alignment-keeping NFC: on text that is already NFC the crate's
// decomposition and recomposition change nothing.
func TestNFCOfNormalText(t *testing.T) {
	n := 0
	for _, s := range corpus(t) {
		if !norm.NFC.IsNormalString(s) {
			continue
		}
		n++
		if !unchanged(s, recompose(decompose(s, false))) {
			t.Errorf("NFC changes the NFC text %.40q", s)
		}
		if norm.NFKC.IsNormalString(s) && !unchanged(s, recompose(decompose(s, true))) {
			t.Errorf("NFKC changes the NFKC text %.40q", s)
		}
		if norm.NFD.IsNormalString(s) && !unchanged(s, decompose(s, false)) {
			t.Errorf("NFD changes the NFD text %.40q", s)
		}
		if norm.NFKD.IsNormalString(s) && !unchanged(s, decompose(s, true)) {
			t.Errorf("NFKD changes the NFKD text %.40q", s)
		}
	}
	if n < 1000 {
		t.Fatalf("only %d NFC strings", n)
	}
}

func TestDecoders(t *testing.T) {
	cases := []struct {
		name string
		d    decoder
		in   []string
		want []string
	}{
		{"strip start", stripDecoder{' ', 2, 0}, []string{"   a ", " b", "c"}, []string{" a ", "b", "c"}},
		{"strip stop", stripDecoder{'x', 0, 2}, []string{"axxx", "", "x"}, []string{"ax", "", ""}},
		{"byte fallback", byteFallbackDecoder{}, []string{"<0x61>", "<0xC3>", "<0xA9>", "b", "<0xE2>", "<0x82>", "<0xZZ>"},
			[]string{"aé", "b", "\uFFFD", "\uFFFD", "<0xZZ>"}},
		// The crate drops every replacement character of the first token.
		{"metaspace", metaspaceDecoder{'▁', prependFirst}, []string{"▁a▁b", "▁c"}, []string{"ab", " c"}},
		{"metaspace never", metaspaceDecoder{'▁', prependNever}, []string{"▁a"}, []string{" a"}},
		{"byte level", byteLevelDecoder{}, []string{"Ġh", "Ã©", "â", "<|x|>"}, []string{" hé\uFFFD<|x|>"}},
		{"replace", replaceDecoder{literalPattern{"▁"}, " "}, []string{"▁a▁", "b"}, []string{" a ", "b"}},
	}
	for _, c := range cases {
		if got := c.d.decodeChain(c.in); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestUnicode9 checks that normalization uses Hugging Face's Unicode 9.0
// data, not x/text's newer one, where they differ.
func TestUnicode9(t *testing.T) {
	if ccc(0x1DF6) != 0 || ccc(0x301) != 230 {
		t.Errorf("ccc(U+1DF6) = %d (unassigned in 9.0: 0), ccc(U+0301) = %d", ccc(0x1DF6), ccc(0x301))
	}
	if _, ok := composePair(0x11935, 0x11930); ok {
		t.Errorf("U+11935 U+11930 composes, but only since Unicode 13.0")
	}
	if r, ok := composePair('e', 0x301); !ok || r != 'é' {
		t.Errorf("e + U+0301 = %q, %v", r, ok)
	}
	if got := string(decomposeRune(nil, 0x1F16C, true)); got != "\U0001F16C" {
		t.Errorf("NFKD(U+1F16C) = %q, but it has a decomposition only since Unicode 12.0", got)
	}
	if got := string(decomposeRune(nil, 0x1F16A, true)); got != "MC" {
		t.Errorf("NFKD(U+1F16A) = %q, want MC", got)
	}
}

// TestChunks checks when long words may be cut before "▁" (bpe.chunkSep)
// and that cutting gives the tokens of the whole word.
func TestChunks(t *testing.T) {
	if fixtureTokenizer(t, "llama2").model.chunkSep == "" {
		t.Errorf("llama2: chunks off")
	}
	for _, name := range []string{"llama3", "synth-suffix"} {
		if fixtureTokenizer(t, name).model.chunkSep != "" {
			t.Errorf("%s: chunks on", name)
		}
	}
	joined := strings.Replace(strings.Replace(minimalJSON, `"ab": 2}`, `"ab": 2, "▁": 3, "a▁": 4}`, 1), `"id": 3`, `"id": 5`, 1)
	tok, err := Parse("test.json", []byte(joined))
	if err != nil {
		t.Fatal(err)
	}
	if tok.model.chunkSep != "" {
		t.Errorf("a vocabulary with a▁ has chunks on")
	}
	llama := fixtureTokenizer(t, "llama2")
	other, err := Parse("llama2", fixtureJSON(t, "llama2"))
	if err != nil {
		t.Fatal(err)
	}
	whole := other.model
	whole.chunkSep = ""
	for _, s := range corpus(t)[:800] {
		n := nstr{s: s}
		llama.norm.normalize(&n, nil)
		var a, b []int
		llama.model.tokenize(n.s, false, func(id int32, p, q int) { a = append(a, int(id), p, q) })
		whole.tokenize(n.s, false, func(id int32, p, q int) { b = append(b, int(id), p, q) })
		if !slices.Equal(a, b) {
			t.Fatalf("%q: chunked %v, whole %v", s, a, b)
		}
	}
}
