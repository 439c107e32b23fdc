package vulkan

import (
	"strings"
	"testing"
)

// TestDoRAArgumentErrors: the DoRA and widening kernels refuse
// arguments that do not fit before recording anything. (Their values are
// checked against the CPU engine in gpu/vkengine's DoRA tests.)
func TestDoRAArgumentErrors(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	buf := func(bytes int) *Buffer {
		b, err := d.NewBuffer(bytes)
		must(t, err)
		t.Cleanup(b.Free)
		return b
	}
	small, big := buf(16), buf(4*64)
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	dora := DoRAArgs{Rows: 2, Cols: 4, Base: big, Lora: big, M: small, Norm: small, Scale: 1}
	for _, c := range []struct {
		name, want string
		run        func() error
	}{
		{"widen unknown format", "unknown 16-bit format", func() error { return ks.Widen16(r, Half(7), big, big, 4, NoRounding) }},
		{"widen in place", "must not be", func() error { return ks.Widen16(r, BF16, big, big, 4, NoRounding) }},
		{"widen short output", "needs", func() error { return ks.Widen16(r, BF16, big, small, 8, NoRounding) }},
		{"norm short W", "W", func() error {
			return ks.DoRANorm(r, DoRANormArgs{Rows: 4, Cols: 8, R: 1, W: small, A: big, B: big, Norm: buf(16)})
		}},
		{"norm 16-bit W of no format", "unknown 16-bit format", func() error {
			return ks.DoRANorm(r, DoRANormArgs{Rows: 1, Cols: 1, R: 1, W: big, A: big, B: big, Norm: small, W16: true, WHalf: Half(9)})
		}},
		{"norm in place", "must not share", func() error {
			return ks.DoRANorm(r, DoRANormArgs{Rows: 1, Cols: 1, R: 1, W: big, A: big, B: big, Norm: big})
		}},
		{"dora short magnitude", "M", func() error {
			a := dora
			a.Cols, a.M, a.Norm = 8, small, big
			return ks.DoRA(r, a, big)
		}},
		{"dora short output", "y", func() error {
			a := dora
			a.Rows = 4
			return ks.DoRA(r, a, small)
		}},
		{"backward baseD without dropout", "without dropout", func() error {
			return ks.DoRABackward(r, dora, big, DoRAGrads{DBaseD: buf(64)})
		}},
		{"backward bad rounding", "unknown rounding", func() error {
			return ks.DoRABackward(r, dora, big, DoRAGrads{DLora: buf(64), RoundLora: Rounding(5)})
		}},
		{"backward short dM", "dM", func() error {
			a := dora
			a.Cols, a.Rows, a.M, a.Norm = 8, 1, buf(32), buf(32)
			return ks.DoRABackward(r, a, big, DoRAGrads{DM: small})
		}},
	} {
		err := c.run()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if r.Len() != 0 {
		t.Errorf("%d commands recorded by refused calls", r.Len())
	}
}
