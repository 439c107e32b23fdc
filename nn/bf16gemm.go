package nn

import (
	"unsafe"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// bf16Packer is a bf16 GEMM that reads float32 operands itself, rounding
// them to bf16 as it packs them (no converted copy), takes op(B) packed
// in advance, and hands each finished block of C to an epilogue while it
// is in cache (blas.NativeBF16).
type bf16Packer interface {
	Gemm(transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, pb *blas.PackedBF16, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int))
	PackB(into *blas.PackedBF16, transB bool, k, n int, b blas.BF16Matrix) *blas.PackedBF16
}

// bf16Rounder is a bf16Packer whose kernel rounds C to bf16 as it stores
// each tile (blas.NativeBF16.GemmRound): no value of C rounds to zero
// there, so a gradient's rounding counts no underflow.
type bf16Rounder interface {
	GemmRound(transA, transB bool, m, n, k int, a, b blas.BF16Matrix, pb *blas.PackedBF16, c []float32, ldc int, done func(i0, i1, j0, j1 int))
}

// bandGemmer is a bf16 GEMM that skips what a causal mask leaves out of a
// product (blas.NativeBF16).
type bandGemmer interface {
	GemmBand(band blas.Band, transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, beta float32, c []float32, ldc int)
}

// packedWeight is a weight packed once for a bf16Packer, as one op reads
// it (op(B) of its product), and what the packing was made from: it is
// packed again when the weight's storage, the engine's bound weights
// (a checkpointed layer's graph) or, for a trainable weight, the
// engine's weights (Engine.WeightsChanged) change.
type packedWeight struct {
	trainable bool // follows Engine.WeightsChanged
	packed    *blas.PackedBF16
	data      unsafe.Pointer // the weight's first element
	version   uint64
	binds     uint64
}

// get returns the weight (b as float32, else bBits) packed as op(B) of a
// k×n product, packing it where the cache does not hold it.
func (w *packedWeight) get(e *Engine, p bf16Packer, transB bool, k, n int, b []float32, bBits []uint16, ldb int) *blas.PackedBF16 {
	data := unsafe.Pointer(unsafe.SliceData(bBits))
	if b != nil {
		data = unsafe.Pointer(unsafe.SliceData(b))
	}
	if w.packed != nil && w.data == data && w.binds == e.binds && (!w.trainable || w.version == e.weights) {
		if pk, pn := w.packed.Dims(); pk == k && pn == n {
			return w.packed
		}
	}
	w.packed = p.PackB(w.packed, transB, k, n, blas.BF16Matrix{F32: b, Bits: bBits, Ld: ldb})
	w.data, w.binds, w.version = data, e.binds, e.weights
	return w.packed
}

// bf16Path says whether a product whose operands have formats fa and fb
// runs on the engine's bf16 GEMM: both operands hold bf16 values and the
// engine has one. Otherwise it is emulated in the fp32 kernels, the same
// bits as before the bf16 GEMM existed.
func (e *Engine) bf16Path(fa, fb amp.Format) bool {
	return e.BF16 != nil && fa == amp.BF16 && fb == amp.BF16
}

// gemmBF16 computes C = op(A)·op(B) on the engine's bf16 GEMM and rounds C
// to f as Engine.sgemmRound does (f = FP32: not rounded). Each operand
// holds bf16 values, as float32 (F32) or as bits (Bits, used where F32 is
// nil): a weight stored in bf16, or an activation held in bf16
// (Builder.HoldBF16Operands). The float32 operands are encoded as bf16
// bits with round-to-nearest-even, exact for the bf16 values the policy
// put there.
//
// Where the GEMM is a bf16Packer, the operands are rounded as it packs
// them, C is rounded block by block as the GEMM finishes it (to bf16, by
// the kernel as it stores C, where it is a bf16Rounder), and w, when
// not nil, keeps B (a weight) packed from call to call.
func (e *Engine) gemmBF16(f amp.Format, grad, transA, transB bool, m, n, k int, a, b blas.BF16Matrix, c []float32, ldc int, w *packedWeight) {
	e.gemmBF16Then(f, grad, transA, transB, m, n, k, a, b, c, ldc, w, nil)
}

