package nn

import (
	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// LinearBias returns x·Wᵀ + bias (bias [out]; nil is Linear). As PyTorch's
// addmm under autocast, the bias in the compute format is added to the
// fp32 products and the sum rounded once: the matmul itself is left
// unrounded and the bias add rounds.
func (b *Builder) LinearBias(x, w, bias *G.Node) *G.Node {
	if bias == nil {
		return b.Linear(x, w)
	}
	f := b.formatOf("linear", x, w)
	return b.biasAdd(b.linear(x, w, f, amp.FP32), b.lower(bias, f), f)
}

// AddBias returns y + bias for y [N, out] and bias [out], rounded to
// y's format: a bias added after an op that already rounded (DoRA's
// rescaled output, which PEFT forms from the base output less its bias).
func (b *Builder) AddBias(y, bias *G.Node) *G.Node {
	f := b.format[y]
	return b.biasAdd(y, b.lower(bias, f), f)
}

func (b *Builder) biasAdd(y, bias *G.Node, f amp.Format) *G.Node {
	ys, bs := shapeOf(y), shapeOf(bias)
	check(len(ys) == 2 && len(bs) == 1 && bs[0] == ys[1], "bias: output %v and bias %v do not fit", ys, bs)
	base := b.newBase("bias", y, bias)
	base.out = f
	if b.Dtype == tensor.Float64 {
		return b.apply(&biasOp[float64]{opBase: base, n: ys[0], d: ys[1], buf: newBuffer[float64](ys...)}, y, bias)
	}
	return b.apply(&biasOp[float32]{opBase: base, n: ys[0], d: ys[1], buf: newBuffer[float32](ys...)}, y, bias)
}

type biasOp[T Float] struct {
	opBase
	n, d    int
	buf     buffer[T]
	partial []T // [ceil(n/reduceChunk), d] partial column sums
}

func (o *biasOp[T]) Arity() int    { return 2 }
func (o *biasOp[T]) Type() hm.Type { return fnType(2, 1, 2) }
func (o *biasOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.n, o.d}, nil
}

func (o *biasOp[T]) Do(vs ...G.Value) (G.Value, error) {
	in := vals[T](vs)
	t, y := o.buf.get()
	x, bias := in[0], in[1]
	o.eng.parallel(o.n, 16, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			yr, xr := y[r*o.d:(r+1)*o.d], x[r*o.d:(r+1)*o.d]
			for j, v := range xr {
				yr[j] = v + bias[j]
			}
		}
	})
	roundAll(o.eng, o.out, y)
	return t, nil
}

// The gradient passes to y as it comes (rounded to the output format);
// the bias's is its column sums, formed in fixed row blocks in block
// order, so the result does not depend on the worker count.
func (o *biasOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	grads := make(G.Nodes, 2)
	if o.wrt[0] {
		grads[0] = grad
	}
	if o.wrt[1] {
		grads[1] = applyOp(&biasGradOp[T]{opBase: gradBase(&o.opBase, "bias.db", 1, 1), fwd: o, buf: newBuffer[T](o.d)}, grad)
	}
	return grads, nil
}

type biasGradOp[T Float] struct {
	opBase
	fwd *biasOp[T]
	buf buffer[T]
}

func (o *biasGradOp[T]) Arity() int    { return 1 }
func (o *biasGradOp[T]) Type() hm.Type { return fnType(2, 1) }
func (o *biasGradOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.fwd.d}, nil
}
func (o *biasGradOp[T]) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errNotTwice
}

func (o *biasGradOp[T]) Do(vs ...G.Value) (G.Value, error) {
	g := vs[0].Data().([]T)
	t, db := o.buf.get()
	f := o.fwd
	chunks := (f.n + reduceChunk - 1) / reduceChunk
	if len(f.partial) != chunks*f.d {
		f.partial = make([]T, chunks*f.d)
	}
	o.eng.parallel(chunks, 1, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			part := f.partial[c*f.d : (c+1)*f.d]
			clear(part)
			for r := c * reduceChunk; r < min((c+1)*reduceChunk, f.n); r++ {
				for j, v := range g[r*f.d : (r+1)*f.d] {
					part[j] += v
				}
			}
		}
	})
	sumChunks(db, f.partial, chunks, f.d)
	roundGrad(o.eng, o.out, db)
	return t, nil
}
