package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func openOneDNN(t testing.TB, workers int) *OneDNN {
	t.Helper()
	d, err := OpenOneDNN(workers)
	if err != nil {
		t.Skip(err)
	}
	return d
}

func TestOneDNNMissingLibrary(t *testing.T) {
	t.Setenv("MIXTUNE_ONEDNN", "/nonexistent/libdnnl.so.2")
	if _, err := OpenOneDNN(0); err == nil || !strings.Contains(err.Error(), "load oneDNN") {
		t.Fatalf("OpenOneDNN with a missing library: %v", err)
	}
}

// gammaBound is γ_k·Σ_p |a_ip|·|b_pj| with γ_k = k·u/(1-k·u), u = 2^-24:
// the classic bound on the error of a float32 dot product of length k
// summed in any order, with or without fused multiply-adds (Higham,
// Accuracy and Stability of Numerical Algorithms, 3.1).
func gammaBound(k int, absSum float64) float64 {
	ku := float64(k) * 0x1p-24
	return ku / (1 - ku) * absSum
}

// bf16Values draws n random bf16 values of mixed magnitudes (bits, and as
// float64), so that cancellation and exponent spread both occur.
func bf16Values(rng *rand.Rand, n int) ([]uint16, []float64) {
	u := make([]uint16, n)
	f := make([]float64, n)
	for i := range u {
		x := float32((rng.Float64()*2 - 1) * math.Ldexp(1, rng.IntN(9)-4))
		u[i] = uint16(math.Float32bits(x) >> 16)
		f[i] = float64(math.Float32frombits(uint32(u[i]) << 16))
	}
	return u, f
}

// accuracyCase is one m×n×k product on bf16 inputs for the accuracy
// tests: op(A) and op(B) as bf16 bits and as float64, their float64
// product, and Σ_p |a_ip|·|b_pj| for each element of C.
type accuracyCase struct {
	m, n, k      int
	tA, tB       bool
	au, bu       []uint16
	af, bf       []float64
	lda, ldb     int
	want, absSum []float64
}

func newAccuracyCase(rng *rand.Rand, m, n, k int, tA, tB bool) *accuracyCase {
	rowsA, colsA := m, k
	if tA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if tB {
		rowsB, colsB = n, k
	}
	c := &accuracyCase{m: m, n: n, k: k, tA: tA, tB: tB, lda: colsA, ldb: colsB}
	c.au, c.af = bf16Values(rng, rowsA*colsA)
	c.bu, c.bf = bf16Values(rng, rowsB*colsB)
	c.want = make([]float64, m*n)
	naive(tA, tB, m, n, k, 1, c.af, colsA, c.bf, colsB, 0, c.want, n)
	c.absSum = make([]float64, m*n)
	naive(tA, tB, m, n, k, 1, absAll(c.af), colsA, absAll(c.bf), colsB, 0, c.absSum, n)
	return c
}

// check fails when an element of got (C, row stride n) is farther from the
// float64 product than γ_k·Σ|a||b|, or, for k ≤ 2 (one or two exact
// products, one rounding), is not the correctly rounded sum; it raises
// worst[name k=K] to the largest error relative to the bound.
func (c *accuracyCase) check(t *testing.T, name string, got []float32, worst map[string]float64) {
	t.Helper()
	key := fmt.Sprintf("%s k=%d", name, c.k)
	for i, want := range c.want {
		err := math.Abs(float64(got[i]) - want)
		bound := gammaBound(c.k, c.absSum[i])
		if err > bound {
			t.Fatalf("%s k=%d tA=%v tB=%v: C[%d] = %v, want %v: error %.3g > bound %.3g", name, c.k, c.tA, c.tB, i, got[i], want, err, bound)
		}
		if c.k <= 2 && got[i] != float32(want) {
			t.Fatalf("%s k=%d tA=%v tB=%v: C[%d] = %v, want %v exactly", name, c.k, c.tA, c.tB, i, got[i], float32(want))
		}
		if bound > 0 {
			worst[key] = max(worst[key], err/bound)
		}
	}
}

// absAll returns |x| elementwise.
func absAll(x []float64) []float64 {
	r := make([]float64, len(x))
	for i, v := range x {
		r[i] = math.Abs(v)
	}
	return r
}

// TestOneDNNAccuracy: for inputs that are bf16 values, GemmBF16 and
// Sgemm stay within the float32 accumulation bound of a float64
// reference, in every transpose combination and at training depths.
// The worst error relative to the bound is logged.
func TestOneDNNAccuracy(t *testing.T) {
	d := openOneDNN(t, 2)
	if !d.BF16() {
		t.Logf("GemmBF16 not checked: oneDNN's bf16 GEMM needs AVX-512 (%s)", d.Name())
	}
	rng := rand.New(rand.NewPCG(11, 12))
	worst := map[string]float64{}
	for _, k := range []int{1, 2, 3, 31, 576, 1536, 5632} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				c := newAccuracyCase(rng, 37, 53, k, ta, tb)
				if d.BF16() {
					got16 := make([]float32, c.m*c.n)
					d.GemmBF16(ta, tb, c.m, c.n, k, 1, c.au, c.lda, c.bu, c.ldb, 0, got16, c.n)
					c.check(t, "GemmBF16", got16, worst)
				}
				got32 := make([]float32, c.m*c.n)
				d.Sgemm(ta, tb, c.m, c.n, k, 1, to32(c.af), c.lda, to32(c.bf), c.ldb, 0, got32, c.n)
				c.check(t, "Sgemm", got32, worst)
			}
		}
	}
	for _, k := range []int{31, 576, 1536, 5632} {
		t.Logf("k=%d: worst error / γ_k bound: GemmBF16 %.3g, Sgemm %.3g", k, worst[fmt.Sprintf("GemmBF16 k=%d", k)], worst[fmt.Sprintf("Sgemm k=%d", k)])
	}
}

