package strictjson

import "testing"

func TestCheck(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     string // the error, empty for none
	}{
		{"clean", `{"a": "é\u00e9\ud83d\ude00"}`, ""},
		{"invalid byte", "{\"a\":\n \"x\xffy\"}", "invalid UTF-8 (byte 0xff) at byte offset 9 (line 2, column 4)"},
		{"truncated sequence", "\"\xc3\"", "invalid UTF-8 (byte 0xc3) at byte offset 1 (line 1, column 2)"},
		{"lone high surrogate", `["\ud800"]`, `\ud800 escapes half of a UTF-16 surrogate pair, which is no character, at byte offset 2 (line 1, column 3)`},
		{"lone low surrogate", `["\udc00x"]`, `\udc00 escapes half of a UTF-16 surrogate pair, which is no character, at byte offset 2 (line 1, column 3)`},
		{"escaped backslash", `["\\ud800"]`, ""},
		{"high then non-low", `["\ud800\u0041"]`, `\ud800 escapes half`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := Check([]byte(tt.in))
			switch {
			case tt.want == "" && p != nil:
				t.Fatalf("Check: %v", p)
			case tt.want != "" && (p == nil || len(p.Error()) < len(tt.want) || p.Error()[:len(tt.want)] != tt.want):
				t.Fatalf("Check: %v, want %q", p, tt.want)
			}
		})
	}
}
