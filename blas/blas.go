// Package blas is mixtune's single seam to general matrix multiplication.
//
// Every matmul in the model goes through a Backend: OpenBLAS or oneDNN,
// loaded at run time without cgo when the machine has them; otherwise
// Native, mixtune's own pure-Go backend (an AVX2/FMA micro-kernel in Go
// assembly, a portable Go kernel elsewhere); or gonum's pure-Go
// implementation, kept as a reference. Matrices are row-major, as in CBLAS with CblasRowMajor.
package blas

import (
	"fmt"
	"strings"
)

// Backend computes C = alpha·op(A)·op(B) + beta·C for row-major matrices,
// where op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n and C is m×n; lda, ldb
// and ldc are the row strides of the matrices as stored.
type Backend interface {
	// Name says which implementation runs, for logs and run records.
	Name() string
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int)
}

// Open returns the backend a config or flag names: "auto" (the fastest
// that loads here, by a calibration cached in the user's cache directory:
// Choose, which also says why), "openblas" or "onednn" (an error if the
// library does not load), "native" or "gonum". threads is how many
// goroutines share one large product (0: GOMAXPROCS).
func Open(name string, threads int) (Backend, error) {
	k := Kind(strings.ToLower(strings.TrimSpace(name)))
	if k == "go" {
		k = KindNative
	}
	c, err := Choose(k, threads, AutoOptions{})
	return c.Backend, err
}

// Gemm dispatches on the element type, so generic kernels can call one function.
func Gemm[T float32 | float64](be Backend, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	switch a := any(a).(type) {
	case []float32:
		be.Sgemm(transA, transB, m, n, k, float32(alpha), a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		be.Dgemm(transA, transB, m, n, k, float64(alpha), a, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
}

// Finisher is a Backend that hands each block of C to a callback as soon
// as the block is final, on the goroutine that computed it, while the
// block is still in cache: an epilogue (rounding the product to a lower
// precision) then costs no separate pass over C.
type Finisher interface {
	// SgemmFinish is Sgemm that calls done(i0, i1, j0, j1) for disjoint
	// blocks of rows [i0, i1) × columns [j0, j1) of C that together cover
	// it, each once its values are final; calls may run concurrently.
	SgemmFinish(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int))
}

// SgemmFinish runs be.SgemmFinish where be is a Finisher, otherwise
// be.Sgemm and then done over the whole of C.
func SgemmFinish(be Backend, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	if m == 0 || n == 0 {
		return
	}
	if f, ok := be.(Finisher); ok {
		f.SgemmFinish(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, done)
		return
	}
	be.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	done(0, m, 0, n)
}

// Widener is a Finisher that reads op(B) as 16-bit values (bf16 or fp16
// bits), widening each block to float32 with widen just before packing it:
// a frozen 16-bit weight feeds the fp32 kernel with no float32 copy and no
// product split into blocks of the weight (each of which would pack op(A)
// again). The result is the bits of SgemmFinish on the widened B.
type Widener interface {
	Finisher
	SgemmWiden(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, widen func(dst []float32, src []uint16), ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int))
}

// Loader is a Finisher that reads op(B) through a function instead of a
// float32 slice: load(dst, off) writes the stored elements [off,
// off+len(dst)) of B (row-major, row stride ldb, lenB elements in all) to
// dst as float32, and is only asked for runs inside one stored row. The
// GEMM calls it for one panel of op(B) at a time, just before packing the
// panel, into a scratch of a few panel strips: a weight stored in another
// form (4-bit blocks, say) feeds the fp32 kernel with no float32 copy of
// it and no product split into blocks of it. The result is the bits of
// SgemmFinish on B loaded whole. load may run on several goroutines at
// once.
type Loader interface {
	Finisher
	SgemmLoad(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, load func(dst []float32, off int), lenB, ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int))
}

// checkGemm reports GEMM arguments that would read or write past a slice
// (la, lb and lc are the lengths of a, b and c): programmer errors, which
// the native and OpenBLAS backends turn into panics as gonum does, and
// which OpenBLAS, a C library, could not detect itself. An empty C reads
// and writes nothing, so then only the dimensions are checked.
func checkGemm(op string, transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) error {
	switch {
	case m < 0:
		return fmt.Errorf("blas: %s: m = %d < 0", op, m)
	case n < 0:
		return fmt.Errorf("blas: %s: n = %d < 0", op, n)
	case k < 0:
		return fmt.Errorf("blas: %s: k = %d < 0", op, k)
	}
	rowsA, colsA := m, k
	if transA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if transB {
		rowsB, colsB = n, k
	}
	switch {
	case lda < max(1, colsA):
		return fmt.Errorf("blas: %s: bad lda = %d for A stored %d×%d (transA = %v)", op, lda, rowsA, colsA, transA)
	case ldb < max(1, colsB):
		return fmt.Errorf("blas: %s: bad ldb = %d for B stored %d×%d (transB = %v)", op, ldb, rowsB, colsB, transB)
	case ldc < max(1, n):
		return fmt.Errorf("blas: %s: bad ldc = %d for C %d×%d", op, ldc, m, n)
	case m == 0 || n == 0:
		return nil
	case rowsA > 0 && colsA > 0 && la < (rowsA-1)*lda+colsA:
		return fmt.Errorf("blas: %s: len(a) = %d, want at least %d for A stored %d×%d with lda = %d", op, la, (rowsA-1)*lda+colsA, rowsA, colsA, lda)
	case rowsB > 0 && colsB > 0 && lb < (rowsB-1)*ldb+colsB:
		return fmt.Errorf("blas: %s: len(b) = %d, want at least %d for B stored %d×%d with ldb = %d", op, lb, (rowsB-1)*ldb+colsB, rowsB, colsB, ldb)
	case lc < (m-1)*ldc+n:
		return fmt.Errorf("blas: %s: len(c) = %d, want at least %d for C %d×%d with ldc = %d", op, lc, (m-1)*ldc+n, m, n, ldc)
	}
	return nil
}
