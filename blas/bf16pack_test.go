package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// packTestValue is a float32 with random bits (every low half: ties,
// carries into the exponent, to Inf) or, one time in four, a NaN, an
// infinity, a denormal, a zero or a tie.
func packTestValue(rng *rand.Rand) float32 {
	special := []uint32{0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff, 0x7fffffff, 0, 0x80000000, 1, 0x807fffff,
		0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7fffff, 0xff7f8000, 0x00ff8000}
	u := rng.Uint32()
	if rng.IntN(4) == 0 {
		u = special[rng.IntN(len(special))]
	}
	return math.Float32frombits(u)
}

// TestPackRowPairsF32 holds the vector packing of float32 rows to bf16
// pairs to amp's scalar rounding (nearest even, NaN kept quiet), on
// values with every low half (ties, carries into the exponent, to Inf),
// NaNs, infinities, denormals and zeros, at the strides of both operands.
func TestPackRowPairsF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	for _, width := range []int{bf16MR, bf16NR} {
		for _, pairs := range []int{1, 7, 8, 9, 16, 37, 256} {
			row := make([]float32, 2*pairs)
			for i := range row {
				row[i] = packTestValue(rng)
			}
			dst := make([]uint32, pairs*width)
			done := packRowPairsF32(dst, width, row, pairs)
			if done != pairs/8*8 && done != 0 {
				t.Fatalf("%d pairs: packed %d", pairs, done)
			}
			for p := 0; p < done; p++ {
				want := uint32(amp.BF16Bits(row[2*p])) | uint32(amp.BF16Bits(row[2*p+1]))<<16
				if dst[p*width] != want {
					t.Fatalf("width %d, pair %d of %d: %#08x from %#08x, %#08x; amp rounds to %#08x",
						width, p, pairs, dst[p*width], math.Float32bits(row[2*p]), math.Float32bits(row[2*p+1]), want)
				}
			}
			for i, v := range dst { // nothing between the pairs' places written
				if i%width != 0 && v != 0 {
					t.Fatalf("width %d: dst[%d] = %#x written", width, i, v)
				}
			}
			if pairs >= 8 && done == 0 {
				t.Logf("no vector packing on this CPU: amp's rounding does every pair")
			}
		}
	}
}

// TestInterleaveF32 holds the vector interleaving of two float32 rows into
// bf16 pairs to amp's scalar rounding, on the values TestPackRowPairsF32
// draws.
func TestInterleaveF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	for _, lines := range []int{1, 8, 13, 14, 32, 77} {
		even, odd := make([]float32, lines), make([]float32, lines)
		for i := range even {
			even[i], odd[i] = packTestValue(rng), packTestValue(rng)
		}
		out := make([]uint32, lines)
		done := interleaveF32(out, even, odd)
		if done != lines/8*8 && done != 0 {
			t.Fatalf("%d lines: interleaved %d", lines, done)
		}
		for l := 0; l < done; l++ {
			want := uint32(amp.BF16Bits(even[l])) | uint32(amp.BF16Bits(odd[l]))<<16
			if out[l] != want {
				t.Fatalf("line %d of %d: %#08x from %#08x, %#08x; amp rounds to %#08x",
					l, lines, out[l], math.Float32bits(even[l]), math.Float32bits(odd[l]), want)
			}
		}
		for l := done; l < lines; l++ {
			if out[l] != 0 {
				t.Fatalf("out[%d] = %#x written past the vector routine's lines", l, out[l])
			}
		}
	}
}
