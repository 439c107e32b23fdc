// Package strictjson finds what encoding/json silently repairs in JSON
// text: bytes that are not UTF-8 and \u escapes of half a UTF-16
// surrogate pair, both of which it turns into U+FFFD. Python's strict
// decoding and Rust's serde_json (Hugging Face's loaders) refuse such
// text, so mixtune refuses it too rather than read different strings.
package strictjson

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Problem is the first flaw in a JSON text: Offset is its 0-based byte
// offset, Line and Column its 1-based line and byte column.
type Problem struct {
	Offset, Line, Column int
	What                 string
}

func (p *Problem) Error() string {
	return fmt.Sprintf("%s at byte offset %d (line %d, column %d)", p.What, p.Offset, p.Line, p.Column)
}

// Check returns the first flaw of b, or nil when it has none.
func Check(b []byte) *Problem {
	if i := InvalidUTF8(b); i >= 0 {
		return at(b, i, fmt.Sprintf("invalid UTF-8 (byte %#02x)", b[i]))
	}
	if i := LoneSurrogate(b); i >= 0 {
		return at(b, i, fmt.Sprintf("%s escapes half of a UTF-16 surrogate pair, which is no character,", b[i:i+6]))
	}
	return nil
}

func at(b []byte, i int, what string) *Problem {
	lineStart := bytes.LastIndexByte(b[:i], '\n') + 1
	return &Problem{Offset: i, Line: 1 + bytes.Count(b[:i], []byte("\n")), Column: i - lineStart + 1, What: what}
}

// InvalidUTF8 returns the offset of the first byte of b that is not part
// of a valid UTF-8 sequence, or -1.
func InvalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// LoneSurrogate returns the offset of the first \uXXXX escape in the JSON
// text b that encodes half of a surrogate pair without its other half, or
// -1. Backslashes occur in JSON only inside strings, so b need not be
// parsed.
func LoneSurrogate(b []byte) int {
	for i := 0; i+1 < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if b[i+1] != 'u' {
			i++ // an escaped character, possibly a backslash
			continue
		}
		r, ok := hex4(b[i+2:])
		if !ok || !utf16.IsSurrogate(r) {
			continue
		}
		if r < 0xDC00 && i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if lo, ok := hex4(b[i+8:]); ok && lo >= 0xDC00 && lo <= 0xDFFF {
				i += 11 // a whole pair
				continue
			}
		}
		return i
	}
	return -1
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(v), err == nil
}
