package tokenizer

import "unicode/utf8"

// encoding is an Encoding under construction, with what the
// post-processors need besides ids and offsets.
type encoding struct {
	// idsOnly keeps ids alone (EncodeIDs): offsets, special flags and
	// values are not appended, which saves 17 to 33 bytes a token.
	idsOnly bool
	ids     []int
	offsets [][2]int
	special []bool
	values  []string // the tokens' strings, kept only when a post-processor reads them
}

// postProcessor is PostProcessor::process_encodings for one sequence.
type postProcessor interface {
	process(e *encoding, text string, addSpecial bool)
}

type seqPostProcessor []postProcessor

func (s seqPostProcessor) process(e *encoding, text string, addSpecial bool) {
	for _, p := range s {
		p.process(e, text, addSpecial)
	}
}

// byteLevelPostProcessor trims the offsets of tokens that start or end
// with spaces (process_offsets). The crate counts characters of the
// offsets it reports; stepping over characters of the text gives the same
// result on byte offsets.
type byteLevelPostProcessor struct {
	trimOffsets    bool
	addPrefixSpace bool
}

func isSpaceChar(r rune) bool { return r == 0x120 || isWhite(r) }

func (p byteLevelPostProcessor) process(e *encoding, text string, _ bool) {
	if !p.trimOffsets {
		return
	}
	for i, v := range e.values {
		leading, trailing := 0, 0
		for _, r := range v {
			if !isSpaceChar(r) {
				break
			}
			leading++
		}
		for k := len(v); k > 0; {
			r, size := utf8.DecodeLastRuneInString(v[:k])
			if !isSpaceChar(r) {
				break
			}
			trailing++
			k -= size
		}
		if leading == 0 && trailing == 0 {
			continue
		}
		start, end := e.offsets[i][0], e.offsets[i][1]
		if leading > 0 {
			if (i == 0 || start == 0) && p.addPrefixSpace && leading == 1 {
				leading = 0
			}
			for ; leading > 0 && start < end; leading-- {
				_, size := utf8.DecodeRuneInString(text[start:])
				start += size
			}
			start = min(start, end)
		}
		if trailing > 0 {
			// Only when the end is at least `trailing` characters in.
			k, n := end, 0
			for ; n < trailing && k > 0; n++ {
				_, size := utf8.DecodeLastRuneInString(text[:k])
				k -= size
			}
			if n == trailing {
				end = max(k, start)
			}
		}
		e.offsets[i] = [2]int{start, end}
	}
}

// templatePiece is one item of a TemplateProcessing template: the sequence
// itself, or special tokens.
type templatePiece struct {
	sequence bool
	ids      []int
	tokens   []string
}

type templatePostProcessor struct {
	single []templatePiece
}

func (p templatePostProcessor) process(e *encoding, _ string, addSpecial bool) {
	if !addSpecial {
		return
	}
	out := encoding{idsOnly: e.idsOnly}
	keepValues := e.values != nil
	for _, piece := range p.single {
		if piece.sequence {
			out.ids = append(out.ids, e.ids...)
			out.offsets = append(out.offsets, e.offsets...)
			out.special = append(out.special, e.special...)
			if keepValues {
				out.values = append(out.values, e.values...)
			}
			continue
		}
		for k, id := range piece.ids {
			out.ids = append(out.ids, id)
			out.offsets = append(out.offsets, [2]int{0, 0})
			out.special = append(out.special, true)
			if keepValues {
				out.values = append(out.values, piece.tokens[k])
			}
		}
	}
	*e = out
}
