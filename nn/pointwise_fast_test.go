package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// pointwiseInputs draws n float32 values, a quarter of them special:
// zeros of both signs, subnormals, infinities, NaN, values near overflow
// and near 1 (where 1 - s cancels).
func pointwiseInputs(rng *rand.Rand, n int) []float32 {
	special := []float32{0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -1e-40, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 3e38, -3e38, 1, 0.99999994, 1.0000001}
	x := make([]float32, n)
	for i := range x {
		switch {
		case rng.IntN(4) == 0:
			x[i] = special[rng.IntN(len(special))]
		default:
			x[i] = float32((rng.Float64()*2 - 1) * math.Pow(2, float64(rng.IntN(40)-20)))
		}
	}
	return x
}

// goFusesMultiplyAdd reports whether this build's compiler fuses x·z + y
// into one FMA: with x = z = 1 + 2⁻¹² and y = −(1 + 2⁻¹¹), x·z rounds to
// −y (the 2⁻²⁴ left over is a tie, rounded to even) and the sum is 0;
// fused, it is 2⁻²⁴.
func goFusesMultiplyAdd() bool { return mulAdd(1+1.0/4096, 1+1.0/4096, -(1+1.0/2048)) != 0 }

//go:noinline
func mulAdd(x, z, y float32) float32 { return x*z + y }

func sameFloat32Bits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// TestPointwiseFastBits: the pointwise ops' loops give the bits of the
// scalar definitions, each operation rounded to float32 in the written
// order (explicit conversions: nothing fused), at every length around
// the assembly's blocks of 8 and with the outputs aliasing an input as
// the ops use them.
func TestPointwiseFastBits(t *testing.T) {
	if goFusesMultiplyAdd() {
		t.Skip("this Go fuses multiplies and adds into FMAs (GOAMD64=v3, arm64, …): the scalar loops are not the unfused definitions, and the assembly is not used")
	}
	if !haveAVX2 {
		t.Log("no AVX2 here (or a Go that fuses FMAs): the scalar loops run, compared with their definitions")
	}
	rng := rand.New(rand.NewPCG(31, 32))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 255, 256, 257, 1000} {
		a, b, c, u := pointwiseInputs(rng, n), pointwiseInputs(rng, n), pointwiseInputs(rng, n), pointwiseInputs(rng, n)
		s := float32(rng.Float64()*4 - 2)
		check := func(what string, got []float32, want func(i int) float32) {
			t.Helper()
			for i := range got {
				if w := want(i); !sameFloat32Bits(got[i], w) {
					t.Fatalf("%s n=%d: [%d] = %v (%#x), want %v (%#x)", what, n, i, got[i], math.Float32bits(got[i]), w, math.Float32bits(w))
				}
			}
		}

		y := make([]float32, n)
		addScaledSlice(y, a, b, s)
		check("a + s·b", y, func(i int) float32 { return a[i] + float32(s*b[i]) })
		y = append([]float32(nil), b...)
		addScaledSlice(y, a, y, s)
		check("a + s·b into b", y, func(i int) float32 { return a[i] + float32(s*b[i]) })
		scaleSlice(y, a, s)
		check("s·x", y, func(i int) float32 { return float32(s * a[i]) })
		y = append([]float32(nil), b...)
		mulSubSlice(y, a, y, s)
		check("a·(b - s) into b", y, func(i int) float32 { return float32(a[i] * float32(b[i]-s)) })

		// RMSNorm's loops (forward through RMSNormRows; the backward's
		// two loops on their fast prefix, which the tail loops finish).
		if n > 0 {
			w := pointwiseInputs(rng, n)
			rstd := float32(1 / math.Sqrt(meanSquare(a)+1e-6))
			y = make([]float32, n)
			RMSNormRows(y, a, w, n, 1e-6)
			check("RMSNorm", y, func(i int) float32 { return float32(w[i] * float32(a[i]*rstd)) })
		}
		cc := float32(rng.Float64() - 0.5)
		y = make([]float32, n)
		k := rmsGradFast(y, a, b, c, cc, s)
		check("RMSNorm dx", y[:k], func(i int) float32 { return float32(s * float32(float32(a[i]*b[i])-float32(c[i]*cc))) })
		y = append([]float32(nil), u...)
		k = accMulMulFast(y, a, b, s)
		check("RMSNorm dw partial", y[:k], func(i int) float32 { return u[i] + float32(float32(a[i]*b[i])*s) })

		// RoPE: two heads of n/2 pairs a row, three rows.
		if half := n / 2; half > 0 {
			tab := RopeTable[float32]{Half: half, Cos: pointwiseInputs(rng, 3*half), Sin: pointwiseInputs(rng, 3*half)}
			x := pointwiseInputs(rng, 3*2*2*half)
			y = append([]float32(nil), x...)
			tab.RotateRows(y, 2, func(r int) int { return 2 - r }, -1)
			check("RoPE", y, func(i int) float32 {
				r, h, j := i/(4*half), i%(4*half)/(2*half), i%(2*half)
				row := x[r*4*half+h*2*half:]
				cs, sn := tab.Cos[(2-r)*half:], tab.Sin[(2-r)*half:]
				if j < half {
					si := float32(-1 * sn[j])
					return float32(row[j]*cs[j]) - float32(row[j+half]*si)
				}
				j -= half
				si := float32(-1 * sn[j])
				return float32(row[j+half]*cs[j]) + float32(row[j]*si)
			})
		}

		// SwiGLU, on the same sigmoid its loops use.
		sig := make([]float32, n)
		sigmoidSlice(sig, a)
		y = append([]float32(nil), a...)
		SwiGLUInto(y, y, u)
		check("silu(a)·u into a", y, func(i int) float32 { return float32(float32(a[i]*sig[i]) * u[i]) })
		da, du := make([]float32, n), make([]float32, n)
		swigluBackward(a, u, c, da, du)
		check("dSwiGLU/da", da, func(i int) float32 {
			return float32(float32(float32(c[i]*u[i])*sig[i]) * float32(1+float32(a[i]*float32(1-sig[i]))))
		})
		check("dSwiGLU/du", du, func(i int) float32 { return float32(float32(c[i]*a[i]) * sig[i]) })
	}
}

