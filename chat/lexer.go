package chat

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The lexer follows jinja2/lexer.py rule for rule, because the whitespace a
// chat template emits is decided here: trim_blocks, lstrip_blocks, the
// "-"/"+" markers, and newline normalisation all happen while splitting the
// source into text and tags.

type tokKind int

const (
	tokEOF tokKind = iota
	tokData
	tokVarBegin
	tokVarEnd
	tokBlockBegin
	tokBlockEnd
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
)

type token struct {
	kind tokKind
	val  string // name, operator, data text or decoded string literal
	num  any    // int64 or float64 for number tokens
	off  int    // byte offset in the normalised source
}

func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of template"
	case tokData:
		return "template data"
	case tokVarBegin:
		return "begin of print statement"
	case tokVarEnd:
		return "end of print statement"
	case tokBlockBegin:
		return "begin of statement block"
	case tokBlockEnd:
		return "end of statement block"
	case tokName:
		return t.val
	case tokString:
		return "string"
	case tokInt:
		return "integer"
	case tokFloat:
		return "float"
	}
	return "'" + t.val + "'"
}

// Python's re module, used by jinja2, anchors these at the current position;
// the leading ^ does the same here.
var (
	floatRe   = regexp.MustCompile(`^(?i)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)`)
	integerRe = regexp.MustCompile(`^(?i)(0b(_?[0-1])+|0o(_?[0-7])+|0x(_?[\da-f])+|[1-9](_?\d)*|0(_?0)*)`)
)

