package blas

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// Gonum is the pure-Go backend. It needs nothing but the Go toolchain and
// splits C into fixed blocks across goroutines, each block summing over k in
// the same order whatever the thread count, so its results do not depend on
// GOMAXPROCS.
type Gonum struct{}

func (Gonum) Name() string { return "gonum (pure Go)" }

func (Gonum) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(trans(transA), trans(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func (Gonum) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	gonum.Implementation{}.Dgemm(trans(transA), trans(transB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}
