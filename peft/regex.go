package peft

import (
	"fmt"
	"regexp"
	"strings"
)

// CheckPortableRegex accepts a regular expression that Go's regexp (RE2)
// and Python's re read the same way, and refuses the rest, naming the
// construct and its byte offset. A target_modules, exclude_modules,
// rank_pattern or alpha_pattern regex is matched here by Go and, once
// written to adapter_config.json, by PEFT in Python: a pattern the two
// read differently would select different modules in each.
//
// The common subset accepted:
//
//   - literals, including non-ASCII ones, and escaped punctuation (\. \( \\);
//   - . ^ $ | ( ) and (?:...), named groups (?P<name>...);
//   - the quantifiers * + ? {m} {m,} {m,n} and their lazy forms (*? ...);
//   - character classes [...] and [^...] with ranges and the escapes
//     below (a ] first in the class is literal in both);
//   - the escapes \d \D \w \W \s \S \b \B \A \t \n \r \f \v and \xHH;
//   - the flags i, m and s: at the start of the pattern, (?i), or scoped,
//     (?i:...) and (?-i:...).
//
// \d, \w, \s and \b are ASCII in Go and Unicode in Python; module paths
// are ASCII identifiers, so on them the two agree.
//
// Refused, with what each engine would do:
//
//   - POSIX classes [[:alpha:]] (Go only; Python reads a set of the
//     characters "[:alph" followed by a literal "]");
//   - \pL, \p{...}, \P..., \Q...\E, \z, \Z, \x{...}, \u, \U, \N, \g,
//     octal and backreference escapes \1 (one engine's only, or different
//     in each);
//   - a [ inside a class, and &&, --, ~~, || in one (Python warns they
//     may become set operations);
//   - lookarounds (?=, (?!, (?<=, (?<!, atomic groups (?>, possessive
//     quantifiers *+, conditionals (?(1), comments (?#, and (?<name>
//     (Python only, or Python-version dependent);
//   - the flags U, a, L, u, x, and a global flag after the start (Go
//     accepts (?i) anywhere, Python 3.11 only at the start);
//   - a { that does not start {m}, {m,} or {m,n} (Python reads {,n} as
//     a quantifier, Go as literal text): escape it as \{.
func CheckPortableRegex(pattern string) error {
	if err := scanPortable(pattern); err != nil {
		return err
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return err
	}
	return nil
}

