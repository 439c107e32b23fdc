package tokenizer

import "unicode/utf8"

// span is a [start, end) byte range of the original input text.
type span struct{ start, end int32 }

// rc is one character of a transformation, as Hugging Face's
// NormalizedString::transform takes them: the new character and how it
// relates to the old ones (0: replaces one, +1: is inserted, -n: replaces one
// and removes n more).
type rc struct {
	r      rune
	change int
}

// nstr mirrors Hugging Face's NormalizedString: the normalized text of one
// piece of the input and, for each of its bytes, the range of the original
// input it came from. The offsets that Encode reports are computed from
// these alignments, so every operation here copies the crate's alignment
// rules exactly, including their quirks.
//
// Alignments are kept in absolute offsets of the whole input instead of the
// crate's offsets relative to each piece; the two are equivalent (the crate
// adds the piece's shift back at the end) except where the crate invents
// (0, 0), which is (shift, shift) here.
//
// A nil align means the identity: s is the input bytes at [shift,
// shift+len(s)) and each byte aligns with the character that holds it. Most
// pieces stay in that form, which spares a slice of 8 bytes per input byte.
type nstr struct {
	s     string
	align []span
	shift int
	// raw marks a piece that the ByteLevel pre-tokenizer hands to the
	// model as bytes (see byteLevelPreTokenizer).
	raw bool
}

// runeBounds returns the start and end of the UTF-8 sequence holding s[i].
func runeBounds(s string, i int) (int, int) {
	start := i
	for start > 0 && start > i-3 && !utf8.RuneStart(s[start]) {
		start--
	}
	_, size := utf8.DecodeRuneInString(s[start:])
	if start+size <= i { // i was a stray continuation byte
		return i, i + 1
	}
	return start, start + size
}

func (n *nstr) alignAt(i int) span {
	if n.align != nil {
		return n.align[i]
	}
	a, b := runeBounds(n.s, i)
	return span{int32(n.shift + a), int32(n.shift + b)}
}

// materialize turns an identity nstr into one with explicit alignments,
// before an operation that changes the text.
func (n *nstr) materialize() {
	if n.align != nil {
		return
	}
	al := make([]span, len(n.s))
	for i := 0; i < len(n.s); {
		_, size := utf8.DecodeRuneInString(n.s[i:])
		sp := span{int32(n.shift + i), int32(n.shift + i + size)}
		for k := 0; k < size; k++ {
			al[i+k] = sp
		}
		i += size
	}
	n.align = al
}

// offsets converts a token's [p, q) range of n.s into input offsets, as
// PreTokenizedString::into_encoding does.
func (n *nstr) offsets(p, q int) (int, int) {
	if p >= q {
		// The crate keeps an empty range as it is, relative to the piece.
		return n.shift + p, n.shift + q
	}
	if q > len(n.s) {
		// Out of range (only a byte fallback of a prefixed piece gets
		// here): the crate keeps the token's own offsets.
		return p, q
	}
	return int(n.alignAt(p).start), int(n.alignAt(q - 1).end)
}

// slice returns the piece n.s[a:b] (Range::Normalized), keeping alignments.
func (n *nstr) slice(a, b int) nstr {
	if n.align == nil {
		return nstr{s: n.s[a:b], shift: n.shift + a}
	}
	if a == b {
		return nstr{s: "", align: []span{}, shift: n.shift + a}
	}
	return nstr{s: n.s[a:b], align: n.align[a:b], shift: int(n.align[a].start)}
}

// transform is NormalizedString::transform_range over the whole text
// (Range::Original(..)), with dest the new characters.
func (n *nstr) transform(dest []rc, initialOffset int) {
	n.materialize()
	// convert_offsets(Range::Original(..)) starts at the first byte with a
	// non-empty alignment.
	start := 0
	for start < len(n.s) && n.align[start].start == n.align[start].end {
		start++
	}
	n.transformRange(start, len(n.s), dest, initialOffset)
}

// transformRange is NormalizedString::transform_range over normalized bytes
// [start, end).
func (n *nstr) transformRange(start, end int, dest []rc, initialOffset int) {
	n.materialize()
	buf := make([]byte, 0, len(n.s)+len(dest))
	al := make([]span, 0, len(n.s)+len(dest))
	buf = append(buf, n.s[:start]...)
	al = append(al, n.align[:start]...)
	buf, al = n.appendTransformed(buf, al, start, end, dest, initialOffset)
	buf = append(buf, n.s[end:]...)
	al = append(al, n.align[end:]...)
	n.s = string(buf)
	n.align = al
}

