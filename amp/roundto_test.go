package amp

import (
	"math"
	"math/rand/v2"
	"testing"
)

// RoundTo and RoundCount (the AVX-512 body where the CPU has it, and the
// scalar tail) agree bit for bit with Round and Underflows, copying and
// in place, on random bit patterns (NaNs, infinities, subnormals,
// underflowing values and exact ties included) at lengths that leave
// tails.
func TestRoundToAndCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f := range []Format{FP32, BF16, FP16} {
		for _, n := range []int{0, 1, 7, 15, 16, 17, 31, 33, 1000, 4099} {
			src := make([]float32, n)
			for i := range src {
				switch rng.IntN(5) {
				case 0:
					src[i] = math.Float32frombits(rng.Uint32())
				case 1: // tiny: around the underflow limits
					src[i] = math.Float32frombits(rng.Uint32()&0x8000ffff | uint32(rng.IntN(2))*0x33000000)
				case 2:
					src[i] = float32(rng.NormFloat64())
				case 3: // exact ties of bf16 (and, with the low 13 bits, of fp16's normals): to even
					src[i] = math.Float32frombits(rng.Uint32()&0xffff0000 | 0x8000 | uint32(rng.IntN(2))*0x1000)
				default:
					src[i] = math.Float32frombits(0x7f800000 | rng.Uint32()&0x807fffff)
				}
			}
			want := make([]float32, n)
			for i, x := range src {
				want[i] = f.Round(x)
			}
			wantUnder := f.Underflows(src)
			check := func(what string, got []float32) {
				t.Helper()
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v n=%d %s: %#08x rounds to %#08x, want %#08x", f, n, what, math.Float32bits(src[i]), math.Float32bits(got[i]), math.Float32bits(want[i]))
					}
				}
			}
			dst := make([]float32, n)
			f.RoundTo(dst, src)
			check("RoundTo", dst)
			dst = make([]float32, n)
			if u := f.RoundCount(dst, src); u != wantUnder {
				t.Fatalf("%v n=%d: RoundCount counted %d underflows, want %d", f, n, u, wantUnder)
			}
			check("RoundCount", dst)
			in := append([]float32(nil), src...)
			f.RoundTo(in, in)
			check("RoundTo in place", in)
			in = append(in[:0], src...)
			if u := f.RoundCount(in, in); u != wantUnder {
				t.Fatalf("%v n=%d: RoundCount in place counted %d underflows, want %d", f, n, u, wantUnder)
			}
			check("RoundCount in place", in)
		}
	}
}
