package nn

import (
	"errors"
	"slices"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// gorgonia ops have one output, but a fused backward kernel produces the
// gradients of several inputs at once (RMSNorm's dx and dw, attention's dq,
// dk and dv). backwardOp runs such a kernel once per step and keeps each
// needed gradient in its own buffer; a pickOp per input hands one buffer to
// the graph. The pick nodes take the backward node as input, so they run
// after it.

// backwardKernel fills grads[i] for every input i with grads[i] != nil,
// given the backward op's graph inputs.
type backwardKernel[T Float] func(inputs [][]T, grads [][]T) error

type backwardOp[T Float] struct {
	opBase
	fwd    gradOp // the forward op (for OpSpec)
	ranks  []int  // of the graph inputs
	shapes [][]int
	need   []bool // which forward inputs get a gradient
	run    backwardKernel[T]
	bufs   []buffer[T]
	// rounded: run rounds each gradient to its input's format itself
	// (with roundGradBlock, while the values are in cache).
	rounded bool
	// early: the forward op fills bufs (LMHeadLoss), not this op's run
	early bool
	// u16 marks the graph inputs that are bf16 bits (bf16Operand): vals
	// leaves their slots empty, and Do hands them to run in bits
	u16  []bool
	bits [][]uint16
}

func (o *backwardOp[T]) Arity() int { return len(o.ranks) }
func (o *backwardOp[T]) Type() hm.Type {
	t := fnType(append(append([]int(nil), o.ranks...), 0)...)
	if !slices.Contains(o.u16, true) {
		return t
	}
	ts := t.(*hm.FunctionType).FlatTypes()
	for i, u := range o.u16 {
		if u {
			ts[i] = G.TensorType{Dims: o.ranks[i], Of: tensor.Uint16}
		}
	}
	return hm.NewFnType(ts...)
}
func (o *backwardOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}
func (o *backwardOp[T]) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errNotTwice
}

var errNotTwice = errors.New("nn: gradients of gradients are not supported")

func (o *backwardOp[T]) Do(vs ...G.Value) (G.Value, error) {
	grads := make([][]T, len(o.bufs))
	for i, need := range o.need {
		if need {
			_, grads[i] = o.bufs[i].get()
		}
	}
	for i, u := range o.u16 {
		if u {
			o.bits[i] = vs[i].Data().([]uint16)
		}
	}
	if err := o.run(vals[T](vs), grads); err != nil {
		return nil, err
	}
	for i, g := range grads {
		if g != nil && !o.rounded {
			roundGrad(o.eng, o.inFm[i], g)
		}
	}
	return scalarValue(T(0)), nil // the backward node's own value; only its picks are read
}

// pickOp returns gradient i of a backwardOp.
type pickOp[T Float] struct {
	opBase
	src *backwardOp[T]
	i   int
}

func (o *pickOp[T]) Arity() int    { return 1 }
func (o *pickOp[T]) Type() hm.Type { return fnType(0, len(o.src.shapes[o.i])) }
func (o *pickOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.src.shapes[o.i]).Clone(), nil
}
func (o *pickOp[T]) Do(...G.Value) (G.Value, error) {
	t, _ := o.src.bufs[o.i].tensor()
	return t, nil
}
func (o *pickOp[T]) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) { return nil, errNotTwice }

// fusedBackward adds the backward node of forward op fwd and returns one
// gradient node per forward input (nil where fwd.wrt is false). graphIn are
// the values the kernel reads; inShapes are the forward inputs' shapes.
func fusedBackward[T Float](fwd *opBase, graphIn []*G.Node, inShapes [][]int, run backwardKernel[T]) G.Nodes {
	_, grads := newBackward(fwd, graphIn, inShapes, run)
	return grads
}

// newBackward is fusedBackward that also returns the backward op, whose
// buffers a forward op may fill itself (see LMHeadLoss).
func newBackward[T Float](fwd *opBase, graphIn []*G.Node, inShapes [][]int, run backwardKernel[T]) (*backwardOp[T], G.Nodes) {
	return newBackwardFor(fwd, fwd.wrt, graphIn, inShapes, run)
}

// newBackwardFor is newBackward computing the gradients of the inputs
// need says (a subset of fwd.wrt): the caller hands on the others itself.
func newBackwardFor[T Float](fwd *opBase, need []bool, graphIn []*G.Node, inShapes [][]int, run backwardKernel[T]) (*backwardOp[T], G.Nodes) {
	ranks := make([]int, len(graphIn))
	u16 := make([]bool, len(graphIn))
	for i, n := range graphIn {
		ranks[i] = n.Dims()
		switch n.Dtype() {
		case tensor.Int:
			ranks[i] = -n.Dims()
		case tensor.Uint16:
			u16[i] = true
		}
	}
	bw := &backwardOp[T]{
		opBase: opBase{eng: fwd.eng, id: fwd.id, kind: fwd.kind + ".backward",
			wrt: make([]bool, len(graphIn)), inFm: fwd.inFm, out: fwd.out},
		ranks:  ranks,
		need:   need,
		fwd:    fwdOp(fwd),
		shapes: inShapes,
		run:    run,
		u16:    u16,
		bits:   make([][]uint16, len(graphIn)),
		bufs:   make([]buffer[T], len(inShapes)),
	}
	for i, s := range inShapes {
		bw.bufs[i] = newBuffer[T](s...)
	}
	bn := applyOp(bw, graphIn...)
	grads := make(G.Nodes, len(inShapes))
	for i, need := range need {
		if need {
			p := &pickOp[T]{opBase: gradBase(fwd, fwd.kind+".grad", i, 1), src: bw, i: i}
			grads[i] = applyOp(p, bn)
		}
	}
	return bw, grads
}
