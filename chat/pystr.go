package chat

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Python str semantics the templates rely on. Whitespace is Python's
// (pyIsSpace), indexes count code points, and case mapping applies the
// unconditional multi-character mappings of Unicode's SpecialCasing that
// Python applies (ß upper-cases to SS).

func pyStrip(s string, chars *string, left, right bool) string {
	in := pyIsSpace
	if chars != nil {
		set := *chars
		in = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, in)
	}
	if right {
		s = strings.TrimRightFunc(s, in)
	}
	return s
}

// pySplit is str.split(sep, maxsplit); sep nil splits on whitespace runs.
func pySplit(s string, sep *string, maxsplit int) ([]any, error) {
	var parts []string
	if sep == nil {
		rest := strings.TrimLeftFunc(s, pyIsSpace)
		for rest != "" {
			if maxsplit >= 0 && len(parts) == maxsplit {
				parts = append(parts, rest)
				break
			}
			i := strings.IndexFunc(rest, pyIsSpace)
			if i < 0 {
				parts = append(parts, rest)
				break
			}
			parts = append(parts, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], pyIsSpace)
		}
	} else {
		if *sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		parts = strings.SplitN(s, *sep, maxsplit+1)
		if maxsplit < 0 {
			parts = strings.Split(s, *sep)
		}
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// pyRsplit is str.rsplit(sep, maxsplit).
func pyRsplit(s string, sep *string, maxsplit int) ([]any, error) {
	if maxsplit < 0 {
		return pySplit(s, sep, -1)
	}
	var rev []string
	if sep == nil {
		rest := strings.TrimRightFunc(s, pyIsSpace)
		for rest != "" {
			if len(rev) == maxsplit {
				rev = append(rev, rest)
				break
			}
			i := strings.LastIndexFunc(rest, pyIsSpace)
			if i < 0 {
				rev = append(rev, rest)
				break
			}
			_, n := utf8.DecodeRuneInString(rest[i:])
			rev = append(rev, rest[i+n:])
			rest = strings.TrimRightFunc(rest[:i], pyIsSpace)
		}
	} else {
		if *sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		rest := s
		for len(rev) < maxsplit {
			i := strings.LastIndex(rest, *sep)
			if i < 0 {
				break
			}
			rev = append(rev, rest[i+len(*sep):])
			rest = rest[:i]
		}
		rev = append(rev, rest)
	}
	out := make([]any, len(rev))
	for i, p := range rev {
		out[len(rev)-1-i] = p
	}
	return out, nil
}

// pySplitlines is str.splitlines(keepends=False).
func pySplitlines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			out = append(out, s[start:i])
			if r == '\r' && i+1 < len(s) && s[i+1] == '\n' {
				n++
			}
			start = i + n
		}
		i += n
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// specialUpper gives the unconditional SpecialCasing upper-case mappings
// Python applies that a rune-for-rune mapping misses.
func specialUpper(r rune) (string, bool) {
	switch r {
	case 'ß':
		return "SS", true
	case 'ŉ':
		return "ʼN", true
	case 'ǰ':
		return "J̌", true
	case 'ΐ':
		return "Ϊ́", true
	case 'ΰ':
		return "Ϋ́", true
	case 'և':
		return "ԵՒ", true
	case 'ẖ':
		return "H̱", true
	case 'ẗ':
		return "T̈", true
	case 'ẘ':
		return "W̊", true
	case 'ẙ':
		return "Y̊", true
	case 'ẚ':
		return "Aʾ", true
	case 'ﬀ':
		return "FF", true
	case 'ﬁ':
		return "FI", true
	case 'ﬂ':
		return "FL", true
	case 'ﬃ':
		return "FFI", true
	case 'ﬄ':
		return "FFL", true
	case 'ﬅ', 'ﬆ':
		return "ST", true
	case 'ﬓ':
		return "ՄՆ", true
	case 'ﬔ':
		return "ՄԵ", true
	case 'ﬕ':
		return "ՄԻ", true
	case 'ﬖ':
		return "ՎՆ", true
	case 'ﬗ':
		return "ՄԽ", true
	}
	return "", false
}

