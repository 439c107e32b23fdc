package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestRMSNormSumsExact holds meanSquare and rmsDot (AVX-512 where the CPU
// has it, Go elsewhere) to sum16's order written out (sum16Spec, in
// float64), bit for bit, over lengths around the sixteen-wide blocks and
// rows with huge, tiny, subnormal and signed zero values, and products
// g·w that overflow float32. Each is also
// within the bound any order meets, (n+1)·2⁻⁵³·Σ|term|, of the exact sum
// (every term is exact in float64; the reference sums them with
// Neumaier's compensation).
func TestRMSNormSumsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	odd := []float32{3e38, -2e38, 1e-40, -1e-45, float32(math.Copysign(0, -1)), 1e20, 7}
	for _, n := range []int{1, 2, 15, 16, 17, 31, 32, 33, 47, 64, 100, 512, 1000} {
		for _, rare := range []bool{false, true} {
			name := fmt.Sprintf("n%d/rare=%v", n, rare)
			x, g, w := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range x {
				x[i], g[i], w[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(1+rng.NormFloat64()/4)
			}
			if rare {
				for r := 0; r < 1+n/8; r++ {
					x[rng.IntN(n)] = odd[rng.IntN(len(odd))]
					g[rng.IntN(n)] = odd[rng.IntN(len(odd))]
				}
			}
			sq, dot := make([]float64, n), make([]float64, n)
			for j := range x {
				sq[j] = float64(x[j]) * float64(x[j])
				dot[j] = float64(g[j]*w[j]) * float64(x[j])
			}
			for _, c := range []struct {
				what  string
				got   float64
				terms []float64
				scale float64
			}{
				{"meanSquare", meanSquare(x), sq, float64(n)},
				{"rmsDot", rmsDot(g, w, x), dot, 1},
			} {
				want := sum16Spec(c.terms) / c.scale
				if c.got != c.got && want != want {
					continue // NaN (an Inf·0 or Inf − Inf among the terms)
				}
				if math.Float64bits(c.got) != math.Float64bits(want) {
					t.Fatalf("%s: %s = %v, want %v", name, c.what, c.got, want)
				}
				exact, abs := neumaier(c.terms), 0.0
				for _, v := range c.terms {
					abs += math.Abs(v)
				}
				if math.IsInf(abs, 0) || math.IsNaN(exact) {
					continue
				}
				if bound := float64(n+1) * 0x1p-53 * abs / c.scale; math.Abs(c.got-exact/c.scale) > bound {
					t.Fatalf("%s: %s = %v, exact %v: more than %g apart", name, c.what, c.got, exact/c.scale, bound)
				}
			}
		}
	}
}

// neumaier is Σ v with Neumaier's compensation: the exact sum to within
// a rounding or two of float64, whatever the order.
func neumaier(v []float64) float64 {
	var s, c float64
	for _, x := range v {
		t := s + x
		if math.Abs(s) >= math.Abs(x) {
			c += (s - t) + x
		} else {
			c += (x - t) + s
		}
		s = t
	}
	return s + c
}

// TestSum8Exact holds sum8 over float32 values in float64 (AVX-512 where
// the CPU has it) to its order written out: element j into partial j mod
// 8, in order, then ((0+1)+(2+3))+((4+5)+(6+7)). Bit for bit, over
// lengths around the blocks of eight and values of every size.
func TestSum8Exact(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 1000, 8192} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(math.Exp(rng.NormFloat64() * 20)) // 1e-26 to 1e26
		}
		var p [8]float64
		for j, v := range x {
			p[j%8] += float64(v)
		}
		want := ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]))
		if got := sum8[float64](x); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("n=%d: sum8 = %v, want %v", n, got, want)
		}
	}
}
