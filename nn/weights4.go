package nn

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/quant"
)

// Param4 adds a frozen weight kept 4-bit block-quantized (NF4 or FP4, in
// bitsandbytes' layout): about half a byte per parameter. The node's value
// is the weight's blob (quant.Tensor.Encode), a uint8 vector, from which
// the ops that read it dequantize it block by block, never whole: on the
// native backend as the GEMM packs its panels of W (weights4.sgemm), on
// OpenBLAS and oneDNN a bounded block of rows or columns at a time. Only
// Linear reads a 4-bit weight.
func (b *Builder) Param4(name string, blob []byte) *G.Node {
	q, err := quant.Decode(blob)
	check(err == nil, "param4 %s: %v", name, err)
	check(len(q.Shape) == 2, "param4 %s: shape %v is not a matrix", name, q.Shape)
	check(b.Dtype == tensor.Float32, "param4 %s: 4-bit weights need a float32 graph", name)
	t := tensor.New(tensor.WithShape(len(blob)), tensor.WithBacking(blob))
	n := G.NewTensor(b.G, tensor.Uint8, 1, G.WithShape(len(blob)), G.WithName(name), G.WithValue(t))
	b.isParam[n] = true
	b.format[n] = amp.FP32 // its values are fp32 products of a code and a scale
	if b.q4 == nil {
		b.q4 = map[*G.Node][]int{}
	}
	b.q4[n] = q.Shape
	if b.recording {
		b.params = append(b.params, paramRecord{name: name, node: n, value: t})
	}
	return n
}

// weights4 dequantizes a 4-bit weight's blocks for a matmul computing in
// compute: each value is code × absmax in fp32, then rounded to the compute
// format when that is 16-bit, as bitsandbytes dequantizes to the compute
// dtype before its matmul.
type weights4 struct {
	on      bool
	compute amp.Format
}

// decode reads the weight an op was given.
func (w *weights4) decode(v G.Value) *quant.Tensor {
	q, err := quant.Decode(v.Data().([]uint8))
	if err != nil { // Param4 decoded the same bytes when the graph was built
		panic(fmt.Sprintf("nn: 4-bit weight: %v", err))
	}
	return q
}

func (w *weights4) finish(e *Engine, blk []float32) {
	if w.compute != amp.FP32 {
		roundAll(e, w.compute, blk)
	}
}

// load returns the function that writes the row-major elements [off,
// off+len(dst)) of q dequantized (and rounded to the compute format when
// that is 16-bit) to dst: the same values rowBlocks and colBlocks give.
func (w *weights4) load(q *quant.Tensor) func(dst []float32, off int) {
	if w.compute == amp.FP32 {
		return func(dst []float32, off int) { q.DequantizeRange(dst, off, off+len(dst)) }
	}
	return func(dst []float32, off int) {
		q.DequantizeRange(dst, off, off+len(dst))
		w.compute.RoundSlice(dst)
	}
}

// sgemm computes C = op(A)·op(W) for the 4-bit W (its row-major
// elements, row stride ldw) in one product, rounded to f as
// Engine.sgemmRound rounds, when the backend reads B through a function
// as it packs its panels (blas.Loader, the native backend): W's blocks are
// dequantized strip by strip into the GEMM's packing scratch (at most
// 256×128 floats a worker), never a block of rows or a full copy, and
// op(A) is packed once, not once per block of W. The result is the bits of
// the product on W dequantized whole, which is also what the row-block
// path (rowBlocks, colBlocks) gives on the native backend: each element of
// C is summed over the same k slices (their size depends on k alone) by
// the same kernel, whatever columns of C a call computes. It reports
// false, having done nothing, on other backends (OpenBLAS and oneDNN take
// float32 operands only); the caller then goes block by block.
func (w *weights4) sgemm(e *Engine, f amp.Format, grad, transA, transB bool, m, n, k int, a []float32, lda int, q *quant.Tensor, ldw int, c []float32, ldc int) bool {
	ld, ok := e.BLAS.(blas.Loader)
	if !ok {
		return false
	}
	var done func(i0, i1, j0, j1 int)
	if f != amp.FP32 {
		done = e.roundBlock(f, grad, c, ldc)
	}
	ld.SgemmLoad(transA, transB, m, n, k, 1, a, lda, w.load(q), q.Numel(), ldw, 0, c, ldc, done)
	if grad && f != amp.FP32 {
		e.Grads.rounded.Add(int64(m) * int64(n))
	}
	return true
}

// rowBlocks calls fn for consecutive blocks of rows [r0, r1) of the
// rows×cols weight q, dequantized (row-major, cols wide): for y = x·Wᵀ,
// on backends that are not a blas.Loader. The block is bounded by
// weightBlockElems (1 MiB of float32), not by the weight's size.
func (w *weights4) rowBlocks(e *Engine, q *quant.Tensor, rows, cols int, fn func(r0, r1 int, block []float32)) {
	e.weightRowBlocks(rows, cols, q.DequantizeRange, func(blk []float32) { w.finish(e, blk) }, fn)
}

// colBlocks calls fn for consecutive column slabs [c0, c1) of the
// rows×cols weight q, dequantized to a rows×(c1-c0) row-major block: for
// dx = g·W, each slab giving whole columns of dx.
func (w *weights4) colBlocks(e *Engine, q *quant.Tensor, rows, cols int, fn func(c0, c1 int, block []float32)) {
	e.weightColBlocks(rows, cols, q.DequantizeRange, func(blk []float32) { w.finish(e, blk) }, fn)
}
