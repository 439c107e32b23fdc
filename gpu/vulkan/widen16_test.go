package vulkan

import (
	"math"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// TestWiden16 widens every 16-bit pattern of both formats, odd count
// included, kept in fp32 or rounded to each 16-bit format, and requires
// amp's bits: FromBits16, then Round (NaN payloads included).
func TestWiden16(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const n = 1<<16 + 1 // every pattern, then 0x0000 again in a last odd half
	bits := make([]uint16, n+1)
	for i := range n {
		bits[i] = uint16(i)
	}
	B, err := d.NewBuffer(2 * len(bits))
	must(t, err)
	defer B.Free()
	Y, err := d.NewBuffer(4 * n)
	must(t, err)
	defer Y.Free()
	must(t, B.WriteUint16(0, bits))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	formats := map[Half]amp.Format{BF16: amp.BF16, FP16: amp.FP16}
	roundings := map[Rounding]amp.Format{NoRounding: amp.FP32, RoundBF16: amp.BF16, RoundFP16: amp.FP16}
	for h, src := range formats {
		for rnd, dst := range roundings {
			must(t, ks.Widen16(r, h, B, Y, n, rnd))
			must(t, r.Submit())
			got := make([]float32, n)
			must(t, Y.ReadFloat32(0, got))
			bad := 0
			for i, b := range bits[:n] {
				want := src.FromBits16(b)
				if dst != amp.FP32 {
					want = dst.Round(want)
				}
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					if bad < 5 {
						t.Errorf("%s → %v: %#04x gives %#08x, want %#08x", h, dst, b, math.Float32bits(got[i]), math.Float32bits(want))
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%s → %v: %d of %d values differ from amp", h, dst, bad, n)
			}
		}
	}
}