// appendTransformed appends to buf and al the text and alignments that
// transform_range makes of [start, end) with dest.
func (n *nstr) appendTransformed(buf []byte, al []span, start, end int, dest []rc, initialOffset int) ([]byte, []span) {
	old := n.s[start:end]
	pos := 0 // next unread byte of old
	next := func() int {
		if pos >= len(old) {
			return 0
		}
		_, size := utf8.DecodeRuneInString(old[pos:])
		pos += size
		return size
	}
	offset := start
	for k := 0; k < initialOffset; k++ {
		offset += next()
	}
	var enc [4]byte
	for _, d := range dest {
		idx := offset
		var a span
		if d.change > 0 {
			if idx < 1 {
				a = span{int32(n.shift), int32(n.shift)}
			} else {
				a = n.align[idx-1]
			}
		} else if idx < len(n.align) {
			a = n.align[idx]
		} else if len(n.align) > 0 {
			// The crate would index out of bounds here; keep the last.
			a = n.align[len(n.align)-1]
		}
		if d.change <= 0 {
			offset += next()
		}
		for k := 0; k < -d.change; k++ {
			offset += next()
		}
		w := utf8.EncodeRune(enc[:], d.r)
		buf = append(buf, enc[:w]...)
		for k := 0; k < w; k++ {
			al = append(al, a)
		}
	}
	return buf, al
}

// prepend is NormalizedString::prepend: the new characters align with the
// first character of the text. An empty text is left alone.
func (n *nstr) prepend(p string) {
	if n.s == "" || p == "" {
		return
	}
	n.materialize()
	first := n.align[0]
	al := make([]span, len(p), len(p)+len(n.align))
	for i := range al {
		al[i] = first
	}
	n.align = append(al, n.align...)
	n.s = p + n.s
}

// replace is NormalizedString::replace: each match is replaced by content,
// whose characters all align with the last byte of the match.
func (n *nstr) replace(ms []match, content string) {
	any := false
	for _, m := range ms {
		if m.isMatch {
			any = true
			break
		}
	}
	if !any {
		return
	}
	n.materialize()
	buf := make([]byte, 0, len(n.s)+len(n.s)/2)
	al := make([]span, 0, len(n.s)+len(n.s)/2)
	last := 0
	for _, m := range ms {
		if !m.isMatch {
			continue
		}
		buf = append(buf, n.s[last:m.start]...)
		al = append(al, n.align[last:m.start]...)
		var a span
		if m.end < 1 {
			a = span{int32(n.shift), int32(n.shift)}
		} else {
			a = n.align[m.end-1]
		}
		buf = append(buf, content...)
		for k := 0; k < len(content); k++ {
			al = append(al, a)
		}
		last = m.end
	}
	buf = append(buf, n.s[last:]...)
	al = append(al, n.align[last:]...)
	n.s = string(buf)
	n.align = al
}

// match is one piece of a text as Pattern::find_matches returns them: the
// pieces cover the text, in order, and isMatch tells matches from the gaps.
type match struct {
	start, end int
	isMatch    bool
}

// splitBehavior is SplitDelimiterBehavior.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var behaviorNames = map[string]splitBehavior{
	"Removed":            behaviorRemoved,
	"Isolated":           behaviorIsolated,
	"MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext":     behaviorMergedWithNext,
	"Contiguous":         behaviorContiguous,
}

// applyBehavior is the body of NormalizedString::split: it turns matches
// into the ranges to keep. ms is reused as the result's storage.
func applyBehavior(ms []match, b splitBehavior) []match {
	out := ms[:0]
	switch b {
	case behaviorIsolated:
		for _, m := range ms {
			out = append(out, match{m.start, m.end, false})
		}
	case behaviorRemoved:
		for _, m := range ms {
			if !m.isMatch {
				out = append(out, m)
			}
		}
	case behaviorContiguous:
		prev := false
		for _, m := range ms {
			if m.isMatch == prev && len(out) > 0 {
				out[len(out)-1].end = m.end
			} else {
				out = append(out, match{m.start, m.end, false})
			}
			prev = m.isMatch
		}
	case behaviorMergedWithPrevious:
		prev := false
		for _, m := range ms {
			if m.isMatch && !prev && len(out) > 0 {
				out[len(out)-1].end = m.end
			} else {
				out = append(out, match{m.start, m.end, false})
			}
			prev = m.isMatch
		}
	case behaviorMergedWithNext:
		// The crate folds from the end; do the same into a reversed list.
		rev := make([]match, 0, len(ms))
		prev := false
		for i := len(ms) - 1; i >= 0; i-- {
			m := ms[i]
			if m.isMatch && !prev && len(rev) > 0 {
				rev[len(rev)-1].start = m.start
			} else {
				rev = append(rev, match{m.start, m.end, false})
			}
			prev = m.isMatch
		}
		for i := len(rev) - 1; i >= 0; i-- {
			out = append(out, rev[i])
		}
	}
	return out
}
