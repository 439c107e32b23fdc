package amp

import "testing"

func TestBF16MatmulText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want BF16Matmul
		bad  bool
	}{
		{"auto", BF16Auto, false},
		{" Emulate ", BF16Emulate, false},
		{"hardware", BF16Hardware, false},
		{"amx", 0, true},
		{"", 0, true},
	} {
		var m BF16Matmul
		err := m.UnmarshalText([]byte(tc.in))
		if (err != nil) != tc.bad {
			t.Errorf("%q: err = %v, want error %v", tc.in, err, tc.bad)
			continue
		}
		if tc.bad {
			continue
		}
		if m != tc.want {
			t.Errorf("%q: got %v, want %v", tc.in, m, tc.want)
		}
		b, _ := m.MarshalText()
		var back BF16Matmul
		if err := back.UnmarshalText(b); err != nil || back != m {
			t.Errorf("%v: round trip through %q gave %v, %v", m, b, back, err)
		}
	}
}
