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
