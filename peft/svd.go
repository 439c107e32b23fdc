package peft

import (
	"errors"

	"gonum.org/v1/gonum/mat"
)

// svd returns the thin singular value decomposition of the rows×cols
// matrix w (row-major): w = U·diag(S)·Vᵀ with S descending, U [rows, k] and
// V [cols, k] row-major, k = min(rows, cols). It runs in float64 (LAPACK's
// dgesvd in gonum), so checkpoints stored in bf16, fp16 or fp32 all
// decompose at full precision: PiSSA and LoRA extraction both start here.
func svd(w []float64, rows, cols int) (u, s, v []float64, err error) {
	var f mat.SVD
	if !f.Factorize(mat.NewDense(rows, cols, w), mat.SVDThin) {
		return nil, nil, nil, errors.New("the singular value decomposition did not converge")
	}
	var um, vm mat.Dense
	f.UTo(&um)
	f.VTo(&vm)
	return um.RawMatrix().Data, f.Values(nil), vm.RawMatrix().Data, nil
}

// orthonormalColumns returns Q_r [rows, r] row-major: an orthonormal basis
// of the first r columns of the rows×cols matrix w (row-major), from
// their QR decomposition in float64 (LAPACK's dgeqrf in gonum).
func orthonormalColumns(w []float64, rows, cols, r int) ([]float64, error) {
	first := mat.NewDense(rows, r, nil)
	for i := 0; i < rows; i++ {
		for j := 0; j < r; j++ {
			first.Set(i, j, w[i*cols+j])
		}
	}
	var f mat.QR
	f.Factorize(first)
	var q mat.Dense
	f.QTo(&q)
	var rm mat.Dense
	f.RTo(&rm)
	for j := 0; j < r; j++ {
		if rm.At(j, j) == 0 {
			return nil, errors.New("the first r columns of the weight are linearly dependent, so Q_r·R_r is not unique")
		}
	}
	out := make([]float64, rows*r)
	for i := 0; i < rows; i++ {
		for j := 0; j < r; j++ {
			out[i*r+j] = q.At(i, j)
		}
	}
	return out, nil
}
