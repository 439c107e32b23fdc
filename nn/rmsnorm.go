package nn

import (
	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// reduceChunk is the row-block size of cross-row reductions (weight
// gradients). Partial sums are formed per fixed block and added in block
// order, so the result does not depend on how blocks are spread over workers.
const reduceChunk = 32

// RMSNorm returns w ⊙ x / sqrt(mean(x²) + eps) row by row, for x [N, D] and
// w [D], as HF's LlamaRMSNorm computes it (statistics in fp32 or better).
func (b *Builder) RMSNorm(x, w *G.Node, eps float64) *G.Node {
	return b.RMSNormHeads(x, w, 1, eps)
}

// RMSNormHeads normalizes each of the heads slices of every row of x [N,
// heads·d] on its own, with one weight w [d] for all: Qwen3's q_norm and
// k_norm on the heads of q and k.
func (b *Builder) RMSNormHeads(x, w *G.Node, heads int, eps float64) *G.Node {
	xs, ws := shapeOf(x), shapeOf(w)
	check(len(xs) == 2 && len(ws) == 1 && heads > 0 && xs[1] == heads*ws[0], "rmsnorm: x %v and weight %v do not fit %d heads", xs, ws, heads)
	base := b.newBase("rmsnorm", x, w)
	n, d := xs[0]*heads, ws[0]
	if b.Dtype == tensor.Float64 {
		return b.apply(&rmsNormOp[float64]{opBase: base, n: n, d: d, shape: xs, eps: eps, buf: newBuffer[float64](xs...)}, x, w)
	}
	return b.apply(&rmsNormOp[float32]{opBase: base, n: n, d: d, shape: xs, eps: eps, buf: newBuffer[float32](xs...)}, x, w)
}

type rmsNormOp[T Float] struct {
	opBase
	n, d    int   // normalized rows and their width
	shape   []int // x's shape: [n, d], or [n/heads, heads·d]
	eps     float64
	buf     buffer[T]
	partial []T // [ceil(n/reduceChunk), d] partial sums of dw
	bitsOut     // where it writes its output's bf16 bits too (bitsProducer)
}

func (o *rmsNormOp[T]) writeBits(b *bitsBuffer) bool {
	return o.take(b, acceptsBits[T](o.out))
}

func (o *rmsNormOp[T]) Arity() int    { return 2 }
func (o *rmsNormOp[T]) Type() hm.Type { return fnType(2, 1, 2) }
func (o *rmsNormOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}

func (o *rmsNormOp[T]) Do(vs ...G.Value) (G.Value, error) {
	in := vals[T](vs)
	t, y := o.buf.get()
	x, w := in[0], in[1]
	if o.bits != nil { // each block rounded and written as bits while in cache
		_, out := o.bits.get()
		y32 := any(y).([]float32)
		o.eng.parallel(o.n, 8, func(lo, hi int) {
			RMSNormRows(y[lo*o.d:hi*o.d], x[lo*o.d:hi*o.d], w, o.d, o.eps)
			round(o.out, y32[lo*o.d:hi*o.d])
			writeBitsOut(out, y32, lo*o.d, hi*o.d)
		})
		return t, nil
	}
	o.eng.parallel(o.n, 8, func(lo, hi int) {
		RMSNormRows(y[lo*o.d:hi*o.d], x[lo*o.d:hi*o.d], w, o.d, o.eps)
	})
	roundAll(o.eng, o.out, y)
	return t, nil
}

// RMSNormRows normalizes each row of x [rows, d] into y.
func RMSNormRows[T Float](y, x, w []T, d int, eps float64) {
	for r := 0; r+d <= len(x); r += d {
		xr, yr := x[r:r+d], y[r:r+d]
		rstd := T(1 / sqrt(meanSquare(xr)+eps))
		j0 := 0
		if isF32[T]() {
			j0 = scaleMulFast(any(yr).([]float32), any(xr).([]float32), any(w).([]float32), float32(rstd))
		}
		for j := j0; j < len(xr); j++ {
			yr[j] = w[j] * (xr[j] * rstd)
		}
	}
}

// meanSquare is mean(x²) in float64: each square (exact in float64 for a
// float32) into sixteen partial sums, element j into sum j mod 16, folded
// in halves (fold16), sixteen at a time in AVX-512 where the CPU has it
// (the same bits). One chain of additions held the loop to an element per
// add latency (4% of a bf16 LoRA step), and scalar partial sums to one
// element per few instructions.
func meanSquare[T Float](x []T) float64 {
	var s [16]float64
	j := 0
	if x32, ok := any(x).([]float32); ok {
		j = sumSqFast(x32, &s)
	}
	for ; j < len(x); j++ {
		v := float64(x[j])
		s[j&15] += v * v
	}
	return fold16(&s) / float64(len(x))
}

// rmsDot is Σ (g⊙w)·x over a row in float64, each g·w rounded to T
// first (for float32, each product with x is then exact in float64), in
// meanSquare's order: sixteen partial sums, element j into sum j mod 16,
// folded in halves, in AVX-512 where the CPU has it. One chain of
// additions was most of RMSNorm's backward pass.
func rmsDot[T Float](g, w, x []T) float64 {
	var s [16]float64
	j := 0
	if x32, ok := any(x).([]float32); ok {
		j = rmsDotFast(any(g).([]float32), any(w).([]float32), x32, &s)
	}
	for ; j < len(x); j++ {
		s[j&15] += float64(g[j]*w[j]) * float64(x[j])
	}
	return fold16(&s)
}

func (o *rmsNormOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	shapes := [][]int{o.shape, {o.d}}
	return fusedBackward(&o.opBase, []*G.Node{inputs[0], inputs[1], grad}, shapes, o.backward), nil
}

// backward: with x̂ = x·rstd and h = g ⊙ w,
// dx = rstd · (h − x̂ · mean(h ⊙ x̂)),  dw = Σ_rows g ⊙ x̂.
func (o *rmsNormOp[T]) backward(in [][]T, grads [][]T) error {
	x, w, g := in[0], in[1], in[2]
	dx, dw := grads[0], grads[1]
	d := o.d
	chunks := (o.n + reduceChunk - 1) / reduceChunk
	if dw != nil && len(o.partial) != chunks*d {
		o.partial = make([]T, chunks*d)
	}
	o.eng.parallel(chunks, 1, func(clo, chi int) {
		for c := clo; c < chi; c++ {
			var part []T
			if dw != nil {
				part = o.partial[c*d : (c+1)*d]
				clear(part)
			}
			for r := c * reduceChunk; r < min((c+1)*reduceChunk, o.n); r++ {
				xr, gr := x[r*d:(r+1)*d], g[r*d:(r+1)*d]
				rstd := 1 / sqrt(meanSquare(xr)+o.eps)
				if dx != nil {
					dot := rmsDot(gr, w, xr)
					c := T(dot * rstd * rstd / float64(d)) // mean(h ⊙ x̂)·rstd, folded
					dr := dx[r*d : (r+1)*d]
					rs := T(rstd)
					j0 := 0
					if isF32[T]() {
						j0 = rmsGradFast(any(dr).([]float32), any(gr).([]float32), any(w).([]float32), any(xr).([]float32), float32(c), float32(rs))
					}
					for j := j0; j < len(xr); j++ {
						dr[j] = rs * (gr[j]*w[j] - xr[j]*c)
					}
				}
				if part != nil {
					rs := T(rstd)
					j0 := 0
					if isF32[T]() {
						j0 = accMulMulFast(any(part).([]float32), any(gr).([]float32), any(xr).([]float32), float32(rs))
					}
					for j := j0; j < len(xr); j++ {
						part[j] += gr[j] * xr[j] * rs
					}
				}
			}
		}
	})
	if dw != nil {
		sumChunks(dw, o.partial, chunks, d)
	}
	return nil
}

// sumChunks adds the per-chunk partial sums in chunk order.
func sumChunks[T Float](dst, partial []T, chunks, d int) {
	copy(dst, partial[:d])
	for c := 1; c < chunks; c++ {
		p := partial[c*d : (c+1)*d]
		for j := range dst {
			dst[j] += p[j]
		}
	}
}