// operators, longest first as jinja2 sorts them.
var operators = []string{"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// pyIsSpace reports whether Python's str.isspace (and re's \s) holds for r.
// Python counts the ASCII separators U+001C..U+001F as whitespace; Go's
// unicode.IsSpace does not.
func pyIsSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

func isIdentStart(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.Is(unicode.Nl, r)
}

func isIdentPart(r rune) bool {
	return isIdentStart(r) || unicode.IsDigit(r) || unicode.In(r, unicode.Mn, unicode.Mc, unicode.Pc)
}

// normalizeNewlines turns \r\n and \r into \n and drops one trailing newline,
// as jinja2 does before lexing (keep_trailing_newline=False).
func normalizeNewlines(src string) string {
	if strings.ContainsRune(src, '\r') {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

type lexer struct {
	src          string
	pos          int
	toks         []token
	lineStarting bool // the last match ended with "\n" (jinja2's line_starting)
}

// lexError is a syntax error at a byte offset of the normalised source.
type lexError struct {
	off int
	msg string
}

func (e *lexError) Error() string { return e.msg }

func tokenize(src string) ([]token, error) {
	lx := &lexer{src: src, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tokEOF, off: len(src)})
	return lx.toks, nil
}

func (lx *lexer) emit(k tokKind, val string, off int) {
	lx.toks = append(lx.toks, token{kind: k, val: val, off: off})
}

// rawBeginRe matches "{% raw %}" (its end takes no trim_blocks newline).
var rawBeginRe = regexp.MustCompile(`^\{%([-+]?)\s*raw\s*(-%\}\s*|%\})`)
var endRawRe = regexp.MustCompile(`\{%([-+]?)\s*endraw\s*(\+%\}|-%\}\s*|%\}\n?)`)

func (lx *lexer) run() error {
	src := lx.src
	for lx.pos < len(src) {
		i := indexTagStart(src, lx.pos)
		if i < 0 {
			lx.emit(tokData, src[lx.pos:], lx.pos)
			return nil
		}
		text := src[lx.pos:i]
		textOff := lx.pos
		kind := src[i+1] // '{', '%' or '#'
		sign := byte(0)
		if i+2 < len(src) && (src[i+2] == '-' || src[i+2] == '+') {
			sign = src[i+2]
		}
		raw := kind == '%' && rawBeginRe.MatchString(src[i:])
		text = lx.stripBefore(text, sign, kind != '{')
		if text != "" {
			lx.emit(tokData, text, textOff)
		}
		switch {
		case raw:
			if err := lx.lexRaw(i); err != nil {
				return err
			}
		case kind == '#':
			if err := lx.lexComment(i); err != nil {
				return err
			}
		default:
			if err := lx.lexTag(i, kind, sign); err != nil {
				return err
			}
		}
	}
	return nil
}

// indexTagStart finds the first "{{", "{%" or "{#" at or after from.
func indexTagStart(src string, from int) int {
	for i := from; i+1 < len(src); i++ {
		if src[i] == '{' {
			switch src[i+1] {
			case '{', '%', '#':
				return i
			}
		}
	}
	return -1
}

// stripBefore applies the whitespace control of the tag that follows text:
// "-" strips all trailing whitespace, "+" keeps it, and lstrip_blocks removes
// spaces between the start of the line and a block or comment tag.
func (lx *lexer) stripBefore(text string, sign byte, isBlockOrComment bool) string {
	switch {
	case sign == '-':
		return strings.TrimRightFunc(text, pyIsSpace)
	case sign != '+' && isBlockOrComment:
		lpos := strings.LastIndexByte(text, '\n') + 1
		if (lpos > 0 || lx.lineStarting) && lpos < len(text) && allSpace(text[lpos:]) {
			return text[:lpos]
		}
	}
	return text
}

func allSpace(s string) bool {
	for _, r := range s {
		if !pyIsSpace(r) {
			return false
		}
	}
	return true
}

// skipSpace returns the offset after the whitespace run starting at i.
func skipSpace(src string, i int) int {
	for i < len(src) {
		r, n := utf8.DecodeRuneInString(src[i:])
		if !pyIsSpace(r) {
			break
		}
		i += n
	}
	return i
}

func (lx *lexer) lexComment(start int) error {
	src := lx.src
	for j := start + 2; j < len(src); j++ {
		var end int
		switch {
		case strings.HasPrefix(src[j:], "+#}"):
			end = j + 3
		case strings.HasPrefix(src[j:], "-#}"):
			end = skipSpace(src, j+3)
		case strings.HasPrefix(src[j:], "#}"):
			end = j + 2
			if end < len(src) && src[end] == '\n' {
				end++
			}
		default:
			continue
		}
		lx.lineStarting = src[end-1] == '\n'
		lx.pos = end
		return nil
	}
	return &lexError{start, "missing end of comment tag"}
}

func (lx *lexer) lexRaw(start int) error {
	src := lx.src
	m := rawBeginRe.FindStringSubmatchIndex(src[start:])
	bodyStart := start + m[1]
	lx.lineStarting = src[bodyStart-1] == '\n'
	e := endRawRe.FindStringSubmatchIndex(src[bodyStart:])
	if e == nil {
		return &lexError{start, "missing end of raw directive"}
	}
	sign := byte(0)
	if e[3] > e[2] {
		sign = src[bodyStart+e[2]]
	}
	text := lx.stripBefore(src[bodyStart:bodyStart+e[0]], sign, true)
	if text != "" {
		lx.emit(tokData, text, bodyStart)
	}
	end := bodyStart + e[1]
	lx.lineStarting = src[end-1] == '\n'
	lx.pos = end
	return nil
}

// lexTag lexes a {{ ... }} or {% ... %} tag starting at start.
func (lx *lexer) lexTag(start int, kind, sign byte) error {
	src := lx.src
	isBlock := kind == '%'
	if isBlock {
		lx.emit(tokBlockBegin, "", start)
	} else {
		lx.emit(tokVarBegin, "", start)
	}
	p := start + 2
	if sign != 0 {
		p++
	}
	var balance []byte
	for {
		if p >= len(src) {
			// jinja2 stops lexing; the parser reports the unclosed tag.
			lx.pos = p
			return nil
		}
		if len(balance) == 0 {
			if end, ok := tagEnd(src, p, isBlock); ok {
				if isBlock {
					lx.emit(tokBlockEnd, "", p)
				} else {
					lx.emit(tokVarEnd, "", p)
				}
				lx.lineStarting = src[end-1] == '\n'
				lx.pos = end
				return nil
			}
		}
		r, n := utf8.DecodeRuneInString(src[p:])
		switch {
		case pyIsSpace(r):
			p = skipSpace(src, p)
		case r >= '0' && r <= '9' && (p == 0 || src[p-1] != '.') && floatRe.MatchString(src[p:]):
			s := floatRe.FindString(src[p:])
			f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
			if err != nil && !isRangeErr(err) {
				return &lexError{p, fmt.Sprintf("invalid float literal %q", s)}
			}
			lx.toks = append(lx.toks, token{kind: tokFloat, val: s, num: f, off: p})
			p += len(s)
		case r >= '0' && r <= '9':
			s := integerRe.FindString(src[p:])
			v, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 0, 64)
			if err != nil {
				return &lexError{p, fmt.Sprintf("integer literal %s is out of range (the renderer uses 64-bit integers)", s)}
			}
			lx.toks = append(lx.toks, token{kind: tokInt, val: s, num: v, off: p})
			p += len(s)
		case isIdentStart(r):
			q := p + n
			for q < len(src) {
				r2, n2 := utf8.DecodeRuneInString(src[q:])
				if !isIdentPart(r2) {
					break
				}
				q += n2
			}
			lx.emit(tokName, src[p:q], p)
			p = q
		case r == '\'' || r == '"':
			q, err := stringEnd(src, p)
			if err != nil {
				return err
			}
			val, err := unescapePython(src[p+1 : q-1])
			if err != nil {
				return &lexError{p, err.Error()}
			}
			lx.emit(tokString, val, p)
			p = q
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(src[p:], o) {
					op = o
					break
				}
			}
			if op == "" {
				return &lexError{p, fmt.Sprintf("unexpected char %q", r)}
			}
			switch op {
			case "(":
				balance = append(balance, ')')
			case "[":
				balance = append(balance, ']')
			case "{":
				balance = append(balance, '}')
			case ")", "]", "}":
				if len(balance) == 0 {
					return &lexError{p, fmt.Sprintf("unexpected '%s'", op)}
				}
				want := balance[len(balance)-1]
				balance = balance[:len(balance)-1]
				if want != op[0] {
					return &lexError{p, fmt.Sprintf("unexpected '%s', expected '%c'", op, want)}
				}
			}
			lx.emit(tokOp, op, p)
			p += len(op)
		}
	}
}

