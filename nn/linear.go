package nn

import (
	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
)

// Linear returns x·Wᵀ for x [N, in] and W [out, in] (PyTorch's and HF's
// weight layout), shape [N, out].
func (b *Builder) Linear(x, w *G.Node) *G.Node {
	xs, ws := shapeOf(x), shapeOf(w)
	check(len(xs) == 2 && len(ws) == 2 && xs[1] == ws[1], "linear: x %v and W %v do not fit (want [N,in] and [out,in])", xs, ws)
	base := b.newBase("linear", x, w)
	if b.Dtype == tensor.Float64 {
		return b.apply(&linearOp[float64]{opBase: base, n: xs[0], in: xs[1], outF: ws[0], buf: newBuffer[float64](xs[0], ws[0])}, x, w)
	}
	return b.apply(&linearOp[float32]{opBase: base, n: xs[0], in: xs[1], outF: ws[0], buf: newBuffer[float32](xs[0], ws[0])}, x, w)
}

type linearOp[T Float] struct {
	opBase
	n, in, outF int // rows, input and output features
	buf         buffer[T]
}

func (o *linearOp[T]) Arity() int    { return 2 }
func (o *linearOp[T]) Type() hm.Type { return fnType(2, 2, 2) }
func (o *linearOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.n, o.outF}, nil
}

func (o *linearOp[T]) Do(vs ...G.Value) (G.Value, error) {
	in := vals[T](vs)
	t, y := o.buf.get()
	blas.Gemm(o.eng.BLAS, false, true, o.n, o.outF, o.in, 1, in[0], o.in, in[1], o.in, 0, y, o.outF)
	round(o.out, y)
	return t, nil
}

func (o *linearOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	x, w := inputs[0], inputs[1]
	grads := make(G.Nodes, 2)
	if o.wrt[0] { // dx = g·W  [N, in]
		op := &linearGradOp[T]{opBase: gradBase(&o.opBase, "linear.dx", 0, 2), m: o.n, n: o.in, k: o.outF, buf: newBuffer[T](o.n, o.in)}
		grads[0] = applyOp(op, grad, w)
	}
	if o.wrt[1] { // dW = gᵀ·x  [out, in]
		op := &linearGradOp[T]{opBase: gradBase(&o.opBase, "linear.dw", 1, 2), transA: true, m: o.outF, n: o.in, k: o.n, buf: newBuffer[T](o.outF, o.in)}
		grads[1] = applyOp(op, grad, x)
	}
	return grads, nil
}

// linearGradOp computes op(g)·B with g [N, out]: g·W for dx, gᵀ·x for dW.
type linearGradOp[T Float] struct {
	opBase
	transA  bool
	m, n, k int
	buf     buffer[T]
}

func (o *linearGradOp[T]) Arity() int    { return 2 }
func (o *linearGradOp[T]) Type() hm.Type { return fnType(2, 2, 2) }
func (o *linearGradOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.m, o.n}, nil
}
func (o *linearGradOp[T]) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errNotTwice
}

func (o *linearGradOp[T]) Do(vs ...G.Value) (G.Value, error) {
	in := vals[T](vs)
	t, c := o.buf.get()
	lda := o.k // g is [N, out]: as A it is m×k (dx) or, transposed, k×m (dW)
	if o.transA {
		lda = o.m
	}
	blas.Gemm(o.eng.BLAS, o.transA, false, o.m, o.n, o.k, 1, in[0], lda, in[1], o.n, 0, c, o.n)
	round(o.out, c)
	return t, nil
}
