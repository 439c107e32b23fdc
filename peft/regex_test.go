package peft_test

import (
	"strings"
	"testing"

	"github.com/mixtune/mixtune/peft"
)

// TestCheckPortableRegex: patterns Go and Python's re read alike are
// accepted; each construct one of them reads differently (or not at all)
// is refused by name. Before, [[:alpha:]] and the rest were accepted and
// written to adapter_config.json unchanged.
func TestCheckPortableRegex(t *testing.T) {
	for _, p := range []string{
		`.*\.(q_proj|v_proj)`,
		`model\.layers\.\d+\.self_attn\.(q|k|v|o)_proj`,
		`.*layers\.[0-9]{1,2}\..*proj`,
		`.*\.mlp\.(gate|up)_proj`,
		`(?i).*Q_PROJ`,
		`(?i)(?s).*q_proj`,
		`(?i:.*Q)_proj`,
		`(?-i:q)_proj`,
		`(?P<kind>q|k)_proj`,
		`[^.]+\.q_proj`,
		`[]a]_proj`,
		`[a\-z]+`,
		`\x41_proj`,
		`.*?q_proj`,
		`\A.*q_proj$`,
		`layers\.(1|2)\.\w+\.q_proj`,
		`ALL-LINEAR`,
	} {
		if err := peft.CheckPortableRegex(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, tc := range []struct{ pattern, want string }{
		{`.*[[:alpha:]]_proj`, `the POSIX class [:alpha:] at offset 3`},
		{`\pL+_proj`, `\p at offset 0`},
		{`\p{Greek}`, `\p at offset 0`},
		{`\Qa.b\E`, `\Q at offset 0`},
		{`q_proj\z`, `\z at offset 6`},
		{`q_proj\Z`, `\Z at offset 6`},
		{`\x{41}`, `\x not followed by two hex digits at offset 0`},
		{`(q)\1`, `\1 at offset 3`},
		{`[a[b]`, `[ inside a character class at offset 2`},
		{`[a&&b]`, `&& inside a character class at offset 2`},
		{`[a--b]`, `-- inside a character class at offset 2`},
		{`q(?=_proj)`, `a lookaround (?= at offset 1`},
		{`(?<!k)_proj`, `a lookaround (?<! at offset 0`},
		{`(?<name>q)`, `(?<name> at offset 0`},
		{`(?>q)`, `(?> at offset 0`},
		{`q(?#c)`, `(?# at offset 1`},
		{`q*+`, `a possessive quantifier at offset 1`},
		{`(?U)q*`, `the flag U at offset 2`},
		{`q(?i)_proj`, `the global flag group (?i) at offset 1`},
		{`(?-i)q`, `(?-i) at offset 0`},
		{`q{,3}`, `{ at offset 1`},
		{`q{x}`, `{ at offset 1`},
		{`[\b]`, `\b at offset 1`},
		{`\N{DIGIT ONE}`, `\N at offset 0`},
		{`(q`, `missing closing )`},
	} {
		err := peft.CheckPortableRegex(tc.pattern)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.pattern, err, tc.want)
		}
	}
}