// The goroutine split must not change a bit: every row block is one
// single-threaded call of the same shape, whatever the worker count. Nor
// may where the operands lie in memory (odd offsets change their
// alignment).
func TestOneDNNSplitIsBitIdentical(t *testing.T) {
	for _, sh := range []gemmShape{
		{"fwd", false, true, 1000, 96, 300},
		{"dx", false, false, 1000, 96, 300},
		{"dW", true, false, 1000, 96, 300},
	} {
		rng := rand.New(rand.NewPCG(13, 14))
		rowsA, colsA := sh.m, sh.k
		if sh.transA {
			rowsA, colsA = sh.k, sh.m
		}
		rowsB, colsB := sh.k, sh.n
		if sh.transB {
			rowsB, colsB = sh.n, sh.k
		}
		au, af := bf16Values(rng, rowsA*colsA)
		bu, bf := bf16Values(rng, rowsB*colsB)
		a32, b32 := to32(af), to32(bf)
		var ref32, ref16 []float32
		shift := func(x []float32, off int) []float32 { return append(make([]float32, off), x...)[off:] }
		shift16 := func(x []uint16, off int) []uint16 { return append(make([]uint16, off), x...)[off:] }
		for _, workers := range []int{1, 2, 3} {
			d := openOneDNN(t, workers)
			off := workers - 1
			c32 := shift(make([]float32, sh.m*sh.n), 2*off)
			d.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, shift(a32, off), colsA, shift(b32, 3*off), colsB, 0, c32, sh.n)
			c16 := shift(make([]float32, sh.m*sh.n), off)
			if d.BF16() { // else c16 stays zero: Sgemm alone is checked
				d.GemmBF16(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, shift16(au, off), colsA, shift16(bu, 5*off), colsB, 0, c16, sh.n)
			}
			if ref32 == nil {
				ref32, ref16 = c32, c16
				continue
			}
			for i := range c32 {
				if math.Float32bits(c32[i]) != math.Float32bits(ref32[i]) || math.Float32bits(c16[i]) != math.Float32bits(ref16[i]) {
					t.Fatalf("%s with %d goroutines: element %d differs from 1 goroutine", sh.name, workers, i)
				}
			}
		}
	}
}

// TestOneDNNOpenMPThreads reports (it cannot promise anything) whether
// oneDNN's own OpenMP threading gives the same bits with 1 and 2
// threads: it picks its blocking and k-splitting by thread count.
func TestOneDNNOpenMPThreads(t *testing.T) {
	d := openOneDNN(t, 1)
	rng := rand.New(rand.NewPCG(15, 16))
	for _, sh := range []gemmShape{
		{"fwd T512 576→1536", false, true, 512, 1536, 576},
		{"dx T512 576→1536", false, false, 512, 576, 1536},
		{"dW T512 576→1536", true, false, 1536, 576, 512},
		{"dW T2048 576→1536", true, false, 1536, 576, 2048},
		{"tall-k 64×64×4096", false, false, 64, 64, 4096},
		{"tall-k 32×48×4096", false, false, 32, 48, 4096},
		{"tall-k 24×24×8192", true, false, 24, 24, 8192},
	} {
		rowsA, colsA := sh.m, sh.k
		if sh.transA {
			rowsA, colsA = sh.k, sh.m
		}
		rowsB, colsB := sh.k, sh.n
		if sh.transB {
			rowsB, colsB = sh.n, sh.k
		}
		au, af := bf16Values(rng, rowsA*colsA)
		bu, bf := bf16Values(rng, rowsB*colsB)
		a32, b32 := to32(af), to32(bf)
		res := map[int][2][]float32{}
		for _, threads := range []int{1, 2} {
			o := *d
			o.ompThreads = threads
			c32 := make([]float32, sh.m*sh.n)
			o.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, a32, colsA, b32, colsB, 0, c32, sh.n)
			c16 := make([]float32, sh.m*sh.n)
			if o.BF16() {
				o.GemmBF16(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, au, colsA, bu, colsB, 0, c16, sh.n)
			}
			res[threads] = [2][]float32{c32, c16}
		}
		for i, name := range []string{"sgemm", "bf16"} {
			diff := 0
			for j := range res[1][i] {
				if math.Float32bits(res[1][i][j]) != math.Float32bits(res[2][i][j]) {
					diff++
				}
			}
			t.Logf("%s %s: %d of %d elements differ between 1 and 2 OpenMP threads", sh.name, name, diff, sh.m*sh.n)
		}
	}
}
