package nn

import (
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// Param16 adds a frozen weight kept as 16-bit values (bf16 or fp16 bits):
// two bytes per parameter in memory instead of four. Ops that read it
// convert it to float32 block by block as they go.
func (b *Builder) Param16(name string, shape []int, bits []uint16, f amp.Format) *G.Node {
	check(f == amp.BF16 || f == amp.FP16, "param16 %s: format %v is not 16-bit", name, f)
	check(b.Dtype == tensor.Float32, "param16 %s: 16-bit weights need a float32 graph", name)
	t := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(bits))
	n := G.NewTensor(b.G, tensor.Uint16, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(t))
	b.isParam[n], b.is16[n] = true, true
	b.format[n] = f
	if b.recording {
		b.params = append(b.params, paramRecord{name: name, node: n, value: t})
	}
	return n
}

// weightBlockElems bounds a converted block of a 16-bit weight: 2^18
// float32 values (1 MiB), large enough for an efficient matmul, small
// enough to stay in cache and far below the size of a large weight.
const weightBlockElems = 1 << 18

// weights16 converts 16-bit weight blocks for a matmul computing in compute.
type weights16 struct {
	on              bool // the weight is 16-bit
	stored, compute amp.Format
}

// bitsFormat is the format of the values a matmul reads from the stored
// bits unchanged: the stored format when the matmul computes in it, else
// FP32 (the bits are widened, and rounded to another format, first).
func (w *weights16) bitsFormat() amp.Format {
	if w.stored == w.compute {
		return w.stored
	}
	return amp.FP32
}

// block16 lends a conversion block of n values from the engine's pool;
// release gives it back. A matmul takes one block and reuses it for every
// slab of its weight, so the blocks in use are one per matmul running at
// once: one for a graph on a tape machine, which runs an op at a time,
// where a block kept per op would cost one per linear layer and eat into
// the memory that 16-bit storage saves. Two graphs sharing an engine may
// run at the same time; each matmul then has a block of its own.
func (e *Engine) block16(n int) (blk []float32, release func()) {
	p, _ := e.blocks.Get().(*[]float32)
	if p == nil || cap(*p) < n {
		b := make([]float32, n)
		p = &b
	}
	return (*p)[:n], func() { e.blocks.Put(p) }
}

// finish rounds a converted block to the compute format when that is a
// different 16-bit format (bf16 weights in an fp16 matmul, or the reverse).
func (w *weights16) finish(e *Engine, blk []float32) {
	if w.compute != amp.FP32 && w.compute != w.stored {
		roundAll(e, w.compute, blk)
	}
}

// sgemm computes C = op(A)·op(W) for the 16-bit W (bits, row stride ldw)
// in one product, rounded to f as Engine.sgemmRound rounds, when the
// backend widens W as it packs it (blas.Widener): the same bits as the
// product of W widened whole, and no block of W converted ahead or op(A)
// packed once per block. It reports false, having done nothing, on other
// backends; the caller then goes block by block.
func (w *weights16) sgemm(e *Engine, f amp.Format, grad, transA, transB bool, m, n, k int, a []float32, lda int, bits []uint16, ldw int, c []float32, ldc int) bool {
	wd, ok := e.BLAS.(blas.Widener)
	if !ok {
		return false
	}
	widen := w.stored.FromBits16Slice
	if w.compute != amp.FP32 && w.compute != w.stored {
		widen = func(dst []float32, src []uint16) {
			w.stored.FromBits16Slice(dst, src)
			w.compute.RoundSlice(dst)
		}
	}
	var done func(i0, i1, j0, j1 int)
	if f != amp.FP32 {
		done = e.roundBlock(f, grad, c, ldc)
	}
	wd.SgemmWiden(transA, transB, m, n, k, 1, a, lda, bits, widen, ldw, 0, c, ldc, done)
	if grad && f != amp.FP32 {
		e.Grads.rounded.Add(int64(m) * int64(n))
	}
	return true
}

// rowBlocks calls fn for consecutive blocks of rows [r0, r1) of a
// rows×cols 16-bit weight, converted to float32 (row-major, cols wide):
// for y = x·Wᵀ, where a row block of W gives the columns r0..r1 of y.
func (w *weights16) rowBlocks(e *Engine, bits []uint16, rows, cols int, fn func(r0, r1 int, block []float32)) {
	e.weightRowBlocks(rows, cols, func(dst []float32, lo, hi int) { w.stored.FromBits16Slice(dst, bits[lo:hi]) },
		func(blk []float32) { w.finish(e, blk) }, fn)
}

// colBlocks calls fn for consecutive column slabs [c0, c1) of a rows×cols
// 16-bit weight, converted to a rows×(c1-c0) row-major float32 block: for
// dx = g·W, where a column slab of W gives the columns c0..c1 of dx
// whole, so no output is accumulated across blocks.
func (w *weights16) colBlocks(e *Engine, bits []uint16, rows, cols int, fn func(c0, c1 int, block []float32)) {
	e.weightColBlocks(rows, cols, func(dst []float32, lo, hi int) { w.stored.FromBits16Slice(dst, bits[lo:hi]) },
		func(blk []float32) { w.finish(e, blk) }, fn)
}

// weightRowBlocks calls fn for consecutive blocks of rows [r0, r1) of a
// rows×cols weight stored narrower than float32, each block converted by
// convert (which writes the row-major elements [lo, hi) to dst) and then
// by finish (a rounding to the compute format) in a block lent by the
// engine.
func (e *Engine) weightRowBlocks(rows, cols int, convert func(dst []float32, lo, hi int), finish func([]float32), fn func(r0, r1 int, block []float32)) {
	rb := min(max(16, weightBlockElems/cols), rows)
	buf, release := e.block16(rb * cols)
	defer release()
	for r0 := 0; r0 < rows; r0 += rb {
		r1 := min(r0+rb, rows)
		blk := buf[:(r1-r0)*cols]
		base := r0 * cols
		e.parallel(len(blk), 1<<14, func(lo, hi int) { convert(blk[lo:hi], base+lo, base+hi) })
		finish(blk)
		fn(r0, r1, blk)
	}
}

// weightColBlocks is weightRowBlocks for column slabs [c0, c1), each
// converted to a rows×(c1-c0) row-major block.
func (e *Engine) weightColBlocks(rows, cols int, convert func(dst []float32, lo, hi int), finish func([]float32), fn func(c0, c1 int, block []float32)) {
	cb := min(max(16, weightBlockElems/rows), cols)
	buf, release := e.block16(rows * cb)
	defer release()
	for c0 := 0; c0 < cols; c0 += cb {
		c1 := min(c0+cb, cols)
		width := c1 - c0
		blk := buf[:rows*width]
		e.parallel(rows, max(1, (1<<14)/width), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				convert(blk[r*width:(r+1)*width], r*cols+c0, r*cols+c1)
			}
		})
		finish(blk)
		fn(c0, c1, blk)
	}
}
