package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// normalizer changes a piece of text in place, keeping its alignments.
type normalizer interface {
	// normalize may search with a regex, within b's time budget.
	normalize(n *nstr, b *matchBudget)
}

type seqNormalizer []normalizer

func (s seqNormalizer) normalize(n *nstr, b *matchBudget) {
	for _, x := range s {
		x.normalize(n, b)
	}
}

type prependNormalizer struct{ prepend string }

func (p prependNormalizer) normalize(n *nstr, _ *matchBudget) { n.prepend(p.prepend) }

type replaceNormalizer struct {
	pat     pattern
	content string
}

func (r replaceNormalizer) normalize(n *nstr, b *matchBudget) {
	if n.s == "" {
		return
	}
	n.replace(r.pat.findMatches(nil, n.s, b), r.content)
}

type unicodeNormalizer struct{ form normForm }

func (u unicodeNormalizer) normalize(n *nstr, _ *matchBudget) { unicodeNormalize(n, u.form) }

// preTokenizer splits a piece into pieces, handing each non-empty one to
// emit in order. A regex searches within b's time budget.
type preTokenizer interface {
	split(n nstr, b *matchBudget, emit func(nstr))
}

// emitSplits slices n at the ranges kept by a split behavior, skipping
// empty ones as PreTokenizedString::split does.
func emitSplits(n *nstr, ms []match, b splitBehavior, emit func(nstr)) {
	for _, m := range applyBehavior(ms, b) {
		if m.end > m.start {
			emit(n.slice(m.start, m.end))
		}
	}
}

type splitPreTokenizer struct {
	pat      pattern
	behavior splitBehavior
}

func (p splitPreTokenizer) split(n nstr, b *matchBudget, emit func(nstr)) {
	emitSplits(&n, p.pat.findMatches(nil, n.s, b), p.behavior, emit)
}

type digitsPreTokenizer struct{ individual bool }

// isNumeric is Rust's char::is_numeric (Unicode 16.0, like hfNumber).
func isNumeric(r rune) bool {
	if r < 128 {
		return r >= '0' && r <= '9'
	}
	return unicode.Is(hfNumber, r)
}

func (p digitsPreTokenizer) split(n nstr, _ *matchBudget, emit func(nstr)) {
	behavior := behaviorContiguous
	if p.individual {
		behavior = behaviorIsolated
	}
	emitSplits(&n, runePattern(isNumeric).findMatches(nil, n.s, nil), behavior, emit)
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

type metaspacePreTokenizer struct {
	replacement rune
	rep         string
	scheme      prependScheme
	splitPieces bool
}

func (p metaspacePreTokenizer) split(n nstr, _ *matchBudget, emit func(nstr)) {
	n.replace(runePattern(func(r rune) bool { return r == ' ' }).findMatches(nil, n.s, nil), p.rep)
	switch p.scheme {
	case prependAlways:
		if !strings.HasPrefix(n.s, p.rep) {
			n.prepend(p.rep)
		}
	case prependFirst:
		if !strings.HasPrefix(n.s, p.rep) && n.shift == 0 {
			n.prepend(p.rep)
		}
	}
	if !p.splitPieces {
		if n.s != "" {
			emit(n)
		}
		return
	}
	rep := p.replacement
	emitSplits(&n, runePattern(func(r rune) bool { return r == rep }).findMatches(nil, n.s, nil), behaviorMergedWithNext, emit)
}

// byteLevelPreTokenizer is the ByteLevel pre-tokenizer. When raw is set
// (it is the last pre-tokenizer and the model can work on bytes), pieces
// go to the model as their bytes, flagged raw, instead of being rewritten
// into GPT-2's printable characters: the tokens and offsets are the same
// and the rewriting is most of the cost of encoding.
type byteLevelPreTokenizer struct {
	addPrefixSpace bool
	useRegex       bool
	raw            bool
	regex          pattern
}

func (p *byteLevelPreTokenizer) split(n nstr, b *matchBudget, emit func(nstr)) {
	if p.addPrefixSpace && !strings.HasPrefix(n.s, " ") {
		n.prepend(" ")
	}
	out := func(m nstr) {
		if p.raw {
			m.raw = true
		} else {
			byteLevelMap(&m)
		}
		emit(m)
	}
	if !p.useRegex {
		if n.s != "" {
			out(n)
		}
		return
	}
	emitSplits(&n, p.regex.findMatches(nil, n.s, b), behaviorIsolated, out)
}

// byteLevelMap rewrites each byte as its GPT-2 character.
func byteLevelMap(n *nstr) {
	dest := make([]rc, 0, len(n.s))
	for _, r := range n.s {
		var buf [4]byte
		size := utf8.EncodeRune(buf[:], r)
		for k := 0; k < size; k++ {
			ch := 0
			if k > 0 {
				ch = 1
			}
			dest = append(dest, rc{byteChar[buf[k]], ch})
		}
	}
	n.transform(dest, 0)
}

// byteChar is GPT-2's bytes_to_unicode table and charByte its inverse.
var byteChar, charByte = func() ([256]rune, map[rune]byte) {
	var t [256]rune
	m := make(map[rune]byte, 256)
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
		m[t[b]] = byte(b)
	}
	return t, m
}()

