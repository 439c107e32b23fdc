package vulkan

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestGradStats checks the sum of squares against float64 within the
// 18u relative bound shaders/gradstats.comp derives (all terms are
// non-negative, so relative to the sum itself), and the zero and
// non-finite counts exactly, at sizes that use 1 to 256 workgroups, with
// an offset into the buffer.
func TestGradStats(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		n, zeros, nan, inf int
	}{{1, 0, 0, 0}, {7, 2, 0, 0}, {4096, 10, 1, 0}, {5000, 0, 0, 2}, {100003, 77, 0, 0}, {1 << 21, 5, 0, 0}} {
		t.Run(fmt.Sprint(c.n), func(t *testing.T) {
			const off = 5
			x := make([]float32, off+c.n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(20)-10)))
			}
			for i := 0; i < c.zeros; i++ {
				x[off+rng.IntN(c.n)] = 0
			}
			zeros := 0
			want := 0.0
			for _, v := range x[off:] {
				if v == 0 {
					zeros++
				}
				want += float64(v) * float64(v)
			}
			for i := 0; i < c.nan; i++ {
				x[off+i] = float32(math.NaN())
			}
			for i := 0; i < c.inf; i++ {
				x[off+c.n-1-i] = float32(math.Inf(1 - 2*(i%2)))
			}
			g, err := d.NewBuffer(4 * len(x))
			must(t, err)
			defer g.Free()
			must(t, g.WriteFloat32(0, x))
			part, err := d.NewBuffer(4 * 3 * GradStatsGroups(c.n))
			must(t, err)
			defer part.Free()
			out, err := d.NewBuffer(4 * 6)
			must(t, err)
			defer out.Free()
			r, err := d.NewRecorder()
			must(t, err)
			defer r.Close()
			must(t, ks.GradStats(r, g, off, c.n, part, out, 1))
			must(t, r.Submit())
			raw := make([]byte, 24)
			must(t, out.Read(0, raw))
			sum := math.Float32frombits(binary.LittleEndian.Uint32(raw[12:]))
			gotZeros, bad := int(binary.LittleEndian.Uint32(raw[16:])), int(binary.LittleEndian.Uint32(raw[20:]))
			if bad != c.nan+c.inf {
				t.Errorf("%d non-finite counted, want %d", bad, c.nan+c.inf)
			}
			if c.nan+c.inf > 0 {
				return
			}
			if gotZeros != zeros {
				t.Errorf("%d zeros counted, want %d", gotZeros, zeros)
			}
			if rel := math.Abs(float64(sum)-want) / want; !(rel <= 18*0x1p-24) {
				t.Errorf("sum of squares %v, float64 %v: relative %.3g > 18u", sum, want, rel)
			} else {
				t.Logf("n %d: relative error %.3g (bound %.3g)", c.n, rel, 18*0x1p-24)
			}
		})
	}
}