func isRangeErr(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

// tagEnd matches the end of a tag at p: for blocks "+%}", "-%}" plus any
// whitespace, or "%}" plus one newline (trim_blocks); for prints "-}}" plus
// whitespace or "}}".
func tagEnd(src string, p int, isBlock bool) (int, bool) {
	if isBlock {
		switch {
		case strings.HasPrefix(src[p:], "+%}"):
			return p + 3, true
		case strings.HasPrefix(src[p:], "-%}"):
			return skipSpace(src, p+3), true
		case strings.HasPrefix(src[p:], "%}"):
			if p+2 < len(src) && src[p+2] == '\n' {
				return p + 3, true
			}
			return p + 2, true
		}
		return 0, false
	}
	switch {
	case strings.HasPrefix(src[p:], "-}}"):
		return skipSpace(src, p+3), true
	case strings.HasPrefix(src[p:], "}}"):
		return p + 2, true
	}
	return 0, false
}

// stringEnd returns the offset after the string literal starting at p.
func stringEnd(src string, p int) (int, error) {
	q := src[p]
	for i := p + 1; i < len(src); i++ {
		switch src[i] {
		case '\\':
			i++
		case q:
			return i + 1, nil
		}
	}
	return 0, &lexError{p, "unterminated string literal"}
}

// unescapePython decodes a string literal body the way jinja2 does:
// s.encode("ascii", "backslashreplace").decode("unicode-escape"). Non-ASCII
// characters stay as they are, except right after a backslash, where Python
// sees the escape it produced for them (so "\é" reads as the four characters
// `\xe9`).
func unescapePython(s string) (string, error) {
	if !strings.ContainsRune(s, '\\') {
		return s, nil
	}
	var ascii strings.Builder
	for _, r := range s {
		switch {
		case r < 0x80:
			ascii.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&ascii, `\x%02x`, r)
		case r < 0x10000:
			fmt.Fprintf(&ascii, `\u%04x`, r)
		default:
			fmt.Fprintf(&ascii, `\U%08x`, r)
		}
	}
	in := ascii.String()
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(in) {
			return "", fmt.Errorf("\\ at end of string")
		}
		i++
		switch e := in[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n > len(in) {
				return "", fmt.Errorf("truncated \\%cXX escape", e)
			}
			v, err := strconv.ParseUint(in[i+1:i+1+n], 16, 32)
			if err != nil {
				return "", fmt.Errorf("truncated \\%cXX escape", e)
			}
			if v > unicode.MaxRune || (v >= 0xd800 && v < 0xe000) {
				return "", fmt.Errorf("illegal Unicode character \\%c%s", e, in[i+1:i+1+n])
			}
			b.WriteRune(rune(v))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			v := 0
			for j < len(in) && j < i+3 && in[j] >= '0' && in[j] <= '7' {
				v = v*8 + int(in[j]-'0')
				j++
			}
			b.WriteRune(rune(v))
			i = j - 1
		case 'N':
			return "", fmt.Errorf("named escapes (\\N{...}) are not supported")
		default:
			// Python keeps unknown escapes as written.
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}
