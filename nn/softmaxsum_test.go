package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// sum16Spec is sum16's order written out: element j into partial j mod
// 16, then the halves folded: p[k]+p[k+8], then +4, +2, +1.
func sum16Spec[T float32 | float64](x []T) T {
	var p [16]T
	for j, v := range x {
		p[j%16] += v
	}
	var q [8]T
	for k := range q {
		q[k] = p[k] + p[k+8]
	}
	r := [4]T{q[0] + q[4], q[1] + q[5], q[2] + q[6], q[3] + q[7]}
	return (r[0] + r[2]) + (r[1] + r[3])
}

// softmaxSumInputs are rows of every length up to 40 and a few longer
// ones, some with values that send expf off its fast path (results that
// underflow to subnormals or zero, overflow, NaN) at random places, in a
// whole block or in the masked last one.
func softmaxSumInputs() [][]float32 {
	rng := rand.New(rand.NewPCG(3, 4))
	var rows [][]float32
	for _, n := range append([]int{0, 1, 15, 16, 17, 31, 32, 33, 100, 257}, 2, 3, 5, 7, 8, 9, 12, 14, 20, 24, 28, 36, 40) {
		for _, rare := range []int{0, 1, 3} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 4)
			}
			for r := 0; r < rare && n > 0; r++ {
				x[rng.IntN(n)] = []float32{-95, -120, -300, 100, float32(math.NaN())}[rng.IntN(5)]
			}
			rows = append(rows, x)
		}
	}
	return rows
}

// TestExpSubSumExact: expSubSum (AVX-512 where the CPU has it: sixteen
// exponentials at a time, each block added to sixteen partial sums in a
// register, the last block masked; Go for blocks that need expf's rare
// paths) gives each exp(x − m) the scalar expf's bits and the sum
// sum16Spec's, in place and not; and the sum is within the float64
// bound of any order, (n−1)·u·Σ e.
func TestExpSubSumExact(t *testing.T) {
	for ri, x := range softmaxSumInputs() {
		for _, m := range []float32{0, 2.5, -3} {
			t.Run(fmt.Sprintf("row%d/len%d/m%v", ri, len(x), m), func(t *testing.T) {
				want := make([]float32, len(x))
				var exact float64
				for i, v := range x {
					want[i] = expf(v - m)
					exact += float64(want[i])
				}
				wantSum := sum16Spec(want)
				got := make([]float32, len(x))
				sum := expSubSum(got, x, m)
				inPlace := append([]float32(nil), x...)
				sumInPlace := expSubSum(inPlace, inPlace, m)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) || math.Float32bits(inPlace[i]) != math.Float32bits(want[i]) {
						t.Fatalf("exp(x[%d] − m) = %v (in place %v), want %v", i, got[i], inPlace[i], want[i])
					}
				}
				if math.Float32bits(sum) != math.Float32bits(wantSum) || math.Float32bits(sumInPlace) != math.Float32bits(wantSum) {
					t.Fatalf("sum %v (in place %v), want %v", sum, sumInPlace, wantSum)
				}
				if bound := float64(len(x)) * 0x1p-24 * exact; !math.IsNaN(exact) && !math.IsInf(exact, 0) && math.Abs(float64(sum)-exact) > bound {
					t.Fatalf("sum %v, exact %v: more than %g apart", sum, exact, bound)
				}
				w64 := make([]float64, len(x))
				x64 := make([]float64, len(x))
				for i, v := range x {
					x64[i] = float64(v)
				}
				s64 := expSubSum(w64, x64, float64(m))
				var e64 float64
				for i, v := range x64 {
					e64 += math.Exp(v - float64(m))
					if w64[i] != math.Exp(v-float64(m)) && !math.IsNaN(v) {
						t.Fatalf("float64: exp(x[%d] − m) = %v, want %v", i, w64[i], math.Exp(v-float64(m)))
					}
				}
				if bound := float64(len(x)) * 0x1p-53 * e64; !math.IsNaN(e64) && !math.IsInf(e64, 0) && math.Abs(s64-e64) > bound {
					t.Fatalf("float64 sum %v, exact %v: more than %g apart", s64, e64, bound)
				}
			})
		}
	}
}

// TestDot16Exact: dot16 (AVX-512 where the CPU has it) is sum16Spec's
// order over the rounded products a[i]·b[i], bit for bit, for every
// length, and within (n+1)·u·Σ|a·b| of the float64 dot product.
func TestDot16Exact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := range 70 {
		a, b := make([]float32, n), make([]float32, n)
		prod := make([]float32, n)
		var exact, abs float64
		for i := range a {
			a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			prod[i] = a[i] * b[i]
			exact += float64(a[i]) * float64(b[i])
			abs += math.Abs(float64(a[i]) * float64(b[i]))
		}
		got, want := dot16(a, b), sum16Spec(prod)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("n=%d: dot16 %v, want %v", n, got, want)
		}
		if bound := float64(n+1) * 0x1p-24 * abs; math.Abs(float64(got)-exact) > bound {
			t.Fatalf("n=%d: dot16 %v, exact %v: more than %g apart", n, got, exact, bound)
		}
		a64, b64 := make([]float64, n), make([]float64, n)
		for i := range a {
			a64[i], b64[i] = float64(a[i]), float64(b[i])
		}
		if got := dot16(a64, b64); math.Abs(got-exact) > float64(n+1)*0x1p-53*abs {
			t.Fatalf("n=%d: float64 dot16 %v, exact %v", n, got, exact)
		}
	}
}

