package amp

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
)

// The vector slice roundings must agree bit for bit with the scalar ones
// (which TestRoundFP16MatchesReference ties to the reference), on every
// input with MIXTUNE_EXHAUSTIVE=1, else on a stride through all of them
// and the edges, in slices whose length exercises the vector body and the
// scalar tail.
func TestSliceRoundingMatchesScalar(t *testing.T) {
	stride := uint64(97)
	if os.Getenv("MIXTUNE_EXHAUSTIVE") == "1" {
		stride = 1
	}
	const chunk = 1<<16 + 5 // not a multiple of 8: the tail runs too
	in := make([]float32, 0, chunk)
	b16, h16 := make([]float32, chunk), make([]float32, chunk)
	flush := func() {
		copy(b16, in)
		copy(h16, in)
		BF16.RoundSlice(b16[:len(in)])
		FP16.RoundSlice(h16[:len(in)])
		for i, x := range in {
			for _, c := range []struct {
				f   Format
				got float32
			}{{BF16, b16[i]}, {FP16, h16[i]}} {
				want := c.f.Round(x)
				if math.Float32bits(c.got) != math.Float32bits(want) && !(c.got != c.got && want != want) {
					t.Fatalf("%v slice round of %#08x (%g) = %#08x, scalar %#08x", c.f, math.Float32bits(x), x, math.Float32bits(c.got), math.Float32bits(want))
				}
			}
		}
		in = in[:0]
	}
	for u := uint64(0); u < 1<<32; u += stride {
		if in = append(in, math.Float32frombits(uint32(u))); len(in) == chunk {
			flush()
		}
	}
	for _, edge := range []float32{65504, 65520, 1.0 / (1 << 14), 1.0 / (1 << 24), float32(math.Inf(1))} {
		b := math.Float32bits(edge)
		for d := uint32(0); d < 4096; d++ {
			for _, u := range []uint32{b + d, b - d, (b + d) | 1<<31, (b - d) | 1<<31} {
				if in = append(in, math.Float32frombits(u)); len(in) == chunk {
					flush()
				}
			}
		}
	}
	flush()
}

func BenchmarkRoundSlice(b *testing.B) {
	xs := make([]float32, 1<<20)
	for i := range xs {
		xs[i] = float32(i) * 1.37e-3
	}
	for _, f := range []Format{BF16, FP16} {
		b.Run(f.String(), func(b *testing.B) {
			b.SetBytes(4 << 20)
			for b.Loop() {
				f.RoundSlice(xs)
			}
		})
	}
}

func BenchmarkUnderflows(b *testing.B) {
	xs := make([]float32, 1<<20)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * 1e-6) // gradient-like: a share underflows in fp16
	}
	for _, f := range []Format{BF16, FP16} {
		b.Run(f.String(), func(b *testing.B) {
			b.SetBytes(4 << 20)
			for b.Loop() {
				f.Underflows(xs)
			}
		})
	}
}
