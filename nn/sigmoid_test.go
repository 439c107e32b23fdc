package nn

import (
	"math"
	"os"
	"testing"
)

// sigmoidSlice and expSubSlice (sixteen at a time in assembly where the CPU allows, Go for
// blocks that need expf's rare paths and the tail) gives the scalar
// sigmoid's and expf's bits for every input: a stride through all float32 patterns
// (every one with MIXTUNE_EXHAUSTIVE=1), and every value near the edges
// of expf's fast path (the subnormal and zero results, ±0, infinities).
func TestSigmoidSliceExact(t *testing.T) {
	stride := uint64(61)
	if os.Getenv("MIXTUNE_EXHAUSTIVE") == "1" {
		stride = 1
	}
	const block = 1<<16 + 13
	in := make([]float32, 0, block)
	out := make([]float32, block)
	check := func() {
		t.Helper()
		sigmoidSlice(out, in)
		for i, x := range in {
			want := sigmoid(x)
			if math.Float32bits(out[i]) != math.Float32bits(want) {
				t.Fatalf("sigmoid(%v [%#08x]) = %v [%#08x], want %v [%#08x]", x, math.Float32bits(x), out[i], math.Float32bits(out[i]), want, math.Float32bits(want))
			}
		}
		for _, m := range []float32{0, 3.25, -7} {
			expSubSlice(out, in, m)
			for i, x := range in {
				want := expf(x - m)
				if math.Float32bits(out[i]) != math.Float32bits(want) {
					t.Fatalf("expf(%v [%#08x] - %v) = %v [%#08x], want %v [%#08x]", x, math.Float32bits(x), m, out[i], math.Float32bits(out[i]), want, math.Float32bits(want))
				}
			}
		}
		in = in[:0]
	}
	for u := uint64(0); u < 1<<32; u += stride {
		in = append(in, math.Float32frombits(uint32(u)))
		if len(in) == block {
			check()
		}
	}
	check()
	for _, edge := range []float32{0, 87.33654, 88.72284, 103.97208, 1, float32(math.Inf(1))} {
		b := math.Float32bits(edge)
		for d := uint32(0); d < 1<<14; d++ {
			in = append(in, math.Float32frombits(b+d), math.Float32frombits(b-d), math.Float32frombits((b+d)|1<<31), math.Float32frombits((b-d)|1<<31))
			if len(in) >= block-4 {
				check()
			}
		}
	}
	check()
}
