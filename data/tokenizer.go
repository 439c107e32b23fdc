package data

// IgnoreIndex is the target value of a position that contributes no loss:
// padding, prompt tokens and tokens cut off by truncation.
const IgnoreIndex = -100

// Tokenizer maps text to token ids and back.
type Tokenizer interface {
	// Encode returns the ids of s, without adding BOS or EOS, and each
	// token's byte range in s. Special tokens written in s are recognized
	// as Hugging Face tokenizers recognize them (the byte tokenizer has
	// none that text can name). An error is the tokenizer's own fault (a
	// regex of its file that ran past its time budget), not the text's.
	Encode(s string) ([]int, []Span, error)
	// EncodeIDs is Encode's ids alone, in less memory.
	EncodeIDs(s string) ([]int, error)
	// Decode returns the text of ids. Special tokens are dropped.
	Decode(ids []int) string
	// VocabSize is the number of ids, specials included.
	VocabSize() int
	// BOS is the id a sequence starts with, -1 when the model adds none;
	// EOS ends a document, -1 for none; PAD fills padding.
	BOS() int
	EOS() int
	PAD() int
	// Name identifies the tokenizer in logs and checkpoints.
	Name() string
}

// Byte tokenizer ids: 0..255 are raw bytes, then the specials.
const (
	byteBOS   = 256
	byteEOS   = 257
	bytePAD   = 258
	byteVocab = 259
)

// ByteTokenizer encodes text as its UTF-8 bytes: ids 0..255 are byte values,
// 256 is BOS, 257 is EOS and 258 is PAD, for a vocabulary of 259. It needs no
// vocabulary files, which makes it the tokenizer of tests and of models
// trained from scratch. The zero value is ready to use.
type ByteTokenizer struct{}

// NewByteTokenizer returns a ByteTokenizer.
func NewByteTokenizer() *ByteTokenizer { return &ByteTokenizer{} }

// Encode returns one id per byte of s.
func (*ByteTokenizer) Encode(s string) ([]int, []Span, error) {
	ids, spans := make([]int, len(s)), make([]Span, len(s))
	for i := 0; i < len(s); i++ {
		ids[i], spans[i] = int(s[i]), Span{i, i + 1}
	}
	return ids, spans, nil
}

// EncodeIDs returns one id per byte of s.
func (*ByteTokenizer) EncodeIDs(s string) ([]int, error) {
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int(s[i])
	}
	return ids, nil
}

// Decode returns the bytes named by ids. Special tokens (BOS, EOS, PAD) and
// ids outside [0, 259) are dropped rather than reported, because Decode is
// used on model samples, which may contain anything. The result is not
// necessarily valid UTF-8: a sample cut mid-rune keeps its partial bytes.
func (*ByteTokenizer) Decode(ids []int) string {
	b := make([]byte, 0, len(ids))
	for _, id := range ids {
		if id >= 0 && id < 256 {
			b = append(b, byte(id))
		}
	}
	return string(b)
}

// VocabSize returns 259.
func (*ByteTokenizer) VocabSize() int { return byteVocab }

// BOS returns 256.
func (*ByteTokenizer) BOS() int { return byteBOS }

// EOS returns 257.
func (*ByteTokenizer) EOS() int { return byteEOS }

// PAD returns 258.
func (*ByteTokenizer) PAD() int { return bytePAD }

// Name returns "byte".
func (*ByteTokenizer) Name() string { return "byte" }
