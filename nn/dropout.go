package nn

import (
	"math/rand/v2"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Dropout returns x with each element zeroed with probability p and the
// others scaled by 1/(1−p), as torch.nn.Dropout does in training mode; the
// gradient passes through the same mask with the same scale.
//
// The mask is a pure function of the run's noise key (Pass.Noise) and the
// op's id: row i of x draws from a PCG seeded with (key, id·2³²+i+
// Engine.NoiseRowOffset). A resumed run therefore redraws the masks of an
// uninterrupted one, with no random state to save, and the result does not
// depend on the worker count. Key 0 means evaluation: x passes through
// unchanged.
//
// The output keeps x's format: dropout of a bf16 tensor is a bf16 tensor,
// as in PyTorch.
func (b *Builder) Dropout(x *G.Node, p float64) *G.Node {
	check(p >= 0 && p < 1, "dropout: p = %g is not in [0, 1)", p)
	if p == 0 {
		return x
	}
	shape := shapeOf(x)
	check(len(shape) >= 1, "dropout: x must have at least one dimension, got %v", shape)
	base := b.newBase("dropout", x)
	base.out = b.format[x]
	if b.Dtype == tensor.Float64 {
		return b.apply(newDropout[float64](base, shape, p), x)
	}
	return b.apply(newDropout[float32](base, shape, p), x)
}

type dropoutOp[T Float] struct {
	opBase
	shape      []int
	rows, cols int
	p          float64
	buf        buffer[T]
	keep       []bool // the mask of the last forward pass
	key        uint64 // the noise key keep was drawn for; 0: no mask (identity)
	binds      uint64 // the engine's binds keep was drawn under
}

func newDropout[T Float](base opBase, shape []int, p float64) *dropoutOp[T] {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return &dropoutOp[T]{opBase: base, shape: shape, rows: shape[0], cols: n / shape[0], p: p, buf: newBuffer[T](shape...)}
}

func (o *dropoutOp[T]) Arity() int    { return 1 }
func (o *dropoutOp[T]) Type() hm.Type { return fnType(len(o.shape), len(o.shape)) }
func (o *dropoutOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}

// draw fills o.keep for key, unless it already holds key's mask.
func (o *dropoutOp[T]) draw(key uint64) {
	if o.key == key && o.binds == o.eng.binds && o.keep != nil {
		return
	}
	if o.keep == nil {
		o.keep = make([]bool, o.rows*o.cols)
	}
	o.eng.parallel(o.rows, 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			keepMask(o.keep[r*o.cols:(r+1)*o.cols], key, o.id+o.eng.idOffset, r+o.eng.NoiseRowOffset, o.p)
		}
	})
	o.key, o.binds = key, o.eng.binds
}

// keepMask fills keep with row row of the mask dropout op id draws under
// noise key key: each element is kept with probability 1−p.
func keepMask(keep []bool, key uint64, id, row int, p float64) {
	rng := rand.NewPCG(key, uint64(id)<<32|uint64(uint32(row)))
	for j := range keep {
		// the top 53 bits as a uniform in [0, 1), as rand.Float64 does
		keep[j] = float64(rng.Uint64()>>11)/(1<<53) >= p
	}
}

func (o *dropoutOp[T]) Do(vs ...G.Value) (G.Value, error) {
	x := vs[0].Data().([]T)
	t, y := o.buf.get()
	key := o.eng.pass.Noise
	if key == 0 {
		o.key = 0
		copy(y, x)
		return t, nil
	}
	o.draw(key)
	scale := T(1 / (1 - o.p))
	for i, v := range x {
		if o.keep[i] {
			y[i] = v * scale
		} else {
			y[i] = 0
		}
	}
	round(o.out, y)
	return t, nil
}

// The gradient uses the mask of the forward pass it follows: the backward
// node runs after the forward node within one run of the graph.
func (o *dropoutOp[T]) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	return fusedBackward(&o.opBase, []*G.Node{grad}, [][]int{o.shape}, func(in, grads [][]T) error {
		g, dx := in[0], grads[0]
		if o.key == 0 {
			copy(dx, g)
			return nil
		}
		scale := T(1 / (1 - o.p))
		for i, v := range g {
			if o.keep[i] {
				dx[i] = v * scale
			} else {
				dx[i] = 0
			}
		}
		return nil
	}), nil
}
