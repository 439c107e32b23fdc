package data

import (
	"slices"
	"testing"
)

var _ Tokenizer = (*ByteTokenizer)(nil)

func TestByteTokenizerRoundTrip(t *testing.T) {
	tok := NewByteTokenizer()
	tests := []struct {
		name string
		text string
		ids  []int // nil: only check the round trip and the length
	}{
		{"empty", "", []int{}},
		{"ascii", "Hi!", []int{72, 105, 33}},
		{"two-byte rune", "é", []int{0xc3, 0xa9}},
		{"three-byte runes", "日本", []int{0xe6, 0x97, 0xa5, 0xe6, 0x9c, 0xac}},
		{"four-byte rune", "🎉", []int{0xf0, 0x9f, 0x8e, 0x89}},
		{"mixed", "naïve café, 東京 🚀\n\ttab", nil},
		{"invalid UTF-8 kept byte for byte", "a\xffb\xc3", []int{97, 0xff, 98, 0xc3}},
		{"NUL byte", "\x00", []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids, _, _ := tok.Encode(tt.text)
			if len(ids) != len(tt.text) {
				t.Fatalf("Encode(%q) has %d ids, want %d", tt.text, len(ids), len(tt.text))
			}
			if tt.ids != nil && !slices.Equal(ids, tt.ids) {
				t.Errorf("Encode(%q) = %v, want %v", tt.text, ids, tt.ids)
			}
			for _, id := range ids {
				if id < 0 || id > 255 {
					t.Errorf("Encode(%q) produced id %d outside the byte range", tt.text, id)
				}
			}
			if got := tok.Decode(ids); got != tt.text {
				t.Errorf("Decode(Encode(%q)) = %q", tt.text, got)
			}
		})
	}
}

func TestByteTokenizerSpecials(t *testing.T) {
	tok := NewByteTokenizer()
	if got := tok.VocabSize(); got != 259 {
		t.Errorf("VocabSize() = %d, want 259", got)
	}
	if tok.BOS() != 256 || tok.EOS() != 257 || tok.PAD() != 258 {
		t.Errorf("BOS, EOS, PAD = %d, %d, %d; want 256, 257, 258", tok.BOS(), tok.EOS(), tok.PAD())
	}
	if got := tok.Name(); got != "byte" {
		t.Errorf("Name() = %q, want %q", got, "byte")
	}
	tests := []struct {
		name string
		ids  []int
		want string
	}{
		{"specials dropped", []int{256, 104, 105, 257, 258}, "hi"},
		{"out of vocabulary dropped", []int{-1, 104, 259, 1000, -100, 105}, "hi"},
		{"partial rune kept", []int{0xe6, 0x97}, "\xe6\x97"},
		{"nil", nil, ""},
		{"only specials", []int{256, 257, 258}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tok.Decode(tt.ids); got != tt.want {
				t.Errorf("Decode(%v) = %q, want %q", tt.ids, got, tt.want)
			}
		})
	}
}
