package vkengine

import (
	"fmt"
	"math"
	"sort"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// The memory plan (PlanMemory). Left alone, every op's value has a device
// buffer of its own, alive for the program's life: a step holds every
// activation, every activation's gradient and every weight's gradient at
// once, though most are read by one or two ops and dead right after. With
// a plan, compile first finds each value's last reader in the order the
// ops run, and then hands a value's buffer, once that reader has run, to
// the next value that fits it. The recorder puts a barrier between every
// two commands, so a later op's writes never overtake an earlier op's
// reads of the same buffer.
//
// A checkpointed layer's programs are planned too, their buffers taken
// from the layer's pool (lower_layer.go): every layer's program makes the
// same choices, so the k-th buffer of the pool still plays the same part
// in each; what the layer hands on (its output, its gradients) is kept.
//
// Not planned (a buffer of their own, for good): the values kept (read
// after a run: the loss, the weights' gradients), what ops keep between
// their forward and backward passes (Program.Saved) or use as scratch,
// and the values the host writes mid-run (host_loss's). A fused backward
// op reads its forward op through Program.forward, not through graph
// edges: it counts as reading every input and the output of its forward
// op.

// valueKey is a planned value: a node's output (grad −1) or gradient grad
// of a fused backward op.
type valueKey struct {
	n    *G.Node
	grad int
}

// memPlan is a program's plan while it compiles.
type memPlan struct {
	keep    map[*G.Node]bool // as given: the nodes Read may read
	kept    map[valueKey]bool
	poison  bool
	last    map[valueKey]int   // the index in the order of each value's last reader
	dying   map[int][]valueKey // values by that index
	owner   map[valueKey]*vulkan.Buffer
	free    []*vulkan.Buffer        // by size, smallest first
	done    int                     // dying[i] released for every i < done
	planned map[*vulkan.Buffer]bool // buffers the plan hands out (to poison)
}

// PlanMemory makes the program's op values share device buffers where
// their lifetimes within a run do not overlap. keep lists the nodes read
// after a run (Read, Buffer): their values keep buffers of their own.
func PlanMemory(keep ...*G.Node) CompileOption {
	return func(p *Program) {
		p.plan = &memPlan{keep: map[*G.Node]bool{}}
		for _, n := range keep {
			if n != nil {
				p.plan.keep[n] = true
			}
		}
	}
}

// PoisonMemory, with PlanMemory, fills every planned buffer with NaNs
// before the op that writes it, at every run: an op that reads what it
// has not written, or a reader the plan missed, shows as NaNs (tests).
func PoisonMemory() CompileOption {
	return func(p *Program) {
		if p.plan != nil {
			p.plan.poison = true
		}
	}
}

// valueOf is the value a node's consumers read: a pick's is its fused
// backward op's gradient.
func valueOf(n *G.Node, specs map[*G.Node]nn.OpSpec) valueKey {
	if s, ok := specs[n]; ok && s.Kind == "pick" {
		return valueKey{nn.Inputs(n)[0], s.Pick}
	}
	return valueKey{n, -1}
}

// prepare finds each value's last reader in order.
func (pl *memPlan) prepare(order G.Nodes) error {
	specs := map[*G.Node]nn.OpSpec{}
	fwd := map[int]*G.Node{}
	for _, n := range order {
		if n.Op() == nil {
			continue
		}
		s, err := nn.Spec(n)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		specs[n] = s
		if s.Forward == nil {
			fwd[s.ID] = n
		}
	}
	pl.kept, pl.last, pl.dying, pl.owner = map[valueKey]bool{}, map[valueKey]int{}, map[int][]valueKey{}, map[valueKey]*vulkan.Buffer{}
	pl.planned = map[*vulkan.Buffer]bool{}
	for n := range pl.keep {
		pl.kept[valueOf(n, specs)] = true
	}
	// values in the order they are written, so that the plan is the same
	// for every compilation of a graph: a layer's programs share a pool
	// by the order they take its buffers in
	var values []valueKey
	read := func(c *G.Node, i int) {
		if c.Op() == nil {
			return
		}
		v := valueOf(c, specs)
		pl.last[v] = max(pl.last[v], i)
	}
	for i, n := range order {
		s, ok := specs[n]
		if !ok || s.Kind == "pick" {
			continue
		}
		pl.last[valueKey{n, -1}] = i // written here: dead after, if nobody reads it
		values = append(values, valueKey{n, -1})
		for g := range s.GradShapes {
			pl.last[valueKey{n, g}] = i
			values = append(values, valueKey{n, g})
		}
		for _, c := range nn.Inputs(n) {
			read(c, i)
		}
		if s.Forward != nil {
			f := fwd[s.ID]
			if f == nil {
				return fmt.Errorf("vkengine: no forward op %d for %s", s.ID, s.Kind)
			}
			read(f, i)
			for _, c := range nn.Inputs(f) {
				read(c, i)
			}
		}
	}
	for _, v := range values {
		i := pl.last[v]
		pl.dying[i] = append(pl.dying[i], v)
	}
	return nil
}

// release frees the buffers of the values whose last reader comes before
// index i.
func (pl *memPlan) release(i int) {
	freed := false
	for ; pl.done < i; pl.done++ {
		for _, v := range pl.dying[pl.done] {
			if b := pl.owner[v]; b != nil { // owned: a planned buffer
				delete(pl.owner, v)
				pl.free, freed = append(pl.free, b), true
			}
		}
	}
	if freed {
		sort.SliceStable(pl.free, func(a, b int) bool { return pl.free[a].Size() < pl.free[b].Size() })
	}
}

// take is a buffer of at least bytes for value v: the smallest free one
// no more than twice as large, else a new one.
func (p *Program) take(v valueKey, bytes int, own bool) (*vulkan.Buffer, error) {
	pl := p.plan
	if pl == nil || own || pl.kept[v] {
		return p.alloc(bytes)
	}
	need := max(4, (bytes+3)&^3)
	for i, b := range pl.free {
		if b.Size() >= need && b.Size() <= 2*need {
			pl.free = append(pl.free[:i], pl.free[i+1:]...)
			pl.owner[v] = b
			return b, nil
		}
	}
	b, err := p.alloc(bytes) // a layer program's comes from its pool, in the same order for every layer
	if err != nil {
		return nil, err
	}
	pl.owner[v], pl.planned[b] = b, true
	return b, nil
}

// poisoned wraps rec to fill nd's planned buffers with NaNs first.
func (p *Program) poisoned(nd *node, rec recordFunc) recordFunc {
	pl := p.plan
	if pl == nil || !pl.poison || rec == nil {
		return rec
	}
	var bufs []*vulkan.Buffer
	for _, b := range append([]*vulkan.Buffer{nd.out}, nd.grads...) {
		if b != nil && pl.planned[b] {
			bufs = append(bufs, b)
		}
	}
	if len(bufs) == 0 {
		return rec
	}
	nan := float32(math.NaN())
	return func(r *vulkan.Recorder, pass nn.Pass) error {
		for _, b := range bufs {
			if err := p.e.Kernels.Scale(r, b, b, b.Size()/4, nan, vulkan.NoRounding); err != nil {
				return err
			}
		}
		return rec(r, pass)
	}
}