// portableError names a construct outside the common subset.
func portableError(pattern string, at int, construct, why string) error {
	return fmt.Errorf("%s at offset %d of %q is not read the same by Go and by Python's re (%s); use the common subset (see peft.CheckPortableRegex)", construct, at, pattern, why)
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

func isDigit(b byte) bool { return b >= '0' && b <= '9' }

// escapeLen checks the escape at p[i] == '\\' and returns its length.
// inClass: inside [...], where \b means backspace to Python and is an
// error to Go.
func escapeLen(p string, i int, inClass bool) (int, error) {
	if i+1 >= len(p) {
		return 0, portableError(p, i, `a trailing \`, "an incomplete escape")
	}
	e := p[i+1]
	switch {
	case strings.IndexByte("dDwWsStnrfv", e) >= 0:
		return 2, nil
	case strings.IndexByte("bBA", e) >= 0 && !inClass:
		return 2, nil
	case e == 'x':
		if i+3 < len(p) && isHex(p[i+2]) && isHex(p[i+3]) {
			return 4, nil
		}
		return 0, portableError(p, i, `\x not followed by two hex digits`, `Go also reads \x{...}, Python only \xHH`)
	case isDigit(e):
		return 0, portableError(p, i, `\`+string(e), "a backreference or octal escape: Python only, or read differently")
	case e < 0x80 && !(e >= 'a' && e <= 'z') && !(e >= 'A' && e <= 'Z'):
		return 2, nil // escaped punctuation
	}
	return 0, portableError(p, i, `\`+string(e), "an escape one engine lacks or reads differently")
}

// scanPortable walks the pattern, refusing what is outside the subset.
func scanPortable(p string) error {
	start := true // only global flags so far
	for i := 0; i < len(p); {
		c := p[i]
		wasStart := start
		start = false
		switch c {
		case '\\':
			n, err := escapeLen(p, i, false)
			if err != nil {
				return err
			}
			i += n
		case '[':
			n, err := classLen(p, i)
			if err != nil {
				return err
			}
			i += n
		case '(':
			n, global, err := groupLen(p, i, wasStart)
			if err != nil {
				return err
			}
			start = global
			i += n
		case '{':
			n := quantifierLen(p, i)
			if n == 0 {
				return portableError(p, i, "{", "not a {m}, {m,} or {m,n} quantifier: Python reads {,n} as one, Go as text; escape it as \\{")
			}
			i += n
			if err := afterQuantifier(p, i); err != nil {
				return err
			}
			if i < len(p) && p[i] == '?' {
				i++
			}
		case '*', '+', '?':
			i++
			if err := afterQuantifier(p, i); err != nil {
				return err
			}
			if i < len(p) && p[i] == '?' {
				i++
			}
		default:
			i++
		}
	}
	return nil
}

// afterQuantifier refuses a possessive quantifier (*+, ++, ?+, {m}+).
func afterQuantifier(p string, i int) error {
	if i < len(p) && p[i] == '+' {
		return portableError(p, i-1, "a possessive quantifier", "Python 3.11 only; Go refuses it")
	}
	return nil
}

// quantifierLen is the length of {m}, {m,} or {m,n} at p[i], or 0.
func quantifierLen(p string, i int) int {
	j := i + 1
	digits := func() int {
		k := j
		for j < len(p) && isDigit(p[j]) {
			j++
		}
		return j - k
	}
	if digits() == 0 {
		return 0
	}
	if j < len(p) && p[j] == ',' {
		j++
		digits()
	}
	if j < len(p) && p[j] == '}' {
		return j + 1 - i
	}
	return 0
}

// classLen checks the class at p[i] == '[' and returns its length.
func classLen(p string, i int) (int, error) {
	j := i + 1
	if j < len(p) && p[j] == '^' {
		j++
	}
	if j < len(p) && p[j] == ']' {
		j++ // a ] first is literal in both
	}
	for j < len(p) {
		switch c := p[j]; {
		case c == ']':
			return j + 1 - i, nil
		case c == '[':
			if j+1 < len(p) && strings.IndexByte(":.=", p[j+1]) >= 0 {
				end := strings.Index(p[j:], "]")
				name := p[j:]
				if end >= 0 {
					name = p[j : j+end+1]
				}
				return 0, portableError(p, j, "the POSIX class "+name, "Go only: Python reads a set of its characters")
			}
			return 0, portableError(p, j, "[ inside a character class", `Python warns it may become a nested set; escape it as \[`)
		case c == '\\':
			n, err := escapeLen(p, j, true)
			if err != nil {
				return 0, err
			}
			j += n
		case j+1 < len(p) && p[j+1] == c && strings.IndexByte("&-~|", c) >= 0:
			return 0, portableError(p, j, p[j:j+2]+" inside a character class", "Python warns it may become a set operation")
		default:
			j++
		}
	}
	return 0, portableError(p, i, "[", "the character class is not closed")
}

// groupLen checks the group opening at p[i] == '(' and returns the length
// of the opening itself; global is true for a global flag group (?i).
func groupLen(p string, i int, atStart bool) (n int, global bool, err error) {
	if i+1 >= len(p) || p[i+1] != '?' {
		return 1, false, nil
	}
	rest := p[i+2:]
	switch {
	case strings.HasPrefix(rest, ":"):
		return 3, false, nil
	case strings.HasPrefix(rest, "P<"):
		end := strings.IndexByte(rest, '>')
		if end < 0 {
			return 0, false, portableError(p, i, "(?P<", "an unterminated group name")
		}
		return 2 + end + 1, false, nil
	case strings.HasPrefix(rest, "="), strings.HasPrefix(rest, "!"):
		return 0, false, portableError(p, i, "a lookaround (?"+rest[:1], "Python only: Go has no lookarounds")
	case strings.HasPrefix(rest, "<="), strings.HasPrefix(rest, "<!"):
		return 0, false, portableError(p, i, "a lookaround (?"+rest[:2], "Python only: Go has no lookarounds")
	case strings.HasPrefix(rest, "P="), strings.HasPrefix(rest, "P>"):
		return 0, false, portableError(p, i, "(?"+rest[:2], "a Python-only backreference")
	case strings.HasPrefix(rest, "<"):
		return 0, false, portableError(p, i, "(?<name>", "Go ≥ 1.22 and Python ≥ 3.12 only: write (?P<name>")
	case strings.HasPrefix(rest, ">"), strings.HasPrefix(rest, "#"), strings.HasPrefix(rest, "("):
		return 0, false, portableError(p, i, "(?"+rest[:1], "an atomic group, comment or conditional: Python only")
	}
	j := 0
	for j < len(rest) && rest[j] != ':' && rest[j] != ')' {
		if strings.IndexByte("ims-", rest[j]) < 0 {
			return 0, false, portableError(p, i+2+j, "the flag "+string(rest[j]), "only i, m and s mean the same in both")
		}
		j++
	}
	if j == len(rest) {
		return 0, false, portableError(p, i, "(?", "an unterminated flag group")
	}
	if rest[j] == ')' {
		if !atStart {
			return 0, false, portableError(p, i, "the global flag group (?"+rest[:j+1], "Go applies it from here on, Python 3.11 refuses it after the start: put it first, or scope it as (?"+rest[:j]+":...)")
		}
		if strings.Contains(rest[:j], "-") {
			return 0, false, portableError(p, i, "(?"+rest[:j+1], "Python allows turning flags off only in a scoped group (?-i:...)")
		}
		return 2 + j + 1, true, nil
	}
	return 2 + j + 1, false, nil
}