// TestCausalSoftmaxRowsExact holds causalSoftmaxRows, which takes groups
// of rows through softmax's steps together, to softmax written out row by
// row: the max of row i over [start, i], expf of each value less it, their
// sum in sum16's order, each value times the sum's reciprocal, zeros
// outside [start, i]. Bit for bit (any NaN for a NaN), for row counts
// around the group size, rows that start late (a sliding window, packed
// sequences) and scores that send expf off its fast path.
func TestCausalSoftmaxRowsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 7, 8, 9, 17, 40} {
		for _, window := range []int{0, 5} {
			name := fmt.Sprintf("t%d/window%d", n, window)
			p := make([]float32, n*n)
			for i := range p {
				p[i] = float32(rng.NormFloat64() * 5)
			}
			for r := 0; r < n/4; r++ {
				p[rng.IntN(len(p))] = []float32{-120, -300, 100, float32(math.Inf(-1)), float32(math.NaN())}[rng.IntN(5)]
			}
			start := make([]int, n)
			for i := range start {
				if window > 0 {
					start[i] = max(0, i-window+1)
				}
			}
			want := make([]float32, n*n)
			for i := range n {
				row := p[i*n+start[i] : i*n+i+1]
				m := row[0]
				for _, x := range row[1:] {
					m = max(m, x)
				}
				e := make([]float32, len(row))
				for j, x := range row {
					e[j] = expf(x - m)
				}
				inv := 1 / sum16Spec(e)
				for j := range e {
					want[i*n+start[i]+j] = e[j] * inv
				}
			}
			got := append([]float32(nil), p...)
			for i := range got { // what must be cleared
				if j := i % n; j > i/n || j < start[i/n] {
					got[i] = 7
				}
			}
			next := 0
			causalSoftmaxRows(got, n, start, 0, n, func(i int, row []float32) {
				if i != next || &row[0] != &got[i*n] || len(row) != n {
					t.Fatalf("%s: done called on row %d (len %d), want row %d", name, i, len(row), next)
				}
				next++
			})
			if next != n {
				t.Fatalf("%s: done called on %d rows, want %d", name, next, n)
			}
			for i := range want {
				if g, w := got[i], want[i]; g != g && w != w { // NaN: its payload is not kept
					continue
				}
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: p[%d][%d] = %v (%#x), want %v (%#x)", name, i/n, i%n, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// TestCausalSoftmaxGradRowsExact holds causalSoftmaxGradRows to softmax's
// backward written out row by row: before's change to row i, then s =
// Σ p·dp over [start, i] (the products summed in sum16's order, as
// TestDot16Exact holds dot16 to), each dp replaced by p·(dp − s), zeros
// outside [start, i], then after's change. Bit for bit, with before and
// after each called once per row, in order.
func TestCausalSoftmaxGradRowsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, n := range []int{1, 7, 8, 9, 17, 40} {
		for _, window := range []int{0, 5} {
			name := fmt.Sprintf("t%d/window%d", n, window)
			start := make([]int, n)
			for i := range start {
				if window > 0 {
					start[i] = max(0, i-window+1)
				}
			}
			p, dp := make([]float32, n*n), make([]float32, n*n)
			for i := range p {
				p[i], dp[i] = float32(rng.Float64()), float32(rng.NormFloat64())
			}
			// before halves row i's values, after adds i to them: a change
			// each that the spec makes in the same places
			want := append([]float32(nil), dp...)
			for i := range n {
				row := want[i*n : (i+1)*n]
				for j := range row {
					row[j] /= 2
				}
				lo := start[i]
				prod := make([]float32, i+1-lo)
				for j := range prod {
					prod[j] = p[i*n+lo+j] * row[lo+j]
				}
				sum := sum16Spec(prod)
				for j := range row {
					switch {
					case j < lo || j > i:
						row[j] = 0
					default:
						row[j] = p[i*n+j] * (row[j] - sum)
					}
					row[j] += float32(i)
				}
			}
			var nb, na int
			causalSoftmaxGradRows(p, dp, n, start, 0, n, func(i int, row []float32) {
				if i != nb || &row[0] != &dp[i*n] || len(row) != n {
					t.Fatalf("%s: before called on row %d, want row %d", name, i, nb)
				}
				nb++
				for j := range row {
					row[j] /= 2
				}
			}, func(i int, row []float32) {
				if i != na || &row[0] != &dp[i*n] || len(row) != n || na >= nb {
					t.Fatalf("%s: after called on row %d (before on %d rows), want row %d", name, i, nb, na)
				}
				na++
				for j := range row {
					row[j] += float32(i)
				}
			})
			if nb != n || na != n {
				t.Fatalf("%s: before called on %d rows and after on %d, want %d", name, nb, na, n)
			}
			for i := range want {
				if math.Float32bits(dp[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s: dS[%d][%d] = %v, want %v", name, i/n, i%n, dp[i], want[i])
				}
			}
		}
	}
}
