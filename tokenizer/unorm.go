package tokenizer

import (
	"sort"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Unicode normalization with alignments, as the crate
// unicode-normalization-alignments (which Hugging Face tokenizers uses)
// produces it: the normalized characters and, for each, how it relates to
// the input characters. The offsets of tokens after an NFC or NFKC
// normalizer depend on these changes, so the decomposition buffer and the
// recomposition state machine below follow that crate step by step, and
// so do the character data (decompositions, combining classes,
// compositions): the crate's Unicode 9.0 tables, generated into
// unicode9_tables.go by gen_unicode9.go. golang.org/x/text/unicode/norm
// (Unicode 15) only finds the stretches of text that are already
// normalized, which both versions leave alone.

const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

// unicode9 is the crate's character data (Unicode 9.0, generated into
// unicode9_tables.go), as maps built on first use and only read after.
type unicode9 struct {
	ccc     map[rune]uint8
	compose map[[2]rune]rune
	canon   map[rune]string
	compat  map[rune]string
}

var unicode9Data = sync.OnceValue(func() *unicode9 {
	u := &unicode9{
		ccc:     make(map[rune]uint8, len(ccc9)),
		compose: make(map[[2]rune]rune, len(compositions9)),
		canon:   make(map[rune]string, len(canonical9)),
		compat:  make(map[rune]string, len(compatibility9)),
	}
	for _, e := range ccc9 {
		u.ccc[e.r] = e.c
	}
	for _, c := range compositions9 {
		u.compose[[2]rune{c[0], c[1]}] = c[2]
	}
	for _, e := range canonical9 {
		u.canon[e.r] = e.d
	}
	for _, e := range compatibility9 {
		u.compat[e.r] = e.d
	}
	return u
})

func ccc(r rune) uint8 {
	if r < 0x300 {
		return 0
	}
	return unicode9Data().ccc[r]
}

// decomposeRune appends the full canonical (or compatibility)
// decomposition of r, as the crate's decompose_canonical and
// decompose_compatible emit it.
func decomposeRune(dst []rune, r rune, compat bool) []rune {
	if r <= 0x7F {
		return append(dst, r)
	}
	if r >= hangulSBase && r < hangulSBase+hangulSCount {
		si := r - hangulSBase
		dst = append(dst, hangulLBase+si/hangulNCount, hangulVBase+(si%hangulNCount)/hangulTCount)
		if t := si % hangulTCount; t != 0 {
			dst = append(dst, hangulTBase+t)
		}
		return dst
	}
	u := unicode9Data()
	d, ok := "", false
	if compat {
		d, ok = u.compat[r]
	}
	if !ok {
		d, ok = u.canon[r]
	}
	if !ok {
		return append(dst, r)
	}
	for _, c := range d {
		dst = append(dst, c)
	}
	return dst
}

func composePair(a, b rune) (rune, bool) {
	if a >= hangulLBase && a < hangulLBase+hangulLCount && b >= hangulVBase && b < hangulVBase+hangulVCount {
		return hangulSBase + ((a-hangulLBase)*hangulVCount+(b-hangulVBase))*hangulTCount, true
	}
	if a >= hangulSBase && a < hangulSBase+hangulSCount && (a-hangulSBase)%hangulTCount == 0 &&
		b > hangulTBase && b < hangulTBase+hangulTCount {
		return a + (b - hangulTBase), true
	}
	r, ok := unicode9Data().compose[[2]rune{a, b}]
	return r, ok
}

type decItem struct {
	class  uint8
	r      rune
	change int
}

// decompose is the crate's Decompositions iterator, run to the end.
func decompose(s string, compat bool) []rc {
	out := make([]rc, 0, len(s)+8)
	var buf []decItem
	readyEnd := 0
	var tmp []rune
	sortPending := func() {
		p := buf[readyEnd:]
		sort.SliceStable(p, func(i, j int) bool { return p[i].class < p[j].class })
		readyEnd = len(buf)
	}
	for _, r := range s {
		tmp = decomposeRune(tmp[:0], r, compat)
		for i, d := range tmp {
			c := ccc(d)
			if c == 0 {
				sortPending()
			}
			ch := 1
			if i == 0 {
				ch = 0
			}
			buf = append(buf, decItem{c, d, ch})
		}
		if readyEnd > 0 {
			for _, it := range buf[:readyEnd] {
				out = append(out, rc{it.r, it.change})
			}
			buf = append(buf[:0], buf[readyEnd:]...)
			readyEnd = 0
		}
	}
	if len(buf) > 0 {
		sortPending()
		for _, it := range buf {
			out = append(out, rc{it.r, it.change})
		}
	}
	return out
}

// recompose is the crate's Recompositions state machine over a decomposed
// sequence.
func recompose(in []rc) []rc {
	out := make([]rc, 0, len(in))
	var buffer []rc
	var composee rc
	haveComposee := false
	lastCCC := -1
	for _, it := range in {
		chClass := int(ccc(it.r))
		if !haveComposee {
			if chClass != 0 {
				out = append(out, it)
				continue
			}
			composee, haveComposee = it, true
			continue
		}
		k := composee
		if lastCCC < 0 {
			if r, ok := composePair(k.r, it.r); ok {
				composee = rc{r, k.change + it.change - 1}
				continue
			}
			if chClass == 0 {
				composee = it
				out = append(out, k)
				continue
			}
			buffer = append(buffer, it)
			lastCCC = chClass
			continue
		}
		if lastCCC >= chClass {
			if chClass == 0 {
				composee = it
				lastCCC = -1
				out = append(out, k)
				out = append(out, buffer...)
				buffer = buffer[:0]
				continue
			}
			buffer = append(buffer, it)
			lastCCC = chClass
			continue
		}
		if r, ok := composePair(k.r, it.r); ok {
			composee = rc{r, k.change + it.change - 1}
			continue
		}
		buffer = append(buffer, it)
		lastCCC = chClass
	}
	if haveComposee {
		out = append(out, composee)
	}
	return append(out, buffer...)
}

// normForm is one of the four Unicode normalization forms.
type normForm int

const (
	formNFC normForm = iota
	formNFD
	formNFKC
	formNFKD
)

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// unicodeNormalize applies a normalization form to n with the crate's
// alignments.
func unicodeNormalize(n *nstr, f normForm) {
	// ASCII text is unchanged by every form, with all changes 0, which
	// leaves alignments as they are.
	if isASCII(n.s) {
		return
	}
	// So is text already in the form, as TestNFCOfNormalText checks.
	// x/text's quick check finds the stretches that are; the crate's
	// algorithm, many times slower, runs on the others only, cut at
	// normalization boundaries, where its state starts afresh.
	form := [...]norm.Form{norm.NFC, norm.NFD, norm.NFKC, norm.NFKD}[f]
	compat := f == formNFKC || f == formNFKD
	compose := f == formNFC || f == formNFKC
	s := n.s
	var buf []byte
	var al []span
	done := 0 // s[:done] is in buf
	for pos := 0; pos < len(s); {
		q := pos + form.QuickSpanString(s[pos:])
		if q >= len(s) {
			break
		}
		// The last boundary before q, looked for in a short window (a
		// longer stretch without one is rare; pos is a boundary anyway).
		start := pos
		if w := max(pos, q-64); w < q {
			if b := form.LastBoundary([]byte(s[w:q])); b >= 0 {
				start = w + b
			}
		}
		end := q + form.NextBoundaryInString(s[q:], true)
		if end <= q {
			_, size := utf8.DecodeRuneInString(s[q:])
			end = q + size
		}
		d := decompose(s[start:end], compat)
		if compose {
			d = recompose(d)
		}
		pos = end
		if unchanged(s[start:end], d) {
			continue
		}
		if buf == nil {
			n.materialize()
			buf = make([]byte, 0, len(s)+16)
			al = make([]span, 0, len(s)+16)
		}
		buf = append(buf, s[done:start]...)
		al = append(al, n.align[done:start]...)
		buf, al = n.appendTransformed(buf, al, start, end, d, 0)
		done = end
	}
	if buf == nil {
		return
	}
	buf = append(buf, s[done:]...)
	al = append(al, n.align[done:]...)
	n.s = string(buf)
	n.align = al
}

// unchanged reports whether the transformation d would leave s and its
// alignments as they are.
func unchanged(s string, d []rc) bool {
	i := 0
	for _, c := range d {
		if c.change != 0 || i >= len(s) {
			return false
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != c.r {
			return false
		}
		i += size
	}
	return i == len(s)
}