// decoder is one step of a decoder chain: Decoder::decode_chain.
type decoder interface {
	decodeChain(tokens []string) []string
}

type seqDecoder []decoder

func (s seqDecoder) decodeChain(t []string) []string {
	for _, d := range s {
		t = d.decodeChain(t)
	}
	return t
}

type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) []string {
	var b []byte
	for _, t := range tokens {
		start := len(b)
		ok := true
		for _, r := range t {
			c, in := charByte[r]
			if !in {
				ok = false
				break
			}
			b = append(b, c)
		}
		if !ok {
			b = append(b[:start], t...)
		}
	}
	return []string{lossyUTF8(b)}
}

type byteFallbackDecoder struct{}

func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(t[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

func (byteFallbackDecoder) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			// One replacement character per byte, as the crate does.
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := byteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		chars := []rune(t)
		startCut := 0
		for k := 0; k < d.start && k < len(chars); k++ {
			if chars[k] != d.content {
				break
			}
			startCut = k + 1
		}
		stopCut := len(chars)
		for k := 0; k < d.stop; k++ {
			idx := len(chars) - k - 1
			if idx < 0 || chars[idx] != d.content {
				break
			}
			stopCut = idx
		}
		if stopCut < startCut {
			stopCut = startCut
		}
		out[i] = string(chars[startCut:stopCut])
	}
	return out
}

type replaceDecoder struct {
	pat     pattern
	content string
}

func (d replaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	var ms []match
	for i, t := range tokens {
		// parsing refuses a regex here: a decoder has no time budget
		ms = d.pat.findMatches(ms[:0], t, nil)
		var sb strings.Builder
		for _, m := range ms {
			if m.isMatch {
				sb.WriteString(d.content)
			} else {
				sb.WriteString(t[m.start:m.end])
			}
		}
		out[i] = sb.String()
	}
	return out
}

type metaspaceDecoder struct {
	replacement rune
	scheme      prependScheme
}

func (d metaspaceDecoder) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var sb strings.Builder
		for _, r := range t {
			if r == d.replacement {
				if i == 0 && d.scheme != prependNever {
					continue
				}
				sb.WriteByte(' ')
			} else {
				sb.WriteRune(r)
			}
		}
		out[i] = sb.String()
	}
	return out
}

// lossyUTF8 is Rust's String::from_utf8_lossy: each maximal prefix of an
// invalid sequence becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r != utf8.RuneError || size > 1 {
			sb.Write(b[:size])
			b = b[size:]
			continue
		}
		sb.WriteString("\uFFFD")
		b = b[invalidPrefixLen(b):]
	}
	return sb.String()
}

// invalidPrefixLen returns how many bytes of b (which starts with an
// invalid sequence) one replacement character stands for: the lead byte
// and the continuation bytes that could still have followed it, per the
// Unicode "maximal subpart" practice that Rust and Python follow.
func invalidPrefixLen(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 {
			if x < lo || x > hi {
				return n
			}
		} else if x < 0x80 || x > 0xBF {
			return n
		}
		n++
	}
	return n
}

// sanitize returns s with invalid UTF-8 replaced as lossyUTF8 does, and
// for each byte of the result the offset in s it comes from (nil when s is
// valid).
func sanitize(s string) (string, []int) {
	if utf8.ValidString(s) {
		return s, nil
	}
	var sb strings.Builder
	var from []int
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || size > 1 {
			sb.WriteString(s[i : i+size])
			for k := 0; k < size; k++ {
				from = append(from, i+k)
			}
			i += size
			continue
		}
		n := invalidPrefixLen([]byte(s[i:min(len(s), i+4)]))
		sb.WriteString("\uFFFD")
		from = append(from, i, i, i)
		i += n
	}
	from = append(from, len(s))
	return sb.String(), from
}
