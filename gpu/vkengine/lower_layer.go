package vkengine

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// Activation checkpointing on the device ("layer", nn.Builder.Checkpoint).
// A checkpointed layer runs on a graph of its own, the same graph for
// every layer of its shape. Each layer gets two programs compiled from
// it: its forward pass (for the model's forward pass) and its forward and
// backward passes (for the layer's backward op, which recomputes the
// activations it needs). Their inputs are the model program's buffers
// (the layer's input, its trainable weights, the output's gradient); its
// frozen weights are uploaded once, by the forward program, and read by
// the other. Every buffer their ops compute into comes from a pool that
// all layers' programs of that kind share: the programs of one layer
// graph allocate the same buffers in the same order, so the k-th buffer
// plays the same part in each, and only one layer's activations and
// gradients exist on the device at a time. The layer's output and
// gradients are copied out of the pool into the model program's buffers.
// The programs record the same dispatches, in the same order, as the
// whole graph would, so the results are the uncheckpointed graph's bit
// for bit.

// layerPrograms are one checkpointed layer's programs; full is nil in a
// program without a backward pass.
type layerPrograms struct {
	attrs     nn.LayerAttrs
	fwd, full *Program
}

// poolKey names a pool: the layer graph and which of its programs.
type poolKey struct {
	g    *G.ExprGraph
	full bool
}

// pool is the buffers the programs of one kind of a layer graph share.
type pool struct {
	bufs []*vulkan.Buffer
	next int
}

// take is the pool's next buffer, made on first use; a program that asks
// for more than an earlier one was given at the same place does not have
// the layer graph's layout, and is an error.
func (pl *pool) take(d *vulkan.Device, bytes int) (*vulkan.Buffer, error) {
	bytes = max(4, (bytes+3)&^3)
	defer func() { pl.next++ }()
	if pl.next < len(pl.bufs) {
		if b := pl.bufs[pl.next]; b.Size() >= bytes {
			return b, nil
		}
		return nil, fmt.Errorf("vkengine: layer pool buffer %d: %d bytes asked, %d made", pl.next, bytes, pl.bufs[pl.next].Size())
	}
	b, err := d.NewBuffer(bytes)
	if err != nil {
		return nil, err
	}
	pl.bufs = append(pl.bufs, b)
	return b, nil
}

func (pl *pool) free() {
	for _, b := range pl.bufs {
		b.Free()
	}
	pl.bufs = nil
}

// layerProgram compiles one of a layer's programs from g (the layer
// graph's forward ops, or all of them) with its inputs bound to bind,
// planned (keeping keep) when p is.
func (p *Program) layerProgram(a nn.LayerAttrs, g *G.ExprGraph, full bool, bind map[*G.Node]*vulkan.Buffer, keep ...*G.Node) (*Program, error) {
	if p.root != nil {
		return nil, fmt.Errorf("a checkpointed layer within a checkpointed layer")
	}
	if err := a.Bind(); err != nil {
		return nil, err
	}
	order, err := runOrder(g)
	if err != nil {
		return nil, fmt.Errorf("the layer graph: %w", err)
	}
	if p.pools == nil {
		p.pools = map[poolKey]*pool{}
	}
	k := poolKey{a.Graph, full}
	pl := p.pools[k]
	if pl == nil {
		pl = &pool{}
		p.pools[k] = pl
	}
	pl.next = 0
	names := map[*G.Node]string{}
	for _, lp := range a.Params {
		names[lp.Node] = lp.Name
	}
	sp := newProgram(p.e, order)
	sp.root, sp.bind, sp.pool, sp.share = p, bind, pl, p.share
	if p.plan != nil {
		PlanMemory(keep...)(sp)
		sp.plan.poison = p.plan.poison
	}
	sp.paramName = func(n *G.Node) string {
		if name, ok := names[n]; ok {
			return name
		}
		return n.Name()
	}
	p.subs = append(p.subs, sp) // closed with p, also on an error
	if err := sp.compile(a.IsParam); err != nil {
		return nil, err
	}
	return sp, nil
}