// gemmBF16Then is gemmBF16 that then calls then, when not nil, on blocks
// of C (rows [i0, i1), columns [j0, j1)) once they are rounded, each
// element once, from the worker that finished it: an epilogue that runs
// while the block is in cache.
func (e *Engine) gemmBF16Then(f amp.Format, grad, transA, transB bool, m, n, k int, a, b blas.BF16Matrix, c []float32, ldc int, w *packedWeight, then func(i0, i1, j0, j1 int)) {
	if m == 0 || n == 0 {
		return
	}
	if grad && f != amp.FP32 {
		defer e.Grads.rounded.Add(int64(m) * int64(n))
	}
	if p, ok := e.BF16.(bf16Packer); ok {
		var pb *blas.PackedBF16
		if w != nil {
			pb = w.get(e, p, transB, k, n, b.F32, b.Bits, b.Ld)
		}
		if r, ok := p.(bf16Rounder); ok && f == amp.BF16 {
			r.GemmRound(transA, transB, m, n, k, a, b, pb, c, ldc, then)
			return
		}
		done := then
		if f != amp.FP32 {
			rows := e.roundBlock(f, grad, c, ldc)
			done = func(i0, i1, j0, j1 int) {
				rows(i0, i1, j0, j1)
				if then != nil {
					then(i0, i1, j0, j1)
				}
			}
		}
		p.Gemm(transA, transB, m, n, k, 1, a, b, pb, 0, c, ldc, done)
		return
	}
	aBits, bBits := a.Bits, b.Bits
	if a.F32 != nil {
		var releaseA func()
		aBits, releaseA = e.bf16Bits(a.F32[:extent(transA, m, k, a.Ld)])
		defer releaseA()
	}
	if b.F32 != nil {
		var releaseB func()
		bBits, releaseB = e.bf16Bits(b.F32[:extent(transB, k, n, b.Ld)])
		defer releaseB()
	}
	e.BF16.GemmBF16(transA, transB, m, n, k, 1, aBits, a.Ld, bBits, b.Ld, 0, c, ldc)
	if f == amp.FP32 && then == nil {
		return
	}
	rows := e.roundBlock(f, grad, c, ldc)
	e.parallel(m, max(1, (1<<14)/n), func(i0, i1 int) {
		if f != amp.FP32 {
			rows(i0, i1, 0, n)
		}
		if then != nil {
			then(i0, i1, 0, n)
		}
	})
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
	p := e.lendBits(len(x))
	bits = (*p)[:len(x)]
	e.parallel(len(x), 1<<14, func(lo, hi int) { amp.BF16.Bits16Slice(bits[lo:hi], x[lo:hi]) })
	return bits, func() { e.bits.Put(p) }
}

// lendBits lends a buffer of at least n bf16 values from the engine's
// pool; the borrower puts it back (e.bits.Put).
func (e *Engine) lendBits(n int) *[]uint16 {
	p, _ := e.bits.Get().(*[]uint16)
	if p == nil || cap(*p) < n {
		b := make([]uint16, n)
		p = &b
	}
	return p
}

// bf16Product computes C = alpha·op(A)·op(B) + beta·C on the engine's
// bf16 GEMM, A and B holding bf16 values as float32 or as bits
// (row-major, with their row strides), and leaves C unrounded: attention's products,
// whose kernels round each output where the emulated path does.
//
// A bf16Packer rounds the operands to bf16 bits as it packs them (exact
// here). Any other GEMM gets the bits of just the elements it reads,
// packed densely into buffers lent from the engine's pool: attention
// reads one head of a [T, Heads·HeadDim] tensor, and encoding every head
// between its rows would cost Heads times more. Nothing here splits the
// product: the GEMM's own threading decides, and each bf16 GEMM gives the
// same bits for any thread count (NativeBF16 by design; oneDNN runs fixed
// row blocks of C, each on one OpenMP thread).
//
// band (blas.Band) says which part of the product attention's causal mask
// leaves; a GEMM that can skip the rest (blas.NativeBF16.GemmBand) does,
// any other computes it all.
func (e *Engine) bf16Product(band blas.Band, transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if g, ok := e.BF16.(bandGemmer); ok && band != blas.BandFull {
		g.GemmBand(band, transA, transB, m, n, k, alpha, a, b, beta, c, ldc)
		return
	}
	if p, ok := e.BF16.(bf16Packer); ok {
		p.Gemm(transA, transB, m, n, k, alpha, a, b, nil, beta, c, ldc, nil)
		return
	}
	ab, ldab := a.Bits, a.Ld
	if a.F32 != nil {
		pa := e.lendBits(m * k)
		defer e.bits.Put(pa)
		ab, ldab = denseBF16((*pa)[:m*k], transA, m, k, a.F32, a.Ld)
	}
	bb, ldbb := b.Bits, b.Ld
	if b.F32 != nil {
		pb := e.lendBits(k * n)
		defer e.bits.Put(pb)
		bb, ldbb = denseBF16((*pb)[:k*n], transB, k, n, b.F32, b.Ld)
	}
	e.BF16.GemmBF16(transA, transB, m, n, k, alpha, ab, ldab, bb, ldbb, beta, c, ldc)
}

// denseBF16 encodes op(X), rows×cols (stored transposed when trans, with
// row stride ld), as bf16 bits into dst (rows·cols values), stored as X
// is, its rows packed without gaps; it returns dst and its row stride.
func denseBF16(dst []uint16, trans bool, rows, cols int, x []float32, ld int) ([]uint16, int) {
	if trans {
		rows, cols = cols, rows
	}
	for i := 0; i < rows; i++ {
		amp.BF16.Bits16Slice(dst[i*cols:(i+1)*cols], x[i*ld:i*ld+cols])
	}
	return dst, max(1, cols)
}
