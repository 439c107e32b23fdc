// Package vkengine runs nn graphs on a Vulkan device: the second engine
// beside the CPU kernels. A graph is built once, by nn.Builder and
// model.Build, exactly as for the CPU; Compile walks its nodes in the
// order the CPU engine runs them, reads each op's nn.OpSpec and lowers it
// to recorded dispatches of gpu/vulkan's kernels on device buffers. A run
// records the whole graph into one command buffer and submits it once:
// weights, activations and gradients stay on the device, and only the
// inputs (token ids, targets, positions, the loss's gradient) go up; a
// preference objective's loss, computed on the host from a few values,
// is the one op that waits for the device mid-run (lower_seqlogprobs.go).
//
// Each kind of op has one lowering (lower.go and the files beside it),
// and tests compare the two engines op by op and on whole models.
package vkengine

import (
	"errors"
	"fmt"
	"slices"
	"time"
	"unsafe"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// Engine is an open Vulkan device with its kernels and a recorder.
type Engine struct {
	Device  *vulkan.Device
	Kernels *vulkan.Kernels
	rec     *vulkan.Recorder
	// flushEvery is how many commands a Program's run records before it
	// hands them to the device (vulkan.Recorder.Flush), so the device
	// works while the host records the rest; 0: the whole run in one
	// command buffer.
	flushEvery int
}

// defaultFlushEvery is Engine.flushEvery as New sets it: TinyLlama's
// step is about 4,400 commands at about 9 µs of host time each (the H100
// profile's 40 ms of host time a step), so the device starts after the
// first 128 (about 1 ms) and the host stays ahead of it.
const defaultFlushEvery = 128

// RecordAhead sets how many commands a run records before flushing them
// to the device; 0 records each run into one command buffer (to compare).
// The results are the same either way.
func (e *Engine) RecordAhead(commands int) { e.flushEvery = max(commands, 0) }

// Transfers counts host↔device bytes.
type Transfers struct{ Up, Down int64 }

// New builds the kernels for d and a recorder. The Engine does not own d.
func New(d *vulkan.Device) (*Engine, error) { return NewWith(d, vulkan.KernelOptions{}) }

// NewWith is New with the kernels' options.
func NewWith(d *vulkan.Device, o vulkan.KernelOptions) (*Engine, error) {
	ks, err := vulkan.NewKernelsWith(d, o)
	if err != nil {
		return nil, err
	}
	rec, err := d.NewRecorder()
	if err != nil {
		ks.Close()
		return nil, err
	}
	return &Engine{Device: d, Kernels: ks, rec: rec, flushEvery: defaultFlushEvery}, nil
}

// Close frees the kernels and the recorder.
func (e *Engine) Close() {
	e.rec.Close()
	e.Kernels.Close()
}

// recordFunc records one node's dispatches for a run.
type recordFunc func(r *vulkan.Recorder, pass nn.Pass) error

// node is one graph node as a lowering sees it.
type node struct {
	n    *G.Node
	spec nn.OpSpec
	in   []*vulkan.Buffer // the inputs' values
	inN  []*G.Node
	// out is the node's value: nil for a fused backward op, whose values
	// are grads.
	out *vulkan.Buffer
	// grads are a fused backward op's gradients, one per forward input
	// (nil where spec.GradShapes[i] is nil); picks hand them on.
	grads []*vulkan.Buffer
}

// Program is a graph compiled for an Engine.
type Program struct {
	e      *Engine
	order  G.Nodes
	bufs   map[*G.Node]*vulkan.Buffer
	params map[*G.Node]bool
	inputs G.Nodes // non-param inputs, uploaded every run
	steps  []recordFunc
	scopes []vulkan.Scope // each step's node, for Profile and timed runs
	owned  []*vulkan.Buffer
	saved  map[savedKey]*vulkan.Buffer
	ints   []hostInts
	nodes  map[*G.Node]*node
	fwd    map[int]*node // forward ops by ID, for their backward ops
	share  func(name string) *vulkan.Buffer
	hosts  map[int][]float64 // host_loss ops' last ∂loss/∂x, by op ID
	// named are the program's weights by name, with those of its
	// checkpointed layers' programs (Param).
	named map[string]*vulkan.Buffer
	// A checkpointed layer's programs (lower_layer.go) have their root,
	// the model's program, which uploads their inputs and owns them; the
	// buffers bind gives their inputs from the root's; their weights'
	// names are this layer's (paramName); their ops' buffers come from a
	// pool shared with the other layers' programs.
	root      *Program
	bind      map[*G.Node]*vulkan.Buffer
	paramName func(*G.Node) string
	pool      *pool
	layers    map[int]*layerPrograms // by the layer op's ID
	pools     map[poolKey]*pool
	subs      []*Program
	plan      *memPlan // PlanMemory: op values share buffers
	// cache is a decoding graph's key/value cache (WithCache), readied
	// before each run for attention of up to cacheHeads heads
	cache      *DecodeCache
	cacheHeads int
	// cacheUntiled: a head wider than the training kernel takes, so a
	// prompt too runs on the cache kernel
	cacheUntiled bool
	// counting (CountUnderflows) tallies the gradients' roundings into
	// counts, the model program's (top)
	counting bool
	counts   *gradCounts
	// products are the GEMMs a run records, counted as lowering meets
	// them (noteProduct), the model program's
	products []vulkan.GemmShape
	// attentions are the attention backward passes with dK and dV a run
	// records, the model program's
	attentions []vulkan.AttentionUse
	// Transfers counts the bytes this program copied between host and
	// device: the weights at Compile and SyncParams, the inputs at each
	// Run, what Read fetched.
	Transfers Transfers
}

type savedKey struct {
	id   int
	name string
}

// hostInts is a host []int the graph reads (positions), uploaded as int32
// every run because its owner refills it per micro-batch.
type hostInts struct {
	src []int
	buf *vulkan.Buffer
}

// ErrUnsupported wraps an op the engine has no lowering for.
var ErrUnsupported = errors.New("vkengine: op not supported on the Vulkan engine")

// CompileOption changes how Compile treats a graph's weights.
type CompileOption func(*Program)

// Share makes the program read a weight from another program's buffer
// instead of uploading its own copy, wherever buf returns one for the
// weight node's name: an evaluation graph reads the training graph's
// weights, which an optimizer on the device updates in place, and holds
// no second copy of the base model.
func Share(buf func(name string) *vulkan.Buffer) CompileOption {
	return func(p *Program) { p.share = buf }
}

// Compile lowers b's graph. isParam says which input nodes are weights:
// uploaded now and again only by SyncParams; every other input is
// uploaded at each Run.
func (e *Engine) Compile(g *G.ExprGraph, isParam func(*G.Node) bool, opts ...CompileOption) (*Program, error) {
	order, err := runOrder(g)
	if err != nil {
		return nil, fmt.Errorf("vkengine: %w", err)
	}
	p := newProgram(e, order)
	for _, o := range opts {
		o(p)
	}
	if err := p.startCounting(); err != nil {
		p.Close()
		return nil, err
	}
	if err := p.compile(isParam); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// runOrder is g's nodes in the order the CPU engine runs them.
func runOrder(g *G.ExprGraph) (G.Nodes, error) {
	order, err := G.Sort(g)
	if err != nil {
		return nil, fmt.Errorf("sort graph: %w", err)
	}
	slices.Reverse(order) // Sort puts outputs first
	return order, nil
}

// newProgram is an empty program over the nodes in order.
func newProgram(e *Engine, order G.Nodes) *Program {
	return &Program{e: e, order: order, bufs: map[*G.Node]*vulkan.Buffer{}, params: map[*G.Node]bool{},
		saved: map[savedKey]*vulkan.Buffer{}, nodes: map[*G.Node]*node{}, fwd: map[int]*node{}, named: map[string]*vulkan.Buffer{}}
}

// noteProduct counts a product each run of p records into the model
// program's list (Products); a 4-bit weight's products are left out, as
// they never run on tensor cores.
func (p *Program) noteProduct(g vulkan.GemmArgs) {
	if g.Q4 == nil {
		top := p.top()
		top.products = vulkan.AddShape(top.products, g)
	}
}

// Products are the GEMMs one run of the program records, by shape, with
// those of its checkpointed layers' programs: what a tensor-core tile is
// timed at (vulkan.Kernels.ChooseTile).
func (p *Program) Products() []vulkan.GemmShape { return slices.Clone(p.top().products) }

// Attentions are the attention backward passes one run of the program
// records with both dK and dV wanted, by shape, with its checkpointed
// layers' programs': where the dK/dV kernel's form is timed
// (vulkan.Kernels.ChooseSplitDKV).
func (p *Program) Attentions() []vulkan.AttentionUse { return slices.Clone(p.top().attentions) }

// top is the model's program: p, or the root of a layer's program.
func (p *Program) top() *Program {
	if p.root != nil {
		return p.root
	}
	return p
}

// nameOf is a weight's name as the model knows it.
func (p *Program) nameOf(n *G.Node) string {
	if p.paramName != nil {
		return p.paramName(n)
	}
	return n.Name()
}

func (p *Program) compile(isParam func(*G.Node) bool) error {
	if p.plan != nil {
		if err := p.plan.prepare(p.order); err != nil {
			return err
		}
	}
	for i, n := range p.order {
		if p.plan != nil {
			p.plan.release(i)
		}
		if n.Op() == nil {
			if b := p.bind[n]; b != nil {
				if b.Size() < bytesOf(n) {
					return fmt.Errorf("vkengine: bound input %s: %d bytes for %d", n.Name(), b.Size(), bytesOf(n))
				}
				p.bufs[n] = b
				continue
			}
			name := p.nameOf(n)
			if p.share != nil && isParam(n) {
				if b := p.share(name); b != nil {
					if b.Size() < bytesOf(n) {
						return fmt.Errorf("vkengine: shared weight %s: %d bytes for %d", name, b.Size(), bytesOf(n))
					}
					p.bufs[n], p.params[n] = b, true
					p.top().named[name] = b
					continue
				}
			}
			if !isParam(n) && p.root != nil {
				return fmt.Errorf("vkengine: input %s of a checkpointed layer is neither a weight nor the layer's input", n.Name())
			}
			b, err := p.allocOwn(bytesOf(n))
			if err != nil {
				return fmt.Errorf("vkengine: input %s: %w", name, err)
			}
			p.bufs[n] = b
			if isParam(n) {
				p.params[n] = true
				p.top().named[name] = b
				if err := p.upload(n); err != nil {
					return err
				}
			} else {
				p.inputs = append(p.inputs, n)
			}
			continue
		}
		spec, err := nn.Spec(n)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		nd := &node{n: n, spec: spec, inN: nn.Inputs(n)}
		for _, c := range nd.inN {
			nd.in = append(nd.in, p.bufs[c])
		}
		switch {
		case spec.Kind == "pick":
			src := p.nodes[nd.inN[0]]
			if src == nil || src.grads == nil || src.grads[spec.Pick] == nil {
				return fmt.Errorf("vkengine: %s picks gradient %d of a backward op that has none", n.Name(), spec.Pick)
			}
			p.bufs[n] = src.grads[spec.Pick]
			p.nodes[n] = nd
			continue
		case spec.GradShapes != nil:
			nd.grads = make([]*vulkan.Buffer, len(spec.GradShapes))
			for g, s := range spec.GradShapes {
				if s != nil {
					if nd.grads[g], err = p.take(valueKey{n, g}, 4*prod(s), hostWritten(spec)); err != nil {
						return err
					}
				}
			}
		default:
			if nd.out, err = p.take(valueKey{n, -1}, bytesOf(n), hostWritten(spec)); err != nil {
				return fmt.Errorf("vkengine: %s: %w", n.Name(), err)
			}
			p.bufs[n] = nd.out
		}
		if spec.Forward == nil {
			p.fwd[spec.ID] = nd
		}
		lower, ok := lowering(spec.Kind)
		if !ok {
			return fmt.Errorf("%w: %s (node %s)", ErrUnsupported, spec.Kind, n.Name())
		}
		rec, err := lower(p, nd)
		if err != nil {
			return fmt.Errorf("vkengine: lower %s (node %s): %w", spec.Kind, n.Name(), err)
		}
		p.nodes[n] = nd
		if rec = p.poisoned(nd, rec); rec != nil {
			p.steps = append(p.steps, rec)
			p.scopes = append(p.scopes, vulkan.Scope{Kind: spec.Kind, NodeID: int(n.ID()), Node: n.Name()})
		}
	}
	return nil
}

// Run uploads the inputs, records every node's dispatches into one batch
// and submits it.
func (p *Program) Run(pass nn.Pass) error { return p.RunWith(pass, nil) }

// RunWith is Run with after's dispatches recorded behind the graph's, in
// the same batch (a gradient accumulation, say).
func (p *Program) RunWith(pass nn.Pass, after func(r *vulkan.Recorder) error) error {
	if err := p.prepareRun(); err != nil {
		return err
	}
	r := p.e.rec
	if err := p.record(r, pass); err != nil {
		return err
	}
	r.SetScope(vulkan.Scope{})
	if after != nil {
		if err := after(r); err != nil {
			r.Discard()
			return err
		}
	}
	return r.Submit()
}

// prepareRun readies a run's inputs on the device: the graph's, the
// positions it reads, a decoding graph's cache.
func (p *Program) prepareRun() error {
	if p.cache != nil {
		if err := p.cache.prepare(p.cacheHeads, !p.cacheUntiled); err != nil {
			return err
		}
	}
	for _, n := range p.inputs {
		if err := p.upload(n); err != nil {
			return err
		}
	}
	for _, h := range p.ints {
		if err := p.writeInts(h.buf, h.src); err != nil {
			return err
		}
	}
	return nil
}

// record records every node's dispatches into r, handing them to the
// device every flushEvery commands; on an error nothing unflushed is
// submitted.
func (p *Program) record(r *vulkan.Recorder, pass nn.Pass) error {
	for i, rec := range p.steps {
		r.SetScope(p.scopes[i])
		if err := rec(r, pass); err != nil {
			r.Discard()
			return err
		}
		// Every input went up before the first command: nothing the host
		// writes from here on is read by a flushed command (host_loss, the
		// one op that writes mid-run, first waits for all of them).
		if every := p.e.flushEvery; every > 0 && r.Unflushed() >= every {
			if err := r.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// Submit records fn's dispatches as one batch and submits it; if fn
// fails, nothing recorded is submitted.
func (e *Engine) Submit(fn func(r *vulkan.Recorder) error) error {
	if err := fn(e.rec); err != nil {
		e.rec.Discard()
		return err
	}
	return e.rec.Submit()
}

// Time turns GPU timestamps on for every batch the engine submits (sink
// not nil: it receives each batch's times, each command labelled with the
// graph node that lowered it) or off (nil); see vulkan.Recorder.Time.
func (e *Engine) Time(sink func(vulkan.BatchTime)) error { return e.rec.Time(sink) }

// Param is the device buffer of the weight named name, or nil: the
// model's, or a checkpointed layer's.
func (p *Program) Param(name string) *vulkan.Buffer { return p.top().named[name] }

// Profile runs the program once with every node's dispatches in a batch
// of their own, and returns the wall time each op kind took, summed: a
// slower run (a submit and a fence wait per node), for finding the
// kernels that dominate a step.
func (p *Program) Profile(pass nn.Pass) (map[string]time.Duration, error) {
	if err := p.prepareRun(); err != nil {
		return nil, err
	}
	took := map[string]time.Duration{}
	r := p.e.rec
	for i, rec := range p.steps {
		start := time.Now()
		r.SetScope(p.scopes[i])
		if err := rec(r, pass); err != nil {
			r.Discard()
			return nil, err
		}
		if err := r.Submit(); err != nil {
			return nil, err
		}
		took[p.scopes[i].Kind] += time.Since(start)
	}
	return took, nil
}

// SyncParams uploads the host values of the given weight nodes (after
// the host changed them: an optimizer step, a restored checkpoint).
func (p *Program) SyncParams(ns ...*G.Node) error {
	for _, n := range ns {
		if !p.params[n] {
			return fmt.Errorf("vkengine: SyncParams: %s is not a weight of the program", n.Name())
		}
		if err := p.upload(n); err != nil {
			return err
		}
	}
	return nil
}

// Read downloads a float node's value into dst (len = the node's size).
// With PlanMemory, only a node it was told to keep.
func (p *Program) Read(n *G.Node, dst []float32) error {
	b := p.bufs[n]
	if b == nil {
		return fmt.Errorf("vkengine: Read: %s has no device value", n.Name())
	}
	if p.plan != nil && n.Op() != nil && !p.plan.keep[n] {
		return fmt.Errorf("vkengine: Read: %s was not kept (PlanMemory) and its buffer holds another value after a run", n.Name())
	}
	if len(dst) != max(prod(n.Shape()), 1) {
		return fmt.Errorf("vkengine: Read %s: %d values for shape %v", n.Name(), len(dst), n.Shape())
	}
	p.Transfers.Down += int64(4 * len(dst))
	return b.ReadFloat32(0, dst)
}

// Buffer is the device buffer holding n's value (nil if none; with
// PlanMemory, nil for an op's value it was not told to keep).
func (p *Program) Buffer(n *G.Node) *vulkan.Buffer {
	if p.plan != nil && n.Op() != nil && !p.plan.keep[n] {
		return nil
	}
	return p.bufs[n]
}

// hostWritten says whether the host writes the op's values mid-run
// (host_loss): they keep buffers of their own, which no command still in
// flight can be reading.
func hostWritten(s nn.OpSpec) bool { return s.Kind == "host_loss" || s.Kind == "host_loss.backward" }

// Close frees the program's buffers, with its layers' programs and pools.
func (p *Program) Close() {
	for _, sp := range p.subs {
		sp.Close()
	}
	for _, pl := range p.pools {
		pl.free()
	}
	for _, b := range p.owned {
		b.Free()
	}
	p.owned, p.subs, p.pools = nil, nil, nil
}

// alloc makes a buffer for an op's value: the program's own, or, in a
// checkpointed layer's program, the next of its pool.
func (p *Program) alloc(bytes int) (*vulkan.Buffer, error) {
	if p.pool != nil {
		return p.pool.take(p.e.Device, bytes)
	}
	return p.allocOwn(bytes)
}

// allocOwn makes a buffer the program owns (at least 4 bytes).
func (p *Program) allocOwn(bytes int) (*vulkan.Buffer, error) {
	b, err := p.e.Device.NewBuffer(max(4, (bytes+3)&^3))
	if err != nil {
		return nil, err
	}
	p.owned = append(p.owned, b)
	return b, nil
}

// Saved returns the buffer of bytes named name that op id keeps between
// its forward and backward lowerings (made on first use).
func (p *Program) Saved(id int, name string, bytes int) (*vulkan.Buffer, error) {
	k := savedKey{id, name}
	if b, ok := p.saved[k]; ok {
		if b.Size() < bytes {
			return nil, fmt.Errorf("vkengine: saved %s of op %d: %d bytes asked, %d made", name, id, bytes, b.Size())
		}
		return b, nil
	}
	b, err := p.alloc(bytes)
	if err != nil {
		return nil, err
	}
	p.saved[k] = b
	return b, nil
}

// HostInts returns a device copy of src, a host slice the graph's owner
// refills between runs (positions), uploaded as int32 at every run.
func (p *Program) HostInts(src []int) (*vulkan.Buffer, error) {
	if p.root != nil { // the model's program uploads it
		return p.root.HostInts(src)
	}
	for _, h := range p.ints {
		if len(h.src) == len(src) && len(src) > 0 && &h.src[0] == &src[0] {
			return h.buf, nil
		}
	}
	b, err := p.allocOwn(4 * len(src))
	if err != nil {
		return nil, err
	}
	p.ints = append(p.ints, hostInts{src: src, buf: b})
	return b, nil
}

// forward is the node of the forward op a backward spec belongs to.
func (p *Program) forward(spec nn.OpSpec) (*node, error) {
	nd := p.fwd[spec.ID]
	if nd == nil {
		return nil, fmt.Errorf("vkengine: no forward op %d for %s", spec.ID, spec.Kind)
	}
	return nd, nil
}

func (p *Program) upload(n *G.Node) error {
	v := n.Value()
	if v == nil {
		return fmt.Errorf("vkengine: input %s has no value", n.Name())
	}
	up, err := writeValue(p.bufs[n], v)
	p.Transfers.Up += up
	if err != nil {
		return fmt.Errorf("vkengine: input %s: %w", n.Name(), err)
	}
	return nil
}

// writeValue writes an input's value to b as the kernels read it, and
// returns the bytes it sent.
func writeValue(b *vulkan.Buffer, v G.Value) (int64, error) {
	switch d := v.Data().(type) {
	case []float32:
		return int64(4 * len(d)), b.WriteFloat32(0, d)
	case float32:
		return 4, b.WriteFloat32(0, []float32{d})
	case []uint16:
		if len(d)%2 == 1 {
			d = append(d[:len(d):len(d)], 0)
		}
		return int64(2 * len(d)), b.WriteUint16(0, d)
	case []uint8: // a 4-bit weight's blob (nn.Builder.Param4), read in place by the GEMM
		return int64(len(d)), b.Write(0, d)
	case []int:
		w := int32Bytes(d)
		return int64(len(w)), b.Write(0, w)
	default:
		return 0, fmt.Errorf("holds %T; the Vulkan engine takes float32 graphs", d)
	}
}

func (p *Program) writeInts(b *vulkan.Buffer, src []int) error {
	w := int32Bytes(src)
	p.Transfers.Up += int64(len(w))
	return b.Write(0, w)
}

// int32Bytes is src as int32 values, as the kernels read them.
func int32Bytes(src []int) []byte {
	w := make([]byte, 4*len(src))
	for i, x := range src {
		*(*int32)(unsafe.Pointer(&w[4*i])) = int32(x)
	}
	return w
}

// bytesOf is the size of n's value on the device: int32 ids, 16-bit
// weights, 4-bit weights' blobs (bytes), float32 otherwise.
func bytesOf(n *G.Node) int {
	k := max(prod(n.Shape()), 1)
	switch n.Dtype() {
	case tensor.Uint16:
		return 2 * k
	case tensor.Uint8:
		return k
	}
	return 4 * k
}

func prod(s []int) int {
	k := 1
	for _, d := range s {
		k *= d
	}
	return k
}

// rounding is the vulkan rounding for a format.
func rounding(f amp.Format) vulkan.Rounding {
	switch f {
	case amp.BF16:
		return vulkan.RoundBF16
	case amp.FP16:
		return vulkan.RoundFP16
	}
	return vulkan.NoRounding
}