// layerBind binds a layer program's inputs: the layer's input and its
// trainable weights to the layer op's inputs in (the model program's
// buffers), and, for the backward program, its frozen weights to the
// forward program's.
func layerBind(a nn.LayerAttrs, in []*vulkan.Buffer, fwd *Program) (map[*G.Node]*vulkan.Buffer, error) {
	bind := map[*G.Node]*vulkan.Buffer{a.Input: in[0]}
	for _, lp := range a.Params {
		switch {
		case lp.Input > 0:
			if lp.Input >= len(in) {
				return nil, fmt.Errorf("weight %s is input %d of %d", lp.Name, lp.Input, len(in))
			}
			bind[lp.Node] = in[lp.Input]
		case fwd != nil:
			if b := fwd.bufs[lp.Node]; b != nil {
				bind[lp.Node] = b
			}
		}
	}
	return bind, nil
}

// lowerLayer is the layer's forward pass: its forward program, then the
// output copied out of the pool.
func lowerLayer(p *Program, nd *node) (recordFunc, error) {
	a, err := attrsAs[nn.LayerAttrs](&nd.spec)
	if err != nil {
		return nil, err
	}
	bind, err := layerBind(a, nd.in, nil)
	if err != nil {
		return nil, err
	}
	fwd, err := p.layerProgram(a, a.Forward, false, bind, a.Output)
	if err != nil {
		return nil, fmt.Errorf("forward program: %w", err)
	}
	if p.layers == nil {
		p.layers = map[int]*layerPrograms{}
	}
	p.layers[nd.spec.ID] = &layerPrograms{attrs: a, fwd: fwd}
	out := fwd.bufs[a.Output]
	size := uint64(bytesOf(a.Output))
	return func(r *vulkan.Recorder, pass nn.Pass) error {
		if err := fwd.record(r, pass); err != nil {
			return err
		}
		return r.Copy(nd.out, 0, out, 0, size)
	}, nil
}

// lowerLayerBackward recomputes the layer's forward pass and
// differentiates it (its backward program), then copies the gradients
// of the input and the trainable weights out of the pool, rounded to
// their inputs' formats as every backward op's are.
func lowerLayerBackward(p *Program, nd *node) (recordFunc, error) {
	lp := p.layers[nd.spec.ID]
	if lp == nil {
		return nil, fmt.Errorf("no forward program for layer %d", nd.spec.ID)
	}
	a := lp.attrs
	if a.OutputGrad == nil || len(a.Grads) != len(nd.grads) {
		return nil, fmt.Errorf("the layer graph has %d gradients for %d inputs", len(a.Grads), len(nd.grads))
	}
	bind, err := layerBind(a, nd.in, lp.fwd)
	if err != nil {
		return nil, err
	}
	bind[a.OutputGrad] = nd.in[len(nd.in)-1]
	if lp.full, err = p.layerProgram(a, a.Graph, true, bind, a.Grads...); err != nil {
		return nil, fmt.Errorf("backward program: %w", err)
	}
	type copyOut struct {
		src, dst *vulkan.Buffer
		n        int
		round    vulkan.Rounding
	}
	var outs []copyOut
	for i, g := range nd.grads {
		if g == nil {
			continue
		}
		src := lp.full.bufs[a.Grads[i]]
		if src == nil {
			return nil, fmt.Errorf("gradient %d of the layer was not computed", i)
		}
		outs = append(outs, copyOut{src, g, prod(a.Grads[i].Shape()), rounding(nd.spec.In[i])})
	}
	return func(r *vulkan.Recorder, pass nn.Pass) error {
		if err := lp.full.record(r, pass); err != nil {
			return err
		}
		for _, c := range outs {
			if err := r.Copy(c.dst, 0, c.src, 0, uint64(4*c.n)); err != nil {
				return err
			}
			if err := p.roundGrad(r, c.dst, c.n, c.round); err != nil {
				return err
			}
		}
		return nil
	}, nil
}
