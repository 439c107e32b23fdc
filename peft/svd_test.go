package peft

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A matrix built from known orthonormal factors and singular values
// decomposes back into them: the values exactly to float64 rounding, the
// product to 1e-12.
func TestSVDRecoversAKnownDecomposition(t *testing.T) {
	for _, sh := range [][2]int{{7, 4}, {4, 7}, {5, 5}} {
		rows, cols := sh[0], sh[1]
		k := min(rows, cols)
		rng := rand.New(rand.NewPCG(1, uint64(rows)))
		u, v := orthonormal(rng, rows, k), orthonormal(rng, cols, k)
		want := []float64{9, 4, 2.5, 1, 0.5}[:k]
		w := make([]float64, rows*cols)
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				for l := 0; l < k; l++ {
					w[i*cols+j] += u[i*k+l] * want[l] * v[j*k+l]
				}
			}
		}
		gu, gs, gv, err := svd(append([]float64(nil), w...), rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		for l := range want {
			if math.Abs(gs[l]-want[l]) > 1e-12 {
				t.Errorf("%v: singular value %d = %v, want %v", sh, l, gs[l], want[l])
			}
		}
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				var x float64
				for l := 0; l < k; l++ {
					x += gu[i*k+l] * gs[l] * gv[j*k+l]
				}
				if math.Abs(x-w[i*cols+j]) > 1e-12 {
					t.Fatalf("%v: U·S·Vᵀ[%d,%d] = %v, want %v", sh, i, j, x, w[i*cols+j])
				}
			}
		}
	}
}

// orthonormal returns n×k (k ≤ n) with orthonormal columns, by
// Gram-Schmidt on random vectors.
func orthonormal(rng *rand.Rand, n, k int) []float64 {
	q := make([]float64, n*k)
	for c := 0; c < k; c++ {
		for i := 0; i < n; i++ {
			q[i*k+c] = rng.NormFloat64()
		}
		for p := 0; p < c; p++ {
			var d float64
			for i := 0; i < n; i++ {
				d += q[i*k+c] * q[i*k+p]
			}
			for i := 0; i < n; i++ {
				q[i*k+c] -= d * q[i*k+p]
			}
		}
		var norm float64
		for i := 0; i < n; i++ {
			norm += q[i*k+c] * q[i*k+c]
		}
		for i := 0; i < n; i++ {
			q[i*k+c] /= math.Sqrt(norm)
		}
	}
	return q
}
