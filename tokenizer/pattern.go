package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// pattern finds the matches of a pattern in a text, as Hugging Face's
// Pattern::find_matches does: the returned pieces cover the text in order,
// matches flagged, gaps between them not. An empty text gives one empty
// gap.
type pattern interface {
	// findMatches appends the pieces of s to dst. A regex past b's
	// budget records the error in b and returns s as one gap.
	findMatches(dst []match, s string, b *matchBudget) []match
}

// literalPattern matches a literal string (a Split or Replace "String"
// pattern, which the crate escapes into a regex).
type literalPattern struct{ lit string }

func (p literalPattern) findMatches(dst []match, s string, _ *matchBudget) []match {
	if s == "" {
		return append(dst, match{0, 0, false})
	}
	prev := 0
	for i := 0; i <= len(s); {
		k := strings.Index(s[i:], p.lit)
		if k < 0 {
			break
		}
		start := i + k
		if prev != start {
			dst = append(dst, match{prev, start, false})
		}
		dst = append(dst, match{start, start + len(p.lit), true})
		prev = start + len(p.lit)
		i = prev
	}
	if prev != len(s) {
		dst = append(dst, match{prev, len(s), false})
	}
	return dst
}

// runePattern is the crate's Fn(char) -> bool pattern: every character
// for which pred holds is a match of its own.
type runePattern func(rune) bool

func (p runePattern) findMatches(dst []match, s string, _ *matchBudget) []match {
	if s == "" {
		return append(dst, match{0, 0, false})
	}
	last := 0
	for b, c := range s {
		if p(c) {
			if last < b {
				dst = append(dst, match{last, b, false})
			}
			end := b + utf8.RuneLen(c)
			dst = append(dst, match{b, end, true})
			last = end
		}
	}
	if len(s) > last {
		dst = append(dst, match{last, len(s), false})
	}
	return dst
}

// invertPattern flips matches and gaps (Split's invert option).
type invertPattern struct{ p pattern }

func (p invertPattern) findMatches(dst []match, s string, b *matchBudget) []match {
	n := len(dst)
	dst = p.p.findMatches(dst, s, b)
	for i := n; i < len(dst); i++ {
		dst[i].isMatch = !dst[i].isMatch
	}
	return dst
}

// regexPattern runs a regular expression with github.com/dlclark/regexp2,
// which, unlike Go's regexp, has the lookahead that the Split patterns of
// Llama 3 and Qwen use. The crate runs these patterns with Oniguruma, whose
// ^ and $ match at line boundaries, hence the Multiline option.
//
// regexp2 backtracks, so a pattern such as (a+)+$ takes time exponential
// in the text; the matchBudget of each Encode bounds it. regexp2 reads
// its timeout from the compiled Regexp, which goroutines share, so the
// pattern is compiled once per timeout tier, when a tier is first needed.
type regexPattern struct {
	expr  string
	path  string // the pattern's JSON path in the tokenizer file
	tiers [matchTiers]func() *regexp2.Regexp
}

func compileRegex(expr, path string) (*regexPattern, error) {
	if _, err := regexp2.Compile(expr, regexp2.Multiline); err != nil {
		return nil, err
	}
	p := &regexPattern{expr: expr, path: path}
	for k := range p.tiers {
		p.tiers[k] = sync.OnceValue(func() *regexp2.Regexp {
			re := regexp2.MustCompile(expr, regexp2.Multiline)
			re.MatchTimeout = tierTimeout(k)
			return re
		})
	}
	return p, nil
}

// regexFor returns the compiled pattern whose timeout is the shortest
// tier that is not less than want.
func (p *regexPattern) regexFor(want time.Duration) *regexp2.Regexp {
	k := 0
	for k < matchTiers-1 && tierTimeout(k) < want {
		k++
	}
	return p.tiers[k]()
}

