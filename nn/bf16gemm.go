package nn

import (
	"github.com/mixtune/mixtune/amp"
)

// bf16Path says whether a product whose operands have formats fa and fb
// runs on the engine's bf16 GEMM: both operands hold bf16 values and the
// engine has one. Otherwise it is emulated in the fp32 kernels, the same
// bits as before the bf16 GEMM existed.
func (e *Engine) bf16Path(fa, fb amp.Format) bool {
	return e.BF16 != nil && fa == amp.BF16 && fb == amp.BF16
}

// gemmBF16 computes C = op(A)·op(B) on the engine's bf16 GEMM and rounds C
// to f as Engine.sgemmRound does (f = FP32: not rounded). A holds bf16
// values as float32; B holds them as float32 (b) or, for a weight stored
// in bf16, as its bits (bBits, used when b is nil). The float32 operands
// are encoded as bf16 bits with round-to-nearest-even, exact for the bf16
// values the policy put there.
func (e *Engine) gemmBF16(f amp.Format, grad, transA, transB bool, m, n, k int, a []float32, lda int, b []float32, bBits []uint16, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	ab, releaseA := e.bf16Bits(a[:extent(transA, m, k, lda)])
	defer releaseA()
	if b != nil {
		var releaseB func()
		bBits, releaseB = e.bf16Bits(b[:extent(transB, k, n, ldb)])
		defer releaseB()
	}
	e.BF16.GemmBF16(transA, transB, m, n, k, 1, ab, lda, bBits, ldb, 0, c, ldc)
	if f == amp.FP32 {
		return
	}
	rows := e.roundBlock(f, grad, c, ldc)
	e.parallel(m, max(1, (1<<14)/n), func(i0, i1 int) { rows(i0, i1, 0, n) })
	if grad {
		e.Grads.rounded.Add(int64(m) * int64(n))
	}
}

// extent is how many elements of a row-major operand a GEMM reads: op(X)
// is rows×cols, stored transposed when trans, with row stride ld.
func extent(trans bool, rows, cols, ld int) int {
	if trans {
		rows, cols = cols, rows
	}
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

// bf16Bits encodes x as bf16 bits in a buffer lent from the engine's
// pool; release gives it back.
func (e *Engine) bf16Bits(x []float32) (bits []uint16, release func()) {
	p, _ := e.bits.Get().(*[]uint16)
	if p == nil || cap(*p) < len(x) {
		b := make([]uint16, len(x))
		p = &b
	}
	bits = (*p)[:len(x)]
	e.parallel(len(x), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			bits[i] = amp.BF16.Bits16(x[i])
		}
	})
	return bits, func() { e.bits.Put(p) }
}