// sinkF32 keeps a benchmark's result alive.
var sinkF32 float32

// BenchmarkPointwiseLoops times the loops at a 1,024-token × 1,376
// activation (SmolLM2-mid's MLP width).
func BenchmarkPointwiseLoops(b *testing.B) {
	const n = 1024 * 1376
	rng := rand.New(rand.NewPCG(1, 2))
	normal := func() []float32 { // no specials: sigmoid's fast path throughout
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	x, y, u, g := normal(), make([]float32, n), normal(), normal()
	da, du := make([]float32, n), make([]float32, n)
	for _, bc := range []struct {
		name string
		f    func()
	}{
		{"addScaled", func() { addScaledSlice(y, x, u, 2) }},
		{"swiglu", func() { SwiGLUInto(y, x, u) }},
		{"swigluBackward", func() { swigluBackward(x, u, g, da, du) }},
		{"max", func() {
			for r := 0; r+256 <= n; r += 256 { // rows of 256 scores, as attention's
				sinkF32 = maxSlice(x[r : r+256])
			}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				bc.f()
			}
		})
	}
}

// TestMaxSlice holds maxSlice to Go's max folded over the slice (NaN if
// any value is, −0 below +0), bit for bit: random rows of every length to
// 300 with the largest value at the start, the end (the assembly's
// overlapping last block) and anywhere; and the special rows, where
// maxFast must hand back to the scalar loop: a NaN at the start, inside
// and in the last block, a largest value of ±0, all −Inf, +Inf.
func TestMaxSlice(t *testing.T) {
	fold := func(xs []float32) float32 {
		m := xs[0]
		for _, x := range xs[1:] {
			m = max(m, x)
		}
		return m
	}
	check := func(what string, xs []float32) {
		t.Helper()
		got, want := maxSlice(xs), fold(xs)
		if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
			t.Fatalf("%s, n=%d: maxSlice = %v (%#x), want %v (%#x)", what, len(xs), got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
	rng := rand.New(rand.NewPCG(41, 42))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for n := 1; n <= 300; n++ {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		check("random", xs)
		if haveMaxAVX2 && n >= 16 {
			if _, ok := maxFast(xs); !ok {
				t.Fatalf("n=%d: maxFast declined an ordinary row: the assembly never runs", n)
			}
		}
		for _, at := range []int{0, n - 1, n / 2} {
			ys := append([]float32(nil), xs...)
			ys[at] = 100
			check("largest placed", ys)
			ys[at] = nan
			check("NaN", ys)
		}
		zs := make([]float32, n)
		for i := range zs {
			zs[i] = -float32(math.Abs(rng.NormFloat64())) - 1
		}
		zs[n/3] = float32(math.Copysign(0, -1))
		check("largest −0", zs)
		zs[n-1] = 0
		check("largest +0 after −0", zs)
		for i := range zs {
			zs[i] = -inf
		}
		check("all −Inf", zs)
		zs[n/2] = inf
		check("+Inf", zs)
	}
}