func (p *regexPattern) findMatches(dst []match, s string, b *matchBudget) []match {
	if s == "" {
		return append(dst, match{0, 0, false})
	}
	if b == nil {
		b = newMatchBudget(len(s))
	}
	start := len(dst)
	failed := func() []match {
		b.fail(p, len(s))
		// the rest of this Encode is thrown away: one gap keeps the
		// callers' invariants (pieces cover the text)
		return append(dst[:start], match{0, len(s), false})
	}
	if b.err != nil {
		return failed()
	}
	runes := []rune(s)
	// byteAt[i] is the byte offset of rune i: regexp2 reports rune indices.
	byteAt := make([]int, len(runes)+1)
	o := 0
	for i, r := range runes {
		byteAt[i] = o
		o += utf8.RuneLen(r)
	}
	byteAt[len(runes)] = o
	prev, lastEnd, lastMatchEnd := 0, 0, -1
	for lastEnd <= len(runes) {
		left := time.Until(b.deadline)
		if left <= 0 {
			return failed()
		}
		// one search may scan the rest of the text for its match
		search := searchTimeBase + time.Duration(byteAt[len(runes)]-byteAt[min(lastEnd, len(runes))])*searchTimePerByte
		m, err := p.regexFor(min(left, search)).FindRunesMatchStartingAt(runes, lastEnd)
		if err != nil {
			// regexp2's only error here is its timeout (its message
			// holds the whole text, so it is not passed on)
			return failed()
		}
		if m == nil {
			break
		}
		ms, me := m.Index, m.Index+m.Length
		// Oniguruma's find_iter refuses an empty match right where the
		// previous match ended and moves on by one character.
		if ms == me && me == lastMatchEnd {
			lastEnd++
			continue
		}
		lastEnd, lastMatchEnd = me, me
		if me == ms && ms == len(runes) && lastEnd > len(runes) {
			break
		}
		bs, be := byteAt[ms], byteAt[me]
		if prev != bs {
			dst = append(dst, match{prev, bs, false})
		}
		dst = append(dst, match{bs, be, true})
		prev = be
	}
	if prev != len(s) {
		dst = append(dst, match{prev, len(s), false})
	}
	return dst
}

// matchBudget is the time the regular expressions of one Encode may take
// together: matchTimeBase, plus matchTimePerByte for each byte of the
// text. One search (from the end of a match to the next match) may take
// searchTimeBase plus searchTimePerByte for each byte left in the piece.
// On real tokenizers' patterns regexp2 takes 0.1 to 2 µs a byte
// (BenchmarkRegexPatterns, on a loaded 2-core machine), so neither limit
// is reached by a correct pattern; one that backtracks catastrophically
// fails its first slow search, within seconds on a short text. The first
// failure is kept as the error.
type matchBudget struct {
	deadline time.Time
	limit    time.Duration
	err      *RegexTimeoutError
}

const (
	matchTimeBase     = 2 * time.Second
	matchTimePerByte  = 50 * time.Microsecond
	searchTimeBase    = time.Second
	searchTimePerByte = 10 * time.Microsecond
	// matchTiers timeouts from 0.5 s, each twice the one before: a
	// search that cannot finish overruns its limit by at most a factor
	// of 2, or past 68 minutes (the budget of a search in 400 MB) not at
	// all.
	matchTiers = 14
)

func tierTimeout(k int) time.Duration { return time.Second / 2 << k }

func newMatchBudget(textBytes int) *matchBudget {
	limit := matchTimeBase + time.Duration(textBytes)*matchTimePerByte
	return &matchBudget{deadline: time.Now().Add(limit), limit: limit}
}

func (b *matchBudget) fail(p *regexPattern, textBytes int) {
	if b.err == nil {
		b.err = &RegexTimeoutError{Pattern: p.expr, Path: p.path, Limit: b.limit, TextBytes: textBytes}
	}
}

// RegexTimeoutError is a regular expression of the tokenizer file that
// ran past its time budget: a pattern that backtracks catastrophically,
// such as (a+)+$, which Hugging Face's Oniguruma would also take
// exponential time on.
type RegexTimeoutError struct {
	Pattern   string
	Path      string // its JSON path in the tokenizer file
	Limit     time.Duration
	TextBytes int // the length of the piece it was searching
}

func (e *RegexTimeoutError) Error() string {
	return fmt.Sprintf("%s: the regex %q took more than the %v allowed to encode this text (%d bytes where it stopped): it backtracks catastrophically; fix or remove the pattern",
		e.Path, e.Pattern, e.Limit.Round(time.Millisecond), e.TextBytes)
}

