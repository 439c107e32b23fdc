package nn

import (
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Gradient taps: a trainer that reduces gradients across processes wants
// each weight's gradient the moment the backward pass has it, to send it
// while the pass goes on to earlier layers.
//
// The tape runs nodes in about the order they were made, and gorgonia
// makes a weight's gradient while it differentiates the weight's last
// reader: so a node made after the whole backward pass (one that merely
// reads the gradient) would run at its very end. Instead Param puts an
// identity node, the tap, between the weight and its readers. The tap's
// own derivative, made by gorgonia right after the readers' (summed over
// them when there are several), is a hook node that hands the gradient to
// the caller and passes it on unchanged. It runs right after the gradient
// is complete, and the values computed are exactly those without taps.

// GradTap, when set on a Builder before its params are added, is called
// for each trainable float32 param; the function it returns (nil: no tap)
// is called with the param's whole gradient for the micro-batch each time
// the backward pass has computed it. The slice is the graph's: read it
// before returning.
type GradTap func(name string) func(grad []float32)

// tap returns the identity node over the trainable leaf p whose backward
// calls onGrad.
func (b *Builder) tap(p *G.Node, name string, onGrad func([]float32)) *G.Node {
	b.taps++
	shape := shapeOf(p)
	// Taps take no op ids from the builder: dropout masks are drawn by op
	// id, and must not change when taps are added.
	op := &tapOp{name: name, id: b.taps, shape: shape, onGrad: onGrad}
	n, err := G.ApplyOp(op, p)
	if err != nil {
		panic(fmt.Sprintf("nn: tap %s: %v", name, err))
	}
	b.needsGrad[n], b.isParam[n], b.format[n] = true, true, b.format[p]
	b.leaf[n] = p
	return n
}

// Leaf is the param node behind n: the node to take gradients with
// respect to. It is n itself unless n is a tap.
func (b *Builder) Leaf(n *G.Node) *G.Node {
	if l, ok := b.leaf[n]; ok {
		return l
	}
	return n
}

// tapOp is the identity. Its value is the weight's own tensor, not a
// copy: nn ops never overwrite their inputs, and an op that does not
// return a pointer gets a register of its own, which no later op
// reuses.
type tapOp struct {
	name   string
	id     int
	shape  []int
	onGrad func([]float32)
}

func (o *tapOp) Arity() int    { return 1 }
func (o *tapOp) Type() hm.Type { return fnType(len(o.shape), len(o.shape)) }
func (o *tapOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}
func (o *tapOp) Do(vs ...G.Value) (G.Value, error) { return vs[0], nil }
func (o *tapOp) ReturnsPtr() bool                  { return false } // a register of its own, never shared with another op
func (o *tapOp) CallsExtern() bool                 { return false }
func (o *tapOp) OverwritesInput() int              { return -1 }
func (o *tapOp) String() string                    { return "tap#" + o.name }
func (o *tapOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "mixtune.tap#%d", o.id)
}
func (o *tapOp) Hashcode() uint32   { return hashOf(o) }
func (o *tapOp) DiffWRT(int) []bool { return []bool{true} }
func (o *tapOp) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	h := &hookOp{tap: o}
	n, err := G.ApplyOp(h, grad)
	if err != nil {
		return nil, fmt.Errorf("nn: tap %s: %w", o.name, err)
	}
	return G.Nodes{n}, nil
}

// hookOp passes a gradient through and shows it to the tap's caller.
type hookOp struct{ tap *tapOp }

func (o *hookOp) Arity() int    { return 1 }
func (o *hookOp) Type() hm.Type { return fnType(len(o.tap.shape), len(o.tap.shape)) }
func (o *hookOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.tap.shape).Clone(), nil
}
func (o *hookOp) Do(vs ...G.Value) (G.Value, error) {
	g, ok := vs[0].Data().([]float32)
	if !ok {
		return nil, fmt.Errorf("nn: tap %s: the gradient is %T, not float32", o.tap.name, vs[0].Data())
	}
	o.tap.onGrad(g)
	return vs[0], nil
}
func (o *hookOp) ReturnsPtr() bool     { return false }
func (o *hookOp) CallsExtern() bool    { return false }
func (o *hookOp) OverwritesInput() int { return -1 }
func (o *hookOp) String() string       { return "tap.grad#" + o.tap.name }
func (o *hookOp) WriteHash(h hash.Hash) {
	fmt.Fprintf(h, "mixtune.tap.grad#%d", o.tap.id)
}
func (o *hookOp) Hashcode() uint32   { return hashOf(o) }
func (o *hookOp) DiffWRT(int) []bool { return []bool{false} }
func (o *hookOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errNotTwice
}

func hashOf(o interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	o.WriteHash(h)
	return h.Sum32()
}
