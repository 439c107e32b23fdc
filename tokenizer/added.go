package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	content    string
	id         int32
	special    bool
	lstrip     bool
	rstrip     bool
	normalized bool
	singleWord bool
}

// trie finds added tokens the way the crate's Aho-Corasick automaton with
// MatchKind::LeftmostLongest does: the match that starts first, and the
// longest of those; among equal patterns the first one given.
type trie struct {
	edges   map[uint64]int32 // node<<8 | byte -> child node
	pattern []int32          // per node: index of the pattern ending there, or -1
	first   [256]bool        // bytes that start a pattern
	empty   bool
}

func newTrie(patterns []string) *trie {
	t := &trie{edges: make(map[uint64]int32), pattern: []int32{-1}}
	for i, p := range patterns {
		if p == "" {
			continue
		}
		t.first[p[0]] = true
		node := int32(0)
		for k := 0; k < len(p); k++ {
			key := uint64(node)<<8 | uint64(p[k])
			child, ok := t.edges[key]
			if !ok {
				child = int32(len(t.pattern))
				t.pattern = append(t.pattern, -1)
				t.edges[key] = child
			}
			node = child
		}
		if t.pattern[node] < 0 {
			t.pattern[node] = int32(i)
		}
	}
	t.empty = len(t.pattern) == 1
	return t
}

// find returns the leftmost-longest match at or after from: its pattern
// and end, or -1.
func (t *trie) find(s string, from int) (start, end int, pat int32) {
	for i := from; i < len(s); i++ {
		if !t.first[s[i]] {
			continue
		}
		node, best, bestEnd := int32(0), int32(-1), -1
		for k := i; k < len(s); k++ {
			child, ok := t.edges[uint64(node)<<8|uint64(s[k])]
			if !ok {
				break
			}
			node = child
			if p := t.pattern[node]; p >= 0 {
				best, bestEnd = p, k+1
			}
		}
		if best >= 0 {
			return i, bestEnd, best
		}
	}
	return -1, -1, -1
}

// addedSet is one of the crate's two matching sets: the trie and the ids of
// its patterns.
type addedSet struct {
	trie *trie
	ids  []int32
}

// piece is a part of a text as AddedVocabulary::find_matches splits it: an
// added token (id >= 0) or text to tokenize.
type piece struct {
	start, end int
	id         int32
}

// isWordChar is the \w of Rust's regex crate: Alphabetic, marks, decimal
// digits, connector punctuation and the joiners. Characters of Unicode
// 15.1 and 16.0 count by their class in unicode16_classes.go, numbers as
// digits (which nearly all of them are).
func isWordChar(r rune) bool {
	if r < 128 {
		return asciiClass[r] == clsLetter || asciiClass[r] == clsNumber || r == '_'
	}
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D ||
		unicode.Is(hfLetter, r) || unicode.Is(hfMark, r) || (unicode.Is(hfNumber, r) && !unicode.IsNumber(r))
}

func isWhite(r rune) bool {
	return r == ' ' || (r >= '\t' && r <= '\r') || (r >= 0x80 && unicode.Is(unicode.White_Space, r))
}

// findAdded is AddedVocabulary::find_matches.
func (v *vocabulary) findAdded(dst []piece, s string, set *addedSet) []piece {
	if s == "" {
		return append(dst, piece{0, 0, -1})
	}
	if set.trie.empty {
		return append(dst, piece{0, len(s), -1})
	}
	startOffset := 0
	for from := 0; from < len(s); {
		ms, me, pat := set.trie.find(s, from)
		if pat < 0 {
			break
		}
		from = me
		id := set.ids[pat]
		tok := v.byID[id]
		start, stop := ms, me
		if tok.singleWord {
			startSpace := start == 0
			if !startSpace {
				r, _ := utf8.DecodeLastRuneInString(s[:start])
				startSpace = !isWordChar(r)
			}
			stopSpace := stop == len(s)
			if !stopSpace {
				r, _ := utf8.DecodeRuneInString(s[stop:])
				stopSpace = !isWordChar(r)
			}
			if !startSpace || !stopSpace {
				continue
			}
		}
		if tok.lstrip {
			// \s*$ on the text before the match.
			ns := start
			for ns > 0 {
				r, size := utf8.DecodeLastRuneInString(s[:ns])
				if !isWhite(r) {
					break
				}
				ns -= size
			}
			start = max(ns, startOffset)
		}
		if tok.rstrip {
			for stop < len(s) {
				r, size := utf8.DecodeRuneInString(s[stop:])
				if !isWhite(r) {
					break
				}
				stop += size
			}
		}
		if startOffset < start {
			dst = append(dst, piece{startOffset, start, -1})
		}
		dst = append(dst, piece{start, stop, id})
		startOffset = stop
	}
	if startOffset != len(s) {
		dst = append(dst, piece{startOffset, len(s), -1})
	}
	return dst
}