// The pre-tokenizer patterns of GPT-2 (ByteLevel's use_regex), of Llama 3
// (also OpenAI's cl100k) and of Qwen 2 and 3. Patterns equal to these
// strings run on the hand-written matchers below, which give the same
// matches as the regexes (tested against regexp2 on the fixture corpus)
// many times faster.
const (
	gpt2Regex   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Regex  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// The three Split patterns of DeepSeek V3, which also have fast matchers.
// Unlike the ones above they leave gaps, characters that no alternative
// matches.
const (
	deepseekDigitsRegex = `\p{N}{1,3}`
	deepseekCJKRegex    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	deepseekWordsRegex  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// newPattern returns the matcher of a regex, the fast one when there is.
func newPattern(expr, path string) (pattern, error) {
	switch expr {
	case deepseekDigitsRegex:
		return gapPattern{next: deepseekDigitsNext}, nil
	case deepseekCJKRegex:
		return gapPattern{next: deepseekCJKNext}, nil
	case deepseekWordsRegex:
		return gapPattern{next: deepseekWordsNext}, nil
	case gpt2Regex:
		return fastPattern{next: gpt2Next}, nil
	case llama3Regex:
		return fastPattern{next: func(s string, i int) int { return llama3Next(s, i, 3) }}, nil
	case qwen2Regex:
		return fastPattern{next: func(s string, i int) int { return llama3Next(s, i, 1) }}, nil
	}
	p, err := compileRegex(expr, path)
	if err != nil {
		return nil, fmt.Errorf("regex %q does not compile: %w", expr, err)
	}
	return p, nil
}

// fastPattern is a hand-written matcher for a pattern whose alternatives
// match any character, so that matches follow each other without gaps:
// next returns the end of the match that starts at i.
type fastPattern struct {
	next func(s string, i int) int
}

func (p fastPattern) findMatches(dst []match, s string, _ *matchBudget) []match {
	if s == "" {
		return append(dst, match{0, 0, false})
	}
	for i := 0; i < len(s); {
		j := p.next(s, i)
		dst = append(dst, match{i, j, true})
		i = j
	}
	return dst
}

// Character classes of the fast matchers, as Oniguruma defines them for
// Unicode text: \s is White_Space, \p{L} the letters, \p{N} the numbers.
// Above ASCII they come from unicode16_classes.go: Hugging Face's
// Oniguruma has Unicode 16.0, Go's unicode package 15.0, and the 5,000
// characters added in between would otherwise split differently.
const (
	clsOther = iota
	clsSpace
	clsLetter
	clsNumber
)

var asciiClass = func() (t [128]uint8) {
	for c := 0; c < 128; c++ {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			t[c] = clsLetter
		case c >= '0' && c <= '9':
			t[c] = clsNumber
		case c == ' ', c >= '\t' && c <= '\r':
			t[c] = clsSpace
		}
	}
	return t
}()

func class(r rune) uint8 {
	if r < 128 {
		return asciiClass[r]
	}
	if r <= 0xFF {
		// Latin-1 is the same in every version, and unicode's property
		// table answers it fastest.
		switch {
		case unicode.IsLetter(r):
			return clsLetter
		case unicode.IsNumber(r):
			return clsNumber
		case unicode.IsSpace(r):
			return clsSpace
		}
		return clsOther
	}
	switch {
	case unicode.Is(hfLetter, r):
		return clsLetter
	case unicode.Is(hfNumber, r):
		return clsNumber
	case unicode.Is(hfSpace, r):
		return clsSpace
	}
	return clsOther
}

// at decodes the character at s[i]; at the end it returns -1.
func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// run returns the end of the run of characters of class cls from i.
func run(s string, i int, cls uint8) int {
	for i < len(s) {
		r, size := at(s, i)
		if class(r) != cls {
			break
		}
		i += size
	}
	return i
}

// contraction returns the end of 's 't 're 've 'm 'll 'd after the quote at
// i-1, or 0. Folding to lower case, as (?i:...) does in Oniguruma, also lets
// the long s (U+017F) stand for s.
func contraction(s string, i int, fold bool) int {
	lower := func(r rune) rune {
		if fold {
			if r >= 'A' && r <= 'Z' {
				return r + 'a' - 'A'
			}
			if r == 0x17F {
				return 's'
			}
		}
		return r
	}
	r, size := at(s, i)
	switch lower(r) {
	case 's', 't', 'm', 'd':
		return i + size
	case 'r', 'v':
		if r2, size2 := at(s, i+size); lower(r2) == 'e' {
			return i + size + size2
		}
	case 'l':
		if r2, size2 := at(s, i+size); lower(r2) == 'l' {
			return i + size + size2
		}
	}
	return 0
}

// spaceEnd handles the alternatives \s+(?!\S)|\s+ for the whitespace run
// [i, j): up to the end of the text the run matches whole; before anything
// else it leaves its last character to the next match, unless that is its
// only one.
func spaceEnd(s string, i, j int) int {
	if j == len(s) {
		return j
	}
	_, size := utf8.DecodeLastRuneInString(s[i:j])
	if k := j - size; k > i {
		return k
	}
	return j
}

// gpt2Next matches gpt2Regex at i.
func gpt2Next(s string, i int) int {
	r, size := at(s, i)
	if r == '\'' {
		if j := contraction(s, i+1, false); j > 0 {
			return j
		}
	}
	c := class(r)
	if r == ' ' {
		if r2, _ := at(s, i+1); r2 >= 0 {
			if c2 := class(r2); c2 != clsSpace {
				return run(s, i+1, c2)
			}
		}
	}
	if c != clsSpace {
		return run(s, i+size, c)
	}
	return spaceEnd(s, i, run(s, i, clsSpace))
}

// llama3Next matches llama3Regex (maxDigits 3) or qwen2Regex (maxDigits 1)
// at i.
func llama3Next(s string, i int, maxDigits int) int {
	r, size := at(s, i)
	if r == '\'' {
		if j := contraction(s, i+1, true); j > 0 {
			return j
		}
	}
	c := class(r)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return run(s, i+size, clsLetter)
	}
	if c != clsNumber && r != '\r' && r != '\n' {
		if r2, size2 := at(s, i+size); r2 >= 0 && class(r2) == clsLetter {
			return run(s, i+size+size2, clsLetter)
		}
	}
	// \p{N}{1,maxDigits}
	if c == clsNumber {
		j := i + size
		for k := 1; k < maxDigits; k++ {
			r2, size2 := at(s, j)
			if r2 < 0 || class(r2) != clsNumber {
				break
			}
			j += size2
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	start := -1
	if c == clsOther {
		start = i
	} else if r == ' ' {
		if r2, _ := at(s, i+1); r2 >= 0 && class(r2) == clsOther {
			start = i + 1
		}
	}
	if start >= 0 {
		j := run(s, start, clsOther)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// Only whitespace is left. \s*[\r\n]+ ends after the last line break
	// of the run.
	j := run(s, i, clsSpace)
	if k := strings.LastIndexAny(s[i:j], "\r\n"); k >= 0 {
		return i + k + 1
	}
	return spaceEnd(s, i, j)
}

// gapPattern is a hand-written matcher for a pattern that may match
// nowhere at a position: next returns the end of the match that starts at
// i, or -1, and the search moves on one character, as a regex search does.
type gapPattern struct {
	next func(s string, i int) int
}

func (p gapPattern) findMatches(dst []match, s string, _ *matchBudget) []match {
	if s == "" {
		return append(dst, match{0, 0, false})
	}
	prev := 0
	for i := 0; i < len(s); {
		j := p.next(s, i)
		if j < 0 {
			_, size := at(s, i)
			i += size
			continue
		}
		if prev < i {
			dst = append(dst, match{prev, i, false})
		}
		dst = append(dst, match{i, j, true})
		prev, i = j, j
	}
	if prev < len(s) {
		dst = append(dst, match{prev, len(s), false})
	}
	return dst
}

func deepseekDigitsNext(s string, i int) int {
	j := i
	for k := 0; k < 3; k++ {
		r, size := at(s, j)
		if r < 0 || class(r) != clsNumber {
			break
		}
		j += size
	}
	if j == i {
		return -1
	}
	return j
}

func isDeepseekCJK(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x309f) || (r >= 0x30a0 && r <= 0x30ff)
}

func deepseekCJKNext(s string, i int) int {
	j := i
	for {
		r, size := at(s, j)
		if r < 0 || !isDeepseekCJK(r) {
			break
		}
		j += size
	}
	if j == i {
		return -1
	}
	return j
}

func isLetterOrMark(r rune) bool {
	if r < 128 {
		return asciiClass[r] == clsLetter
	}
	return unicode.Is(hfLetter, r) || unicode.Is(hfMark, r)
}

func isPunctOrSymbol(r rune) bool {
	if r < 128 {
		return r > ' ' && r < 127 && asciiClass[r] == clsOther
	}
	return unicode.Is(hfPunctSymbol, r)
}

func isASCIILetter(r rune) bool { return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') }

// runOf returns the end of the run of characters from i for which in holds.
func runOf(s string, i int, in func(rune) bool) int {
	for i < len(s) {
		r, size := at(s, i)
		if !in(r) {
			break
		}
		i += size
	}
	return i
}

// deepseekWordsNext matches deepseekWordsRegex at i.
func deepseekWordsNext(s string, i int) int {
	r, size := at(s, i)
	// [ASCII punctuation][A-Za-z]+
	if r < 128 && r > ' ' && r < 127 && asciiClass[r] == clsOther {
		if r2, _ := at(s, i+1); r2 >= 0 && isASCIILetter(r2) {
			return runOf(s, i+1, isASCIILetter)
		}
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if isLetterOrMark(r) {
		return runOf(s, i+size, isLetterOrMark)
	}
	if r != '\r' && r != '\n' && class(r) != clsLetter && !isPunctOrSymbol(r) {
		if r2, _ := at(s, i+size); r2 >= 0 && isLetterOrMark(r2) {
			return runOf(s, i+size, isLetterOrMark)
		}
	}
	// ' ?[\p{P}\p{S}]+[\r\n]*'
	start := -1
	if isPunctOrSymbol(r) {
		start = i
	} else if r == ' ' {
		if r2, _ := at(s, i+1); r2 >= 0 && isPunctOrSymbol(r2) {
			start = i + 1
		}
	}
	if start >= 0 {
		j := runOf(s, start, isPunctOrSymbol)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	if class(r) != clsSpace {
		return -1
	}
	j := run(s, i, clsSpace)
	if k := strings.LastIndexAny(s[i:j], "\r\n"); k >= 0 {
		return i + k + 1
	}
	return spaceEnd(s, i, j)
}
