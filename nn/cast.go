package nn

import (
	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// Cast rounds x to format f: the one place a value narrows. A parameter's
// cast is cached: a trainable one is redone only when the engine's
// weights change (Engine.WeightsChanged), so its fp32 master weight is
// rounded once per optimizer step however many micro-batches use it, and never served
// stale after an update; a frozen one is rounded once for good.
func (b *Builder) Cast(x *G.Node, f amp.Format) *G.Node {
	check(b.Dtype == tensor.Float32, "cast to %v needs a float32 graph", f)
	shape := shapeOf(x)
	base := b.newBase("cast", x)
	base.out = f
	op := &castOp{opBase: base, shape: shape, buf: newBuffer[float32](shape...)}
	switch {
	case b.isParam[x] && b.needsGrad[x]:
		op.cache = cachePerStep
	case b.isParam[x]:
		op.cache = cacheForever
	}
	n := b.apply(op, x)
	if op.cache == noCache {
		b.perReaderCast[n] = true
	}
	return n
}

type castCache uint8

const (
	noCache      castCache = iota // an activation: cast every time
	cachePerStep                  // a trainable weight: cast again after Engine.WeightsChanged
	cacheForever                  // a frozen weight: cast once
)

type castOp struct {
	opBase
	shape   []int
	cache   castCache
	version uint64
	binds   uint64 // the engine's binds the cache was filled under
	valid   bool
	buf     buffer[float32]
}

func (o *castOp) Arity() int    { return 1 }
func (o *castOp) Type() hm.Type { return fnType(len(o.shape), len(o.shape)) }
func (o *castOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}

func (o *castOp) Do(vs ...G.Value) (G.Value, error) {
	t, y := o.buf.get()
	if o.valid && o.binds == o.eng.binds && (o.cache == cacheForever || o.cache == cachePerStep && o.version == o.eng.weights) {
		return t, nil
	}
	x := vs[0].Data().([]float32)
	o.eng.parallel(len(y), 1<<14, func(lo, hi int) { o.out.RoundTo(y[lo:hi], x[lo:hi]) })
	o.version, o.binds, o.valid = o.eng.weights, o.eng.binds, true
	return t, nil
}

// The gradient passes through, in the source's format: an fp32 master
// weight receives the low-precision gradient exactly, as PyTorch's
// autocast gives fp32 parameters the gradient of their fp16 copy. A
// trainable weight's copy is one tensor, as autocast caches it, so its
// readers' gradients add up in its format first; an activation's copy
// stands for one copy per reader, whose gradients add up in fp32.
func (o *castOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if o.inFm[0] == amp.FP32 {
		if o.cache == cachePerStep {
			grad = gradIn(&o.opBase, grad)
		}
		return G.Nodes{grad}, nil
	}
	return fusedBackward(&o.opBase, []*G.Node{grad}, [][]int{o.shape}, func(in, grads [][]float32) error {
		copy(grads[0], in[0])
		return nil // fusedBackward rounds to the source format
	}), nil
}
