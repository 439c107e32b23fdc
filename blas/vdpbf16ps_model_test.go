package blas

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// opAt returns op(X)[r][col] of a row-major X with row stride ld, as bits;
// zero past the k-th element along the summed dimension (the padding of
// an odd k) or past the rows or columns of a partial tile.
func opAt(x []uint16, trans bool, ld, r, col int) uint16 {
	if trans {
		return x[col*ld+r]
	}
	return x[r*ld+col]
}

// gemmBF16Model is NativeBF16.GemmBF16 computed with the model: each
// element of C summed from zero over the pairs along k in order (a zero
// pads an odd k), then alpha·sum + beta·C. The kernel must give its bits.
func gemmBF16Model(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	pair := func(x []uint16, trans bool, ld, r, p int) uint32 {
		lo := uint32(opAt(x, trans, ld, r, 2*p))
		if 2*p+1 < k {
			lo |= uint32(opAt(x, trans, ld, r, 2*p+1)) << 16
		}
		return lo
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var acc float32
			for p := 0; p < (k+1)/2; p++ {
				acc = vdpbf16psModel(acc, pair(a, transA, lda, i, p), pair(b, !transB, ldb, j, p))
			}
			c[i*ldc+j] = scaleBF16Sum(alpha, beta, acc, c[i*ldc+j])
		}
	}
}

// bigStep is one FMA of the instruction computed with math/big: the sum
// rounded once to 24 bits (nearest even, unbounded exponent), then
// flushed below 2^-126: an implementation independent of the model's.
func bigStep(acc float32, x, y uint16) float32 {
	p := new(big.Float).SetPrec(0).SetMode(big.ToNearestEven)
	p.Mul(big.NewFloat(bf16DAZ(x)), big.NewFloat(bf16DAZ(y)))
	s := new(big.Float).SetPrec(24).SetMode(big.ToNearestEven)
	s.Add(big.NewFloat(f32DAZ(acc)), p)
	r, _ := s.Float64() // exact: 24 bits
	if math.Abs(r) < 0x1p-126 {
		return float32(math.Copysign(0, r))
	}
	return float32(r)
}

// randBF16 draws a bf16 of random sign, mantissa and an exponent in
// [lo, hi] (unbiased), or, one time in 16, a denormal.
func randBF16(rng *rand.Rand, lo, hi int) uint16 {
	sign := uint16(rng.IntN(2)) << 15
	mant := uint16(rng.IntN(128))
	if rng.IntN(16) == 0 {
		return sign | max(mant, 1)
	}
	e := uint16(rng.IntN(hi-lo+1) + lo + 127)
	return sign | e<<7 | mant
}

// TestVDPBF16PSModelRoundsOnce holds the model to math/big on random
// lanes whose products and accumulators span tiny to huge, so that
// results round, flush to zero and cancel.
func TestVDPBF16PSModelRoundsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 1))
	for trial := 0; trial < 200000; trial++ {
		a := uint32(randBF16(rng, -70, 60)) | uint32(randBF16(rng, -70, 60))<<16
		b := uint32(randBF16(rng, -70, 60)) | uint32(randBF16(rng, -70, 60))<<16
		acc := math.Float32frombits(uint32(randBF16(rng, -126, 120))<<16 | uint32(rng.IntN(1<<16)))
		if trial%4 == 0 { // an accumulator near the products, for cancellation
			acc = float32(-bf16DAZ(uint16(a>>16)) * bf16DAZ(uint16(b>>16)))
		}
		want := bigStep(bigStep(acc, uint16(a>>16), uint16(b>>16)), uint16(a), uint16(b))
		if got := vdpbf16psModel(acc, a, b); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("acc %v (%#08x), a %#08x, b %#08x: model %v (%#08x), math/big %v (%#08x)",
				acc, math.Float32bits(acc), a, b, got, math.Float32bits(got), want, math.Float32bits(want))
		}
	}
}

// TestVDPBF16PSModelCases pins the semantics the SDM states, each with a
// case that tells it from the alternatives.
func TestVDPBF16PSModelCases(t *testing.T) {
	bf := func(x float32) uint16 { return uint16(math.Float32bits(x) >> 16) }
	pair := func(lo, hi uint16) uint32 { return uint32(lo) | uint32(hi)<<16 }
	for _, tc := range []struct {
		name string
		acc  float32
		a, b uint32
		want float32
	}{
		// 1 + (-1·1) first gives 0, then + 2^-30; the even product first
		// would round 1 + 2^-30 to 1 and end at 0
		{"odd element first", 1, pair(bf(0x1p-15), bf(-1)), pair(bf(0x1p-15), bf(1)), 0x1p-30},
		// each addition rounds: 1 + 2^-24 is a tie, to even 1, twice;
		// the pair summed first would give 1 + 2^-23
		{"a rounding per product", 1, pair(bf(0x1p-12), bf(0x1p-12)), pair(bf(0x1p-12), bf(0x1p-12)), 1},
		// 0x0040 is the denormal 2^-127: read as zero, not 2^-127·2^24
		{"denormal input read as zero", 0, pair(0x0040, 0), pair(bf(0x1p24), 0), 0},
		{"negative denormal input", 3, pair(0x8001, 0), pair(bf(1), 0), 3},
		// 2^-70·2^-70 = 2^-140 is below fp32's normals: flushed
		{"denormal result flushed", 0, pair(bf(0x1p-70), 0), pair(bf(0x1p-70), 0), 0},
		{"flushed keeps the sign", 0, pair(bf(-0x1p-70), 0), pair(bf(0x1p-70), 0), float32(math.Copysign(0, -1))},
		{"smallest normal kept", 0, pair(bf(0x1p-63), 0), pair(bf(0x1p-63), 0), 0x1p-126},
		{"overflow to infinity", math.MaxFloat32, pair(bf(0x1p104), 0), pair(bf(0x1p100), 0), float32(math.Inf(1))},
	} {
		got := vdpbf16psModel(tc.acc, tc.a, tc.b)
		if math.Float32bits(got) != math.Float32bits(tc.want) {
			t.Errorf("%s: model gives %v (%#08x), want %v (%#08x)", tc.name, got, math.Float32bits(got), tc.want, math.Float32bits(tc.want))
		}
	}
}

// TestBF16ModelGemmAccuracy holds the model's GEMM, the reference of the
// native kernel, to the float32 accumulation bound γ_k·Σ|a||b| of a
// float64 product, in every transpose and at training depths; it runs
// on every machine.
func TestBF16ModelGemmAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	worst := map[string]float64{}
	for _, k := range []int{1, 2, 3, 31, 576, 1536, 5632} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				c := newAccuracyCase(rng, 9, 35, k, ta, tb)
				got := make([]float32, c.m*c.n)
				gemmBF16Model(ta, tb, c.m, c.n, k, 1, c.au, c.lda, c.bu, c.ldb, 0, got, c.n)
				c.check(t, "model", got, worst)
			}
		}
	}
	t.Logf("worst error / γ_k bound: k=576 %.3g, k=5632 %.3g", worst["model k=576"], worst["model k=5632"])
}
