package nn

import (
	"fmt"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
)

// OpSpec is a graph node's op as an engine other than the CPU kernels sees
// it: what the op computes, with which attributes, and where its values
// are rounded. A graph is built once, by Builder and model.Build; the CPU
// engine runs it through the ops' own kernels (Engine.Run), and another
// engine (gpu/vkengine) walks the same nodes, reads each op's OpSpec and
// runs its own kernel for that Kind: one model definition, many engines,
// as in llama.cpp's ggml backends.
type OpSpec struct {
	// Kind names the computation: a forward op's op-list kind ("linear",
	// "rmsnorm", "attention", "add", "silu", ...), a gradient op's
	// ("linear.dx", "linear.dw", "add.grad_in"), "<kind>.backward" for a
	// fused backward op, "pick" for one gradient of a fused backward op,
	// and "sum" for gorgonia's own elementwise + (autodiff adds the
	// gradients of a node read by several ops with it).
	Kind string
	// ID identifies the op within its graph; a fused backward op has its
	// forward op's ID, so an engine can find what the forward saved.
	ID int
	// Out is the format the op's output is rounded to; In each input's.
	Out amp.Format
	In  []amp.Format
	// Wrt says which inputs the op's backward computes a gradient for.
	Wrt []bool
	// Attrs holds the kind's attributes: LinearAttrs, PointwiseAttrs, ...
	// (nil for kinds that have none).
	Attrs any
	// Forward is, for a fused backward op, the forward op's spec; for a
	// pick, the fused backward op's.
	Forward *OpSpec
	// GradShapes is, for a fused backward op, the shape of each forward
	// input's gradient (nil where Wrt is false: none is computed).
	GradShapes [][]int
	// Pick is, for a pick, the forward input whose gradient it hands on.
	Pick int
	// Rounded is, for a fused backward op, whether its kernel rounds each
	// gradient to its input's format itself (the engine must round them
	// all to In either way: Rounded only says where the CPU does it).
	Rounded bool
}

// attributed is implemented by ops that carry attributes for other
// engines.
type attributed interface{ attrs() any }

// Spec returns the OpSpec of a node's op. An op that no other engine
// can run (a tap, a decoding op) is an error naming it.
func Spec(n *G.Node) (OpSpec, error) {
	op := n.Op()
	if op == nil {
		return OpSpec{}, fmt.Errorf("nn: node %s is an input, not an op", n.Name())
	}
	if op.Arity() == 2 && strings.HasPrefix(op.String(), "+ ") { // gorgonia's elementwise add ("+ false")
		return OpSpec{Kind: "sum", In: []amp.Format{amp.FP32, amp.FP32}}, nil
	}
	g, ok := op.(gradOp)
	if !ok {
		return OpSpec{}, fmt.Errorf("nn: node %s: op %v (%T) is not an nn op", n.Name(), op, op)
	}
	return specOf(g)
}

func specOf(g gradOp) (OpSpec, error) {
	b := g.base()
	s := OpSpec{Kind: b.kind, ID: b.id, Out: b.out, In: b.inFm, Wrt: b.wrt}
	switch o := g.(type) {
	case *backwardOp[float32]:
		return backwardSpec(s, o.fwd, o.shapes, o.need, o.rounded)
	case *backwardOp[float64]:
		return backwardSpec(s, o.fwd, o.shapes, o.need, o.rounded)
	case *pickOp[float32]:
		return pickSpec(s, o.src, o.i)
	case *pickOp[float64]:
		return pickSpec(s, o.src, o.i)
	}
	a, ok := g.(attributed)
	if !ok {
		return OpSpec{}, fmt.Errorf("nn: op %v (%T) has no spec for other engines", g, g)
	}
	s.Attrs = a.attrs()
	return s, nil
}

func backwardSpec(s OpSpec, fwd gradOp, shapes [][]int, need []bool, rounded bool) (OpSpec, error) {
	if fwd == nil {
		return OpSpec{}, fmt.Errorf("nn: backward op %s has no forward op", s.Kind)
	}
	f, err := specOf(fwd)
	if err != nil {
		return OpSpec{}, err
	}
	s.Forward = &f
	s.Rounded = rounded
	s.GradShapes = make([][]int, len(shapes))
	for i, sh := range shapes {
		if need[i] {
			s.GradShapes[i] = sh
		}
	}
	return s, nil
}

func pickSpec[T Float](s OpSpec, src *backwardOp[T], i int) (OpSpec, error) {
	b, err := specOf(src)
	if err != nil {
		return OpSpec{}, err
	}
	s.Kind, s.Forward, s.Pick = "pick", &b, i
	return s, nil
}

// LinearAttrs are a linear op's and its gradients' ("linear",
// "linear.dx", "linear.dw"): y[N, Out] = x[N, In]·Wᵀ; dx = g·W; dW = gᵀ·x.
type LinearAttrs struct {
	N, In, Out int
	// W16 is set when W is a frozen 16-bit weight (uint16 values of
	// format W16Format, computed in Compute: Builder.Param16).
	W16       bool
	W16Format amp.Format
	// W4 is set when W is a frozen 4-bit weight (a uint8 blob of
	// quant.Tensor.Encode: Builder.Param4).
	W4      bool
	Compute amp.Format
	// Operands are the formats of the product's two operands' values (x
	// and W for "linear", g and W for "linear.dx", g and x for
	// "linear.dw"): the policy rounded them there, FP32 where it did not.
	// A product whose operands are both of one 16-bit format may run on
	// that format's tensor cores with the same products.
	Operands [2]amp.Format
}

