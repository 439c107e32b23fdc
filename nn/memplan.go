package nn

import (
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Memory planning: which op outputs may share memory.
//
// Every op owns the buffer it writes its output into (buffer), and keeps
// it from step to step. Left alone, a graph holds every value it ever
// computes at once: each activation, each activation's gradient, each
// weight's gradient, although most are read by one or two ops and dead
// right after. PlanMemory walks the graph in the order the tape machine
// runs it, finds each output's last reader, and lets outputs whose
// lifetimes do not overlap share one block, as PyTorch's caching
// allocator hands a freed activation's memory to the next one. What the
// backward pass reads (the saved activations) stays live until it has
// read it, so the plan changes where values live, never which values a
// kernel sees: the losses and gradients are bit for bit the unplanned
// graph's (TestMemoryPlanIsBitIdentical in train).
//
// Only outputs that are fresh are planned: written whole by their op on
// every run, before anything reads them (freshOutput). A cached cast of
// a weight, the row-sparse gradient of an embedding table (it clears only
// the rows it wrote last time) and any value read after the run (a
// gradient, the loss: every node no op reads, and those the caller names)
// keep memory of their own. Ops the planner does not know (gorgonia's own
// +, which may write its sum over its first input, and the taps, which
// pass their input through) are taken to alias their inputs: those stay
// live as long as the op's own readers.

// block is a piece of memory the plan hands to values whose lifetimes do
// not overlap.
type block struct {
	size  int
	free  bool
	freed int // when it was last freed: its value's last reader
}

// pickBlock returns the free block a value of need elements takes: the
// smallest that holds it, of those the one freed last, or else the
// largest free one, grown to need; nil where none is free.
func pickBlock(blocks []*block, need int) *block {
	var best, largest *block
	for _, bl := range blocks {
		if !bl.free {
			continue
		}
		if bl.size >= need && (best == nil || bl.size < best.size || bl.size == best.size && bl.freed > best.freed) {
			best = bl
		}
		if largest == nil || bl.size > largest.size {
			largest = bl
		}
	}
	if best == nil && largest != nil {
		best, largest.size = largest, need
	}
	return best
}

// freshOutput is implemented by ops whose value is their own buffer,
// every element of which their Do writes on every run, before the value
// is read. It returns that buffer (a *buffer[float32] or
// *buffer[float64]), or nil where the op keeps its value across runs.
type freshOutput interface{ outputBuffer() any }

// MemoryPlan reports what PlanMemory did.
type MemoryPlan struct {
	Planned      int   // fresh outputs that share blocks
	Pinned       int   // fresh outputs that keep memory of their own: read after a run, or allocated already
	PlannedBytes int64 // the planned outputs' sizes, summed: the memory they held unplanned
	BlockBytes   int64 // the blocks they share now
}

func (p MemoryPlan) String() string {
	return fmt.Sprintf("%d outputs (%.1f MiB) in %.1f MiB of shared blocks; %d kept apart",
		p.Planned, float64(p.PlannedBytes)/(1<<20), float64(p.BlockBytes)/(1<<20), p.Pinned)
}

// PlanOption changes how PlanMemory plans.
type PlanOption func(*planConfig)

type planConfig struct {
	poison bool
	early  int // tests: free each value this many ops before its last reader (a wrong plan)
}

// PoisonBlocks makes every planned output be filled with NaN just before
// its op writes it. A test option: a value read after the plan let
// another output overwrite it, or an element an op does not write, shows
// up as NaN in the loss instead of going unnoticed.
func PoisonBlocks() PlanOption { return func(c *planConfig) { c.poison = true } }

// planFreeEarly is a deliberately wrong plan, for the tests that show a
// wrong plan is caught.
func planFreeEarly(n int) PlanOption { return func(c *planConfig) { c.early = n } }

// PlanMemory lets the fresh outputs of b's graph share memory where their
// lifetimes do not overlap, and those of the graphs of its checkpointed
// layers. keep are the nodes read after a run besides the graph's sinks
// (a value another graph or the caller reads while it still has readers
// here). Call it once, after the graph is complete (differentiated) and
// before it first runs. Graphs of float64 (gradient checks) are left
// unplanned.
func (b *Builder) PlanMemory(keep G.Nodes, opts ...PlanOption) (MemoryPlan, error) {
	var cfg planConfig
	for _, o := range opts {
		o(&cfg)
	}
	var plan MemoryPlan
	if b.Dtype != tensor.Float32 {
		return plan, nil
	}
	if err := planGraph(b.G, keep, nil, cfg, &plan); err != nil {
		return plan, err
	}
	for _, lg := range b.layers {
		if lg.full == nil {
			continue // never differentiated: an evaluation graph's layers
		}
		// A layer graph runs on two machines: forward only (lg.fwd), in
		// an order of its own, and forward and backward (lg.full). Its
		// forward values are planned as if all were live together, so
		// that no order of the forward pass can overwrite one; the
		// backward pass's values share with each other and with the
		// forward values dead by then.
		forward := map[*G.Node]bool{}
		var mark func(n *G.Node)
		mark = func(n *G.Node) {
			if forward[n] {
				return
			}
			forward[n] = true
			for _, c := range Inputs(n) {
				mark(c)
			}
		}
		mark(lg.out)
		if err := planGraph(lg.b.G, append(G.Nodes{lg.out}, lg.grads...), forward, cfg, &plan); err != nil {
			return plan, err
		}
	}
	return plan, nil
}

// inputsReadLater is an op whose inputs are read after it runs, by the
// op that reads its value (a deferred linear op: Builder.AddLinear).
type inputsReadLater interface{ readsInputsLater() bool }

// planGraph plans one graph into plan. Values written by the nodes in
// together are planned as live together from the start.
func planGraph(g *G.ExprGraph, keep G.Nodes, together map[*G.Node]bool, cfg planConfig, plan *MemoryPlan) error {
	order, err := G.Sort(g)
	if err != nil {
		return fmt.Errorf("nn: plan memory: sort graph: %w", err)
	}
	slices.Reverse(order) // the tape machine's order: inputs first
	pos := make(map[*G.Node]int, len(order))
	for i, n := range order {
		pos[n] = i
	}

	// The values: each fresh buffer, with the position of the op that
	// writes it and of its last reader.
	type value struct {
		buf       planned
		def, last int
		pinned    bool
	}
	var values []*value
	byBuf := map[planned]*value{}
	roots := make(map[*G.Node][]*value, len(order)) // the buffers a node's value lives in
	readers := make(map[*G.Node]int, len(order))
	for i, n := range order {
		op := n.Op()
		if op == nil {
			continue
		}
		ins := Inputs(n)
		for _, c := range ins {
			readers[c]++
			for _, v := range roots[c] {
				v.last = max(v.last, i)
			}
		}
		buf, def := ownBuffer(op, n, pos)
		switch {
		case buf != nil:
			v := byBuf[buf]
			if v == nil {
				v = &value{buf: buf, def: def, last: i}
				if together[n] {
					v.def = -1
				}
				if buf.allocated() { // allocated already: not this plan's to move
					v.pinned = true
				}
				byBuf[buf] = v
				values = append(values, v)
			}
			roots[n] = []*value{v}
			if d, ok := op.(inputsReadLater); ok && d.readsInputsLater() {
				// its product runs when its reader runs (AddLinear): its
				// inputs live as long as its value does
				for _, c := range ins {
					roots[n] = append(roots[n], roots[c]...)
				}
			}
		case isBackward(op):
			// its value is a placeholder scalar; its picks hand out its buffers
		default:
			// an op that may return its input, or write over it: its value
			// is (maybe) its inputs'
			var rs []*value
			for _, c := range ins {
				rs = append(rs, roots[c]...)
			}
			roots[n] = rs
		}
	}
	kept := make(map[*G.Node]bool, len(keep))
	for _, n := range keep {
		kept[n] = true
	}
	for _, n := range order {
		if readers[n] > 0 && !kept[n] {
			continue
		}
		for _, v := range roots[n] {
			v.pinned = true
		}
	}

	// Greedy assignment in the order the values are written: a value
	// takes the smallest free block that holds it, or grows the largest
	// free one, or opens a new block. A block is free again once the last
	// reader of its value has run. Of blocks of one size (many values of
	// a decoder are [tokens, dim]), the one freed last is taken: its
	// lines are the likeliest to be in cache still, where the op writing
	// the new value would otherwise fetch each line it writes from memory
	// first.
	var blocks []*block
	assigned := map[*value]*block{}
	var live []*value
	slices.SortStableFunc(values, func(a, b *value) int { return a.def - b.def })
	for _, v := range values {
		if v.pinned {
			plan.Pinned++
			continue
		}
		keepLive := live[:0]
		for _, u := range live {
			if u.last-cfg.early < v.def {
				assigned[u].free, assigned[u].freed = true, u.last
			} else {
				keepLive = append(keepLive, u)
			}
		}
		live = keepLive
		need := v.buf.words()
		best := pickBlock(blocks, need)
		if best == nil {
			best = &block{size: need}
			blocks = append(blocks, best)
		}
		best.free = false
		assigned[v] = best
		live = append(live, v)
		plan.Planned++
		plan.PlannedBytes += 4 * int64(need)
	}
	mem := map[*block][]float32{}
	for _, bl := range blocks {
		mem[bl] = make([]float32, bl.size)
		plan.BlockBytes += 4 * int64(bl.size)
	}
	for v, bl := range assigned {
		v.buf.place(mem[bl], cfg.poison)
	}
	return nil
}

// ownBuffer is the fresh buffer a node's value lives in (float32 values,
// or bf16 bits), and the position of the op that writes it: the node's
// own, or for a pick its backward op's. nil where the value is not fresh.
func ownBuffer(op G.Op, n *G.Node, pos map[*G.Node]int) (planned, int) {
	switch o := op.(type) {
	case *pickOp[float32]:
		if o.src.early { // written by the forward op (LMHeadLoss), not at the backward node
			return nil, 0
		}
		src := Inputs(n)[0]
		return &o.src.bufs[o.i], pos[src]
	case *bf16OperandOp:
		if o.byProducer { // written by the op that produces its input
			return &o.buf, pos[Inputs(n)[0]]
		}
		return &o.buf, pos[n]
	case freshOutput:
		switch b := o.outputBuffer().(type) {
		case *buffer[float32]:
			if b != nil {
				return b, pos[n]
			}
		case *bitsBuffer:
			return b, pos[n]
		}
	}
	return nil, 0
}

func isBackward(op G.Op) bool {
	switch op.(type) {
	case *backwardOp[float32], *backwardOp[float64]:
		return true
	}
	return false
}

// Inputs are n's inputs, in order (gorgonia keeps them unexported).
func Inputs(n *G.Node) G.Nodes {
	it := n.Graph().From(n.ID())
	var cs G.Nodes
	for it.Next() {
		cs = append(cs, it.Node().(*G.Node))
	}
	return cs
}

// The ops whose outputs are fresh. Each was read for it: the op's Do
// writes every element of its buffer on every run (the poisoned tests
// check that too).
func (o *linearOp[T]) outputBuffer() any         { return &o.buf }
func (o *linearGradOp[T]) outputBuffer() any     { return &o.buf }
func (o *pointwiseOp[T]) outputBuffer() any      { return &o.buf }
func (o *rmsNormOp[T]) outputBuffer() any        { return &o.buf }
func (o *ropeOp[T]) outputBuffer() any           { return &o.buf }
func (o *attentionOp[T]) outputBuffer() any      { return &o.buf }
func (o *attentionTiledOp[T]) outputBuffer() any { return &o.buf }
func (o *biasOp[T]) outputBuffer() any           { return &o.buf }
func (o *biasGradOp[T]) outputBuffer() any       { return &o.buf }
func (o *dropoutOp[T]) outputBuffer() any        { return &o.buf }
func (o *embeddingOp[T]) outputBuffer() any      { return &o.buf }
func (o *doraOp[T]) outputBuffer() any           { return &o.buf }
func (o *layerOp[T]) outputBuffer() any          { return &o.buf }
func (o *gradRoundOp) outputBuffer() any         { return &o.buf }

// A cast of an activation is fresh; a weight's is cached across runs.
func (o *castOp) outputBuffer() any {
	if o.cache != noCache {
		return nil
	}
	return &o.buf
}