func pyUpper(s string) string {
	var b strings.Builder
	for _, r := range s {
		if m, ok := specialUpper(r); ok {
			b.WriteString(m)
			continue
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// pyLower is str.lower(): İ lowers to "i̇" and a capital sigma at the end of
// a word to the final form ς.
func pyLower(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		switch {
		case r == 'İ':
			b.WriteString("i\u0307")
		case r == 'Σ' && finalSigma(rs, i):
			b.WriteRune('ς')
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// finalSigma is Unicode's Final_Sigma condition: a cased letter (skipping
// case-ignorable ones) before, and none after.
func finalSigma(rs []rune, i int) bool {
	before := false
	for j := i - 1; j >= 0; j-- {
		if caseIgnorable(rs[j]) {
			continue
		}
		before = isCased(rs[j])
		break
	}
	if !before {
		return false
	}
	for j := i + 1; j < len(rs); j++ {
		if caseIgnorable(rs[j]) {
			continue
		}
		return !isCased(rs[j])
	}
	return true
}

func isCased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
}

func caseIgnorable(r rune) bool {
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk) ||
		r == '\'' || r == '.' || r == ':' || r == '^' || r == '`' || r == 0xb7 || r == 0x2019
}

func pyTitleRune(r rune) string {
	if m, ok := specialUpper(r); ok {
		// Title case of these is their first letter upper, the rest lower.
		rs := []rune(m)
		return string(rs[0]) + strings.ToLower(string(rs[1:]))
	}
	return string(unicode.ToTitle(r))
}

// pyTitle is str.title(): a letter after a cased letter is lowered, any
// other letter title-cased.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteString(pyLower(string(r)))
		} else {
			b.WriteString(pyTitleRune(r))
		}
		prevCased = isCased(r)
	}
	return b.String()
}

// pyCapitalize is str.capitalize(): the first character title-cased, the
// rest lowered.
func pyCapitalize(s string) string {
	r, n := utf8.DecodeRuneInString(s)
	if n == 0 {
		return s
	}
	return pyTitleRune(r) + pyLower(s[n:])
}

// jinjaTitle is Jinja's title filter: words start after "-", whitespace,
// "(", "{", "[" or "<"; their first character is upper-cased and the rest
// lowered.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, r := range s {
		sep := pyIsSpace(r) || strings.ContainsRune("-({[<", r)
		switch {
		case sep:
			b.WriteRune(r)
			start = true
		case start:
			b.WriteString(pyUpper(string(r)))
			start = false
		default:
			b.WriteString(pyLower(string(r)))
		}
	}
	return b.String()
}

// pyStrftime is datetime.strftime for a naive datetime on glibc in the C
// locale, the setting transformers' strftime_now runs in. glibc's "-" flag
// (no padding) is supported; unknown directives are copied as written.
func pyStrftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		noPad := false
		if format[i] == '-' && i+1 < len(format) {
			noPad = true
			i++
		}
		num := func(v, width int) {
			if noPad {
				fmt.Fprintf(&b, "%d", v)
			} else {
				fmt.Fprintf(&b, "%0*d", width, v)
			}
		}
		hour12 := t.Hour() % 12
		if hour12 == 0 {
			hour12 = 12
		}
		switch format[i] {
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'd':
			num(t.Day(), 2)
		case 'e':
			if noPad {
				num(t.Day(), 1)
			} else {
				fmt.Fprintf(&b, "%2d", t.Day())
			}
		case 'm':
			num(int(t.Month()), 2)
		case 'y':
			num(t.Year()%100, 2)
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num(hour12, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'j':
			num(t.YearDay(), 3)
		case 'w':
			fmt.Fprintf(&b, "%d", int(t.Weekday()))
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			fmt.Fprintf(&b, "%d", wd)
		case 'F':
			fmt.Fprintf(&b, "%d-%02d-%02d", t.Year(), int(t.Month()), t.Day())
		case 'D':
			fmt.Fprintf(&b, "%02d/%02d/%02d", int(t.Month()), t.Day(), t.Year()%100)
		case 'T':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case 'R':
			fmt.Fprintf(&b, "%02d:%02d", t.Hour(), t.Minute())
		case 'c':
			fmt.Fprintf(&b, "%s %s %2d %02d:%02d:%02d %d", t.Weekday().String()[:3], t.Month().String()[:3],
				t.Day(), t.Hour(), t.Minute(), t.Second(), t.Year())
		case 'x':
			fmt.Fprintf(&b, "%02d/%02d/%02d", int(t.Month()), t.Day(), t.Year()%100)
		case 'X':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case 'Z', 'z':
			// A naive datetime has no zone: both print nothing.
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			if noPad {
				b.WriteByte('-')
			}
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