// weightOperand is the format of the values a weight enters a product
// with: a 16-bit weight's own format when computed in fp32, else the
// compute format it is rounded to; a 4-bit weight's dequantized values are
// not rounded (FP32); any other weight's is its node's format fw.
func weightOperand(w16 weights16, w4 bool, fw amp.Format) amp.Format {
	switch {
	case w4:
		return amp.FP32
	case w16.on && w16.compute == amp.FP32:
		return w16.stored
	case w16.on:
		return w16.compute
	}
	return fw
}

func (o *linearOp[T]) attrs() any {
	return LinearAttrs{N: o.n, In: o.in, Out: o.outF, W16: o.w16.on, W16Format: o.w16.stored, W4: o.w4.on, Compute: o.w16.compute,
		Operands: [2]amp.Format{o.inFm[0], weightOperand(o.w16, o.w4.on, o.inFm[1])}}
}

func (o *linearGradOp[T]) attrs() any {
	a := LinearAttrs{W16: o.w16.on, W16Format: o.w16.stored, W4: o.w4.on, Compute: o.w16.compute}
	if o.transA { // dW [out, in] = gᵀ[out, N]·x[N, in]
		a.Out, a.In, a.N = o.m, o.n, o.k
		a.Operands = [2]amp.Format{o.fa, o.fb}
	} else { // dx [N, in] = g[N, out]·W[out, in]
		a.N, a.In, a.Out = o.m, o.n, o.k
		a.Operands = [2]amp.Format{o.fa, weightOperand(o.w16, o.w4.on, o.fb)}
	}
	return a
}

// PointwiseAttrs are an elementwise op's: "add" computes x + Scale·y
// (with Scale·y rounded to Out first when Out is 16-bit and Scale ≠ 1),
// "silu" computes silu(gate)·up. Shape is every input's and the output's.
type PointwiseAttrs struct {
	Shape []int
	Scale float64
}

func (o *pointwiseOp[T]) attrs() any { return PointwiseAttrs{Shape: o.shape, Scale: o.scale} }

// fwdOp is the op whose base fwd is.
func fwdOp(fwd *opBase) gradOp { return fwd.self }

// ShapeAttrs are the attributes of ops that need only their shape:
// "cast" (round x to Out), "share" (a copy; see accumulate.go), and the
// "<kind>.grad_in" roundings of a gradient to its op's output format.
type ShapeAttrs struct{ Shape []int }

func (o *castOp) attrs() any      { return ShapeAttrs{Shape: o.shape} }
func (o *shareOp) attrs() any     { return ShapeAttrs{Shape: o.shape} }
func (o *gradRoundOp) attrs() any { return ShapeAttrs{Shape: o.shape} }

// LayerAttrs are a checkpointed layer's ("layer", Builder.Checkpoint): the
// layer runs on a graph of its own, shared by every layer of its shape,
// whose forward pass serves the model's forward pass and whose forward
// and backward passes serve the layer's backward op ("layer.backward",
// whose graph inputs are the layer op's and the output's gradient). The
// layer op's inputs are the layer's input, then its trainable params.
type LayerAttrs struct {
	// Graph holds the layer's forward ops and, once the model is
	// differentiated, its backward ops; Forward the forward ops alone.
	Graph, Forward *G.ExprGraph
	// Input and Output are the layer's in Graph, and OutputGrad the input
	// its backward pass reads the output's gradient from (nil before the
	// model is differentiated).
	Input, Output, OutputGrad *G.Node
	// Grads are Graph's gradients of Input, then of each trainable param,
	// in the layer op's input order (nil before differentiation).
	Grads G.Nodes
	// Params are Graph's weights as this layer has them.
	Params []LayerParam
	// IsParam says which of Graph's input nodes are weights.
	IsParam func(*G.Node) bool
	// Bind puts this layer's frozen weights and its ops' noise ids into
	// Graph: an engine calls it before it reads Graph's specs and weights
	// for this layer.
	Bind func() error
}

// LayerParam is a weight of a checkpointed layer.
type LayerParam struct {
	Node *G.Node // in LayerAttrs.Graph
	Name string  // this layer's name for it
	// Input is, for a trainable weight, the layer op's input that holds
	// it (1, 2, ...); 0 for a frozen one, whose value Bind puts in Node.
	Input int
}

func (o *layerOp[T]) attrs() any {
	lg := o.lg
	a := LayerAttrs{Graph: lg.b.G, Forward: lg.fwdGraph, Input: lg.x, Output: lg.out, OutputGrad: lg.dy, Grads: lg.grads,
		IsParam: lg.b.IsParam}
	t := 0
	for i, p := range lg.params {
		lp := LayerParam{Node: p.node, Name: o.names[i]}
		if p.trainable {
			t++
			lp.Input = t
		}
		a.Params = append(a.Params, lp)
	}
	a.Bind = func() error {
		lg.bindEngine(o.eng, o.idOffset)
		for i, p := range lg.params {
			if p.trainable {
				continue
			}
			if err := G.Let(p.node, o.values[i]); err != nil {
				return fmt.Errorf("nn: bind %s: %w", o.names[i], err)
			}
		}
		return nil
	}
	return a
}
