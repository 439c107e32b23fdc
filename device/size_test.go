package device

import "testing"

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{in: "8GiB", want: 8 << 30},
		{in: "8 gib", want: 8 << 30},
		{in: "8G", want: 8 << 30},
		{in: "1.5G", want: 3 << 29},
		{in: "500MB", want: 500_000_000},
		{in: "500MiB", want: 500 << 20},
		{in: "0.1GB", want: 100_000_000},
		{in: "2TB", want: 2_000_000_000_000},
		{in: "64k", want: 64 << 10},
		{in: "1073741824", want: 1 << 30},
		{in: "1024B", want: 1024},
		{in: "0", want: 0},
		{in: " 12 GiB ", want: 12 << 30},
		{in: "", wantErr: `size "": no number`},
		{in: "GiB", wantErr: `size "GiB": no number`},
		{in: "1.5", wantErr: `size "1.5": want a whole number of bytes or a unit: strconv.ParseUint: parsing "1.5": invalid syntax`},
		{in: "-1G", wantErr: `size "-1G": "-1" is not a decimal number`},
		{in: "8 gigs", wantErr: `size "8 gigs": unknown unit "gigs" (want B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, K, M, G or T)`},
		{in: "1e3M", wantErr: `size "1e3M": "1e3" is not a decimal number`},
		{in: "1.2.3G", wantErr: `size "1.2.3G": strconv.ParseFloat: parsing "1.2.3": invalid syntax`},
		{in: "99999999T", wantErr: `size "99999999T": too large`},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if errString(err) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %q; want %d, %q", tt.in, got, errString(err), tt.want, tt.wantErr)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		in   uint64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{512 << 20, "512.0 MiB"},
		{24576 << 20, "24.0 GiB"},
		{11003 << 20, "10.7 GiB"},
		{2 << 40, "2.0 TiB"},
	}
	for _, tt := range tests {
		if got := formatBytes(tt.in); got != tt.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
