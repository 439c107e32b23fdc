package nn

import (
	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// How the gradients of a low-precision tensor read by several ops add up.
//
// PyTorch's autograd gives every tensor a gradient of its own dtype, and
// accumulates the gradients of a tensor's readers in that dtype, one at a
// time, the reader created last first: a bf16 tensor read by ops 0, 1 and 2
// gets bf16(bf16(g2 + g1) + g0) (scripts/gen_amp_grad_fixture.py checks
// this). gorgonia sums a node's incoming gradients in fp32 in one go. So:
//
//   - every op rounds the gradient it receives to its output format before
//     using it (gradIn): with one reader that gradient is already rounded,
//     with two it makes bf16(g1 + g0), exactly autograd's sum;
//   - the third and later readers of a low-precision tensor read it
//     through a chain of share nodes (Builder.reader): reader 1 reads
//     share(x), reader 2 share(share(x)), and so on, each share rounding
//     its own sum, so the chain nests the additions in autograd's order.
//
// Which tensors accumulate in their format: op outputs of fp16 or bf16,
// and the low-precision copy of a trainable weight, which autocast casts
// once per forward pass and caches. An activation's cast is different:
// autocast casts an fp32 activation afresh for every op that reads it, so
// the gradients of the copies are summed in fp32 at the source. mixtune
// casts once and shares the copy (Builder.lower), and the copy passes its
// fp32 sum through unrounded.

// reader is the node the op being built should read for input x.
func (b *Builder) reader(x *G.Node) *G.Node {
	if b.format[x] == amp.FP32 || !b.needsGrad[x] || b.perReaderCast[x] {
		return x
	}
	last, ok := b.shareTail[x]
	if !ok {
		b.shareTail[x] = x
		return x
	}
	s := b.share(last)
	b.shareTail[x] = s
	return s
}

// share adds an identity node over x whose backward rounds its readers'
// summed gradient to x's format.
func (b *Builder) share(x *G.Node) *G.Node {
	shape := shapeOf(x)
	base := b.newBase("share", x)
	base.out = b.format[x]
	n := applyOp(&shareOp{opBase: base, shape: shape}, x)
	b.needsGrad[n] = true
	b.format[n] = base.out
	return n
}

// shareOp's value is its input's tensor, not a copy (as tapOp's): nn ops
// never overwrite their inputs, and the memory plan keeps an op's input
// live while the op's own readers still read it (an op it does not know
// as writing a fresh output is taken to alias its inputs).
type shareOp struct {
	opBase
	shape []int
}

func (o *shareOp) Arity() int    { return 1 }
func (o *shareOp) Type() hm.Type { return fnType(len(o.shape), len(o.shape)) }
func (o *shareOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}

func (o *shareOp) Do(vs ...G.Value) (G.Value, error) { return vs[0], nil }

func (o *shareOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	return G.Nodes{gradIn(&o.opBase, grad)}, nil
}

// gradIn is the gradient of o's output as o's backward reads it: rounded
// to o's output format. A gradient made by one nn backward op already is;
// a sum gorgonia formed over several readers, or a gradient from one of
// gorgonia's own ops, gets a rounding node.
func gradIn(o *opBase, grad *G.Node) *G.Node {
	if o.out == amp.FP32 || grad.Dtype() != tensor.Float32 || grad.IsScalar() {
		return grad
	}
	if g, ok := grad.Op().(gradOp); ok && g.base().out == o.out {
		return grad
	}
	shape := []int(grad.Shape())
	op := &gradRoundOp{opBase: opBase{eng: o.eng, id: o.id*16 + 15, kind: o.kind + ".grad_in", out: o.out,
		wrt: make([]bool, 1), inFm: make([]amp.Format, 1)}, shape: shape, buf: newBuffer[float32](shape...)}
	return applyOp(op, grad)
}

// gradRoundOp rounds a gradient to its format, counting underflows as every
// gradient rounding does.
type gradRoundOp struct {
	opBase
	shape []int
	buf   buffer[float32]
}

func (o *gradRoundOp) Arity() int    { return 1 }
func (o *gradRoundOp) Type() hm.Type { return fnType(len(o.shape), len(o.shape)) }
func (o *gradRoundOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}
func (o *gradRoundOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) { return nil, errNotTwice }

func (o *gradRoundOp) Do(vs ...G.Value) (G.Value, error) {
	t, g := o.buf.get()
	roundGradTo(o.eng, o.out, g, vs[0].Data().([]float32))
	return t, nil
}
