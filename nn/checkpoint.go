package nn

import (
	"fmt"
	"strings"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Activation checkpointing. A model graph holds every op's output for the
// backward pass: at 2,048 tokens a 1B-parameter decoder layer keeps about
// 300 MiB of activations, and its backward ops as much again in gradient
// buffers, all alive for the whole step. A checkpointed layer instead runs
// on a graph of its own, built once for all the layers of its shape: the
// model's graph keeps only each layer's input and output, and the layer's
// backward binds that layer's weights again, recomputes its forward pass
// and then differentiates it. One layer's activations and gradients exist
// at a time, for the price of a second forward pass.
//
// The recomputation is the same computation, op for op and rounding for
// rounding, so gradients are bit-identical to the whole graph's; dropout
// draws each layer's masks by the ids its ops would have in a whole graph.

// paramRecord is a param a recording builder added, in order.
type paramRecord struct {
	name      string
	node      *G.Node
	value     G.Value
	trainable bool
}

// layerGraph is one layer's graph, serving every checkpointed layer whose
// params have the same names, shapes and kinds (up to the layer index).
type layerGraph struct {
	b        *Builder // its own engine: what its ops cache, they cache per bind
	sig      string
	idBase   int // the builder id at which the layer's ops began
	x, out   *G.Node
	params   []paramRecord
	fwdGraph *G.ExprGraph // the forward pass alone (out's subgraph)
	fwd      G.VM         // forward only: the forward pass of the model's graph
	full     G.VM         // forward and backward: the model's backward pass
	dy       *G.Node
	grads    G.Nodes // gradient of x, then of each trainable param in order
	trainIdx []int   // indices into params of the trainable ones
}

// Checkpoint adds a checkpointed layer: build adds the layer to the
// builder it is given, reading x, and returns the layer's output. sameAs
// maps a param name to a name that is equal for the corresponding params
// of every layer (the layer index taken out), so that layers with the
// same params share one graph. It returns the layer's output and the
// trainable params, by name, as the model's graph holds them (the nodes
// gradients are taken with respect to, behind a tap if b has GradTap).
func (b *Builder) Checkpoint(x *G.Node, sameAs func(name string) string, build func(lb *Builder, x *G.Node) *G.Node) (*G.Node, map[string]*G.Node) {
	check(b.Dtype == tensor.Float32 || b.Dtype == tensor.Float64, "checkpoint: dtype %v", b.Dtype)
	lb := NewBuilder(&Engine{BLAS: b.Eng.BLAS, BF16: b.Eng.BF16, Workers: b.Eng.Workers}, b.Dtype)
	lb.Policy = b.Policy
	lb.PackFrozenWeights = b.PackFrozenWeights
	lb.RoundInProducts = b.RoundInProducts
	lb.FuseAdapterAdd = b.FuseAdapterAdd
	lb.HoldBF16Operands = b.HoldBF16Operands
	lb.recording = true
	lb.nextID = b.nextID
	idStart := b.nextID

	shape := shapeOf(x)
	lx := G.NewTensor(lb.G, b.Dtype, len(shape), G.WithShape(shape...), G.WithName("layer_input"))
	lb.needsGrad[lx] = true // every layer's input but the first depends on a trainable weight
	lb.format[lx] = b.format[x]
	out := build(lb, lx)
	check(out.Shape().Eq(x.Shape()), "checkpoint: layer output %v for input %v", out.Shape(), x.Shape())
	b.nextID = lb.nextID // the ops after the layer get the ids they would in a whole graph

	var sig strings.Builder
	fmt.Fprintf(&sig, "%v %v|", shape, lb.format[out])
	for _, p := range lb.params {
		fmt.Fprintf(&sig, "%s %v %v %v|", sameAs(p.name), p.value.Shape(), p.value.Dtype(), p.trainable)
	}
	var lg *layerGraph
	for _, l := range b.layers {
		if l.sig == sig.String() {
			lg = l // lb and its ops are dropped unrun: their buffers were never allocated
			break
		}
	}
	if lg == nil {
		lg = &layerGraph{b: lb, sig: sig.String(), idBase: idStart, x: lx, out: out, params: lb.params}
		for i, p := range lb.params {
			if p.trainable {
				lg.trainIdx = append(lg.trainIdx, i)
			}
		}
		lg.fwdGraph = lb.G.ExactSubgraphRoots(out)
		lg.fwd = NewTapeMachine(b.Eng, lg.fwdGraph)
		b.layers = append(b.layers, lg)
	}

	values := make([]G.Value, len(lb.params))
	names := make([]string, len(lb.params))
	inputs := G.Nodes{x}
	trainable := map[string]*G.Node{}
	for i, p := range lb.params {
		values[i], names[i] = p.value, p.name
		if p.trainable {
			n := b.Param(p.name, shapeOf(p.node), paramData(p.value), true)
			trainable[p.name] = n
			inputs = append(inputs, n)
		}
	}
	base := b.newBase("layer", inputs...)
	b.nextID-- // the layer's ops have taken their ids, and it takes the first of them
	base.id = idStart + 1
	base.out = lg.b.format[lg.out]
	var n *G.Node
	if b.Dtype == tensor.Float64 {
		n = b.apply(&layerOp[float64]{opBase: base, lg: lg, values: values, names: names, idOffset: idStart - lg.idBase, shape: shape, buf: newBuffer[float64](shape...)}, inputs...)
	} else {
		n = b.apply(&layerOp[float32]{opBase: base, lg: lg, values: values, names: names, idOffset: idStart - lg.idBase, shape: shape, buf: newBuffer[float32](shape...)}, inputs...)
	}
	return n, trainable
}

// paramData is the float32 master data behind a param's value: a float64
// builder's param holds a copy, which Param makes again.
func paramData(v G.Value) []float32 {
	switch d := v.Data().(type) {
	case []float32:
		return d
	case []float64:
		out := make([]float32, len(d))
		for i, x := range d {
			out[i] = float32(x)
		}
		return out
	}
	panic(fmt.Sprintf("nn: trainable param of type %T", v.Data()))
}

// bind puts a layer's input and weights into the layer graph and brings
// its engine up to the model engine's step, noise and id offset. Each
// bind invalidates what the layer graph's ops cached.
func (lg *layerGraph) bind(eng *Engine, idOffset int, x G.Value, values []G.Value, trained []G.Value) error {
	lg.bindEngine(eng, idOffset)
	if err := G.Let(lg.x, x); err != nil {
		return fmt.Errorf("nn: bind layer input: %w", err)
	}
	t := 0
	for i, p := range lg.params {
		v := values[i]
		if p.trainable { // the model graph's value: a gradient check perturbs it
			v = trained[t]
			t++
		}
		if err := G.Let(p.node, v); err != nil {
			return fmt.Errorf("nn: bind %s: %w", p.name, err)
		}
	}
	return nil
}

// bindEngine brings the layer graph's engine up to the model engine's
// step, noise and id offset.
func (lg *layerGraph) bindEngine(eng *Engine, idOffset int) {
	le := lg.b.Eng
	le.BLAS, le.Workers = eng.BLAS, eng.Workers
	le.weights, le.pass, le.NoiseRowOffset = eng.weights, eng.pass, eng.NoiseRowOffset
	le.idOffset = idOffset
	le.binds++
}

// takeGradCounts moves the layer engine's gradient tallies to eng.
func (lg *layerGraph) takeGradCounts(eng *Engine) {
	r, u := lg.b.Eng.Grads.Take()
	eng.Grads.rounded.Add(r)
	eng.Grads.underflowed.Add(u)
}

// differentiate adds the layer graph's backward pass, once.
func (lg *layerGraph) differentiate() error {
	if lg.full != nil {
		return nil
	}
	lb := lg.b
	shape := shapeOf(lg.out)
	lg.dy = G.NewTensor(lb.G, lb.Dtype, len(shape), G.WithShape(shape...), G.WithName("layer_output_grad"))
	wrt := G.Nodes{lg.x}
	for _, i := range lg.trainIdx {
		wrt = append(wrt, lg.params[i].node)
	}
	grads, err := G.Backpropagate(G.Nodes{lg.out}, G.Nodes{lg.dy}, wrt)
	if err != nil {
		return fmt.Errorf("nn: differentiate a checkpointed layer: %w", err)
	}
	lg.grads = grads
	lg.full = NewTapeMachine(lb.Eng, lb.G)
	return nil
}

// runVM runs one of the layer graph's machines.
func runVM(vm G.VM) error {
	vm.Reset()
	return vm.RunAll()
}

// layerOp is a checkpointed layer in the model's graph. Inputs: the
// layer's input, then its trainable params in the layer graph's order.
type layerOp[T Float] struct {
	opBase
	lg       *layerGraph
	values   []G.Value // this layer's params, in lg.params order
	names    []string  // and their names
	idOffset int       // this layer's op ids minus lg's
	shape    []int
	buf      buffer[T]
}

func (o *layerOp[T]) Arity() int { return 1 + len(o.lg.trainIdx) }
func (o *layerOp[T]) Type() hm.Type {
	ranks := []int{len(o.shape)}
	for _, i := range o.lg.trainIdx {
		ranks = append(ranks, len(o.lg.params[i].value.Shape()))
	}
	return fnType(append(ranks, len(o.shape))...)
}
func (o *layerOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}

func (o *layerOp[T]) Do(vs ...G.Value) (G.Value, error) {
	if err := o.lg.bind(o.eng, o.idOffset, vs[0], o.values, vs[1:]); err != nil {
		return nil, err
	}
	if err := runVM(o.lg.fwd); err != nil {
		return nil, fmt.Errorf("nn: %v forward: %w", o, err)
	}
	t, y := o.buf.get()
	copy(y, o.lg.out.Value().Data().([]T))
	return t, nil
}

func (o *layerOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	if err := o.lg.differentiate(); err != nil {
		return nil, err
	}
	shapes := make([][]int, len(inputs))
	for i, in := range inputs {
		shapes[i] = shapeOf(in)
	}
	graphIn := append(append(G.Nodes(nil), inputs...), grad)
	return fusedBackward[T](&o.opBase, graphIn, shapes, o.backward), nil
}

// backward recomputes the layer's forward pass for its input and weights,
// differentiates it with the output's gradient, and hands out the input's
// and the trainable params' gradients.
func (o *layerOp[T]) backward(in [][]T, grads [][]T) error {
	lg := o.lg
	wrap := func(s []T, shape tensor.Shape) G.Value {
		return tensor.New(tensor.WithShape(shape.Clone()...), tensor.WithBacking(s))
	}
	trained := make([]G.Value, len(lg.trainIdx))
	for j, i := range lg.trainIdx {
		trained[j] = wrap(in[1+j], lg.params[i].value.Shape())
	}
	if err := lg.bind(o.eng, o.idOffset, wrap(in[0], lg.x.Shape()), o.values, trained); err != nil {
		return err
	}
	if err := G.Let(lg.dy, wrap(in[len(in)-1], lg.dy.Shape())); err != nil {
		return fmt.Errorf("nn: bind the layer's output gradient: %w", err)
	}
	if err := runVM(lg.full); err != nil {
		return fmt.Errorf("nn: %v backward: %w", o, err)
	}
	lg.takeGradCounts(o.eng)
	for i, g := range grads {
		if g != nil {
			copy(g, lg.grads[i].Value().Data().([]T))
		}
	}
	return nil
}
