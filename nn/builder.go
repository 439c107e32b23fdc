// Package nn holds the fused operations of a Llama transformer as gorgonia
// ops with hand-written forward and backward kernels, and a Builder that
// assembles them into a differentiable graph.
//
// Every op computes in float32 (or float64, for gradient checks), reuses its
// output buffer from step to step, and rounds its output and the gradients it
// produces to the formats the Builder's precision hook assigns, so mixed
// precision is decided in one place and not inside the kernels.
//
// An op's value may be overwritten by a later in-place gorgonia op once its
// last reader has run; whatever a backward op needs beyond its graph inputs
// is kept in the op's own saved state, never in a returned value.
package nn

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/par"
)

// Engine is what kernels need at run time: the backend and thread count it
// is configured with, and the state of the run in progress, which only its
// own methods change. A training loop hands the engine each micro-batch's
// Pass as it runs the graph (Run) and tells it when the weights change
// (WeightsChanged); nothing else of the loop lives here.
type Engine struct {
	BLAS blas.Backend
	// BF16, when set, runs the products whose operands the precision
	// policy puts in bf16 as bf16×bf16→fp32 GEMMs (on the CPU's bf16
	// units); nil emulates them exactly: bf16 values in the fp32 kernels.
	BF16    blas.BF16Gemmer
	Workers int // goroutines for row-parallel kernels; results never depend on it
	// NoiseRowOffset is the index, in the whole micro-batch, of the first
	// row (token) this engine's graph holds: a data-parallel rank holds a
	// slice of the micro-batch, and draws each token's dropout mask as one
	// process holding all of it would.
	NoiseRowOffset int
	// Grads tallies the gradient values rounded to a low precision in the
	// backward pass and how many of them underflowed to zero.
	Grads GradCount

	// pass is the run in progress (Run); the zero Pass outside one.
	pass Pass
	// weights counts WeightsChanged calls. Low-precision copies of
	// parameters are cast again only when it changes: once per optimizer
	// step, not once per micro-batch, and never from a stale master weight.
	weights uint64

	blocks sync.Pool // *[]float32 conversion blocks of 16-bit weights (weights16.go)
	bits   sync.Pool // *[]uint16 bf16 operands of the bf16 GEMM (bf16gemm.go)

	// binds counts the weights bound to this engine's graph: a
	// checkpointed layer's graph (checkpoint.go) serves every layer of its
	// shape, so what an op cached for one layer's weights is stale once
	// another's are bound. Zero, and never changing, for a model's graph.
	binds uint64
	// idOffset is added to an op's id where the id picks random numbers
	// (dropout): a checkpointed layer's graph draws the masks of whichever
	// layer is bound, as that layer's ops in a whole graph would.
	idOffset int
}

// Pass is what one run of a graph depends on besides its inputs and
// weights: the training loop's choice for one micro-batch.
type Pass struct {
	// Noise seeds random ops (dropout). A training loop derives it from
	// the run's seed and position, and a random op draws from a pure
	// function of it and the op's identity, so a resumed run draws the
	// same masks as an uninterrupted one with no RNG state to save. Zero
	// means evaluation: random ops are off.
	Noise uint64
}

// Run runs vm, a machine for a graph built on e, once from the start as
// pass p. Ops read p only during the run: a graph run any other way
// (vm.RunAll) is an evaluation pass. An engine runs one pass at a time;
// graphs that must run at once with different passes need an engine each.
func (e *Engine) Run(vm G.VM, p Pass) error {
	e.pass = p
	defer func() { e.pass = Pass{} }()
	vm.Reset()
	return vm.RunAll()
}

// WeightsChanged tells the engine that trainable weights were written (an
// optimizer step, a restored checkpoint): what its ops derived from them,
// low-precision copies and DoRA norms, is computed again on the next run.
func (e *Engine) WeightsChanged() { e.weights++ }

// WeightsVersion counts WeightsChanged calls: another engine holding
// copies of the weights (gpu/vkengine) uploads them again when it moves.
func (e *Engine) WeightsVersion() uint64 { return e.weights }

// GradCount counts gradient values rounded to fp16 or bf16 and those that
// became zero doing so: the loss that dynamic loss scaling exists to
// prevent. Backward kernels add to it concurrently; the trainer reads and
// resets it once per optimizer step.
type GradCount struct {
	rounded, underflowed atomic.Int64
}

// Take returns the counts since the last Take and resets them.
func (c *GradCount) Take() (rounded, underflowed int64) {
	return c.rounded.Swap(0), c.underflowed.Swap(0)
}

// NewEngine uses every available CPU for the row-parallel kernels.
func NewEngine(be blas.Backend) *Engine {
	return &Engine{BLAS: be, Workers: runtime.GOMAXPROCS(0)}
}

// parallel runs fn over [0,n) in contiguous ranges on up to e.Workers
// goroutines. Callers make each index's result independent of the split, so
// the output is bit-identical for any worker count.
func (e *Engine) parallel(n, minChunk int, fn func(lo, hi int)) {
	w := e.Workers
	if w > n/max(minChunk, 1) {
		w = n / max(minChunk, 1)
	}
	if w <= 1 {
		fn(0, n)
		return
	}
	par.Run(w, func(i int) { fn(i*n/w, (i+1)*n/w) })
}

// Builder assembles a graph of nn ops. It tracks, like PyTorch's
// requires_grad, which nodes depend on a trainable parameter, so that an op
// never computes a gradient nobody needs (a frozen weight costs no dW GEMM),
// and which format each node's values hold.
type Builder struct {
	G      *G.ExprGraph
	Eng    *Engine
	Dtype  tensor.Dtype // tensor.Float32, or tensor.Float64 for gradient checks
	Policy *amp.Policy  // per-op compute formats; nil computes everything in fp32
	// PackFrozenWeights lets a linear layer on a bf16 GEMM that packs
	// float32 operands itself read a frozen fp32 weight with no bf16 copy:
	// the GEMM rounds it into the packings it keeps. Only for graphs the
	// CPU engine runs: an engine that compiles the graph (gpu/vkengine)
	// reads the weight as the graph holds it.
	PackFrozenWeights bool
	// RoundInProducts lets an op whose products all run on the engine's
	// bf16 GEMM read an fp32 activation it computes on in bf16 with no
	// cast: the GEMM rounds a float32 operand to bf16 as it packs or
	// converts it, nearest even, the bits the cast would give, so the
	// cast's pass over the activation and its copy are left out
	// (Builder.roundsInProducts). Only for graphs the CPU engine runs, as
	// PackFrozenWeights.
	RoundInProducts bool
	// FuseAdapterAdd lets AddLinear form its sum as its product's epilogue.
	// Only for graphs the CPU engine runs, as PackFrozenWeights.
	FuseAdapterAdd bool
	// HoldBF16Operands lets a linear layer whose products run on the
	// engine's bf16 GEMM read its input activation as bf16 bits, converted
	// once for all its readers, and keep those for its backward pass in
	// place of the float32 activation (bf16operand.go). Only for graphs
	// the CPU engine runs, as PackFrozenWeights.
	HoldBF16Operands bool

	needsGrad map[*G.Node]bool
	isParam   map[*G.Node]bool
	is16      map[*G.Node]bool  // frozen weights stored as 16-bit values
	q4        map[*G.Node][]int // frozen 4-bit weights (blobs), with their shapes
	casts     map[castKey]*G.Node
	castIDs   map[castKey]int     // the ids of casts left out (readRaw)
	bits      map[*G.Node]*G.Node // activations' bf16 operands (bf16Operand)
	bitsID    int                 // the last bf16 operand's id: they count down from -1
	format    map[*G.Node]amp.Format
	nextID    int

	// perReaderCast marks casts of activations: PyTorch casts those once
	// per reading op, so their gradients add up in fp32 (see accumulate.go).
	perReaderCast map[*G.Node]bool
	// shareTail is, for a low-precision node read by ops that need its
	// gradient, the node its next reader reads (see Builder.reader).
	shareTail map[*G.Node]*G.Node
	// embeddings are the graph's embedding ops, for RowSparse.
	embeddings []rowSparser

	// GradTap, when set, taps the gradients of trainable params (tap.go).
	GradTap GradTap
	leaf    map[*G.Node]*G.Node // tap node -> its param
	taps    int

	// params, when recording, lists the params in the order they were
	// added: a checkpointed layer's graph binds another layer's weights to
	// them (checkpoint.go).
	recording bool
	params    []paramRecord
	// layers are the checkpointed layers' graphs, one per distinct layer.
	layers []*layerGraph
}

// NewBuilder starts an empty graph. Low-precision policies need float32.
func NewBuilder(eng *Engine, dt tensor.Dtype) *Builder {
	return &Builder{
		G:         G.NewGraph(),
		Eng:       eng,
		Dtype:     dt,
		needsGrad: map[*G.Node]bool{},
		isParam:   map[*G.Node]bool{},
		is16:      map[*G.Node]bool{},
		casts:     map[castKey]*G.Node{},
		castIDs:   map[castKey]int{},
		bits:      map[*G.Node]*G.Node{},
		format:    map[*G.Node]amp.Format{},

		perReaderCast: map[*G.Node]bool{},
		shareTail:     map[*G.Node]*G.Node{},
		leaf:          map[*G.Node]*G.Node{},
	}
}

// NeedsGrad reports whether n depends on a trainable parameter.
func (b *Builder) NeedsGrad(n *G.Node) bool { return b.needsGrad[n] }

// IsParam reports whether n is a weight (Param or Param16), as opposed
// to an input set before each run.
func (b *Builder) IsParam(n *G.Node) bool { return b.isParam[n] }

// Format is the format n's values hold (fp32 unless a precision policy said otherwise).
func (b *Builder) Format(n *G.Node) amp.Format { return b.format[n] }

// Param adds a named weight whose values live in data (float32 master
// weights, shared, not copied; a float64 builder copies them). Trainable
// params are what gradients are taken with respect to. With GradTap set,
// a trainable param is returned behind a tap; Leaf gives the param node.
func (b *Builder) Param(name string, shape []int, data []float32, trainable bool) *G.Node {
	var backing any = data
	if b.Dtype == tensor.Float64 {
		d := make([]float64, len(data))
		for i, v := range data {
			d[i] = float64(v)
		}
		backing = d
	}
	t := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(backing))
	n := G.NewTensor(b.G, b.Dtype, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(t))
	b.needsGrad[n] = trainable
	b.isParam[n] = true
	if b.recording {
		b.params = append(b.params, paramRecord{name: name, node: n, value: t, trainable: trainable})
	}
	if trainable && b.GradTap != nil && b.Dtype == tensor.Float32 {
		if onGrad := b.GradTap(name); onGrad != nil {
			return b.tap(n, name, onGrad)
		}
	}
	return n
}

// Input adds a float input of the given shape whose values are set before each run.
func (b *Builder) Input(name string, shape ...int) *G.Node {
	return G.NewTensor(b.G, b.Dtype, len(shape), G.WithShape(shape...), G.WithName(name))
}

// IntInput adds an integer input (token ids, targets) of length n.
func (b *Builder) IntInput(name string, n int) *G.Node {
	return G.NewVector(b.G, tensor.Int, G.WithShape(n), G.WithName(name))
}

// formatOf is the format op kind computes in, given its inputs.
func (b *Builder) formatOf(kind string, inputs ...*G.Node) amp.Format {
	if b.Policy == nil {
		return amp.FP32
	}
	fs := make([]amp.Format, 0, len(inputs))
	for _, in := range inputs {
		if in.Dtype() != tensor.Int {
			fs = append(fs, b.format[in])
		}
	}
	return b.Policy.Format(kind, fs...)
}

// lower casts x to format f unless it already holds f. Only narrowing
// needs a node: a narrower value is already exact in a wider format. A
// node is cast to a format once, however many ops read it (q, k and v
// share their input).
func (b *Builder) lower(x *G.Node, f amp.Format) *G.Node {
	if f == amp.FP32 || b.format[x] == f {
		return x
	}
	key := castKey{x, f}
	if c, ok := b.casts[key]; ok {
		return c
	}
	var c *G.Node
	if id, ok := b.castIDs[key]; ok { // the id an op reading x with no cast kept for it
		next := b.nextID
		b.nextID = id - 1
		c = b.Cast(x, f)
		b.nextID = next
	} else {
		c = b.Cast(x, f)
	}
	b.casts[key] = c
	return c
}

// readRaw is lower for an op that reads x with no cast, its products
// rounding x to f themselves (roundsInProducts): it takes the id the
// cast would have taken, and keeps it for a later reader that needs the
// cast after all, so that every op has the id it has in a graph with the
// cast (dropout draws its masks by op id: the two graphs, this engine's
// and another's, draw the same ones).
func (b *Builder) readRaw(x *G.Node, f amp.Format) {
	key := castKey{x, f}
	if _, ok := b.casts[key]; ok {
		return
	}
	if _, ok := b.castIDs[key]; !ok {
		b.nextID++
		b.castIDs[key] = b.nextID
	}
}

// roundsInProducts says whether an op computing in format f may read x,
// an fp32 activation, as it is, every product that reads it running on
// the engine's bf16 GEMM (the caller checks that, productsOnBF16): the
// GEMM rounds x to bf16 as it packs or converts it (Engine.gemmBF16,
// Engine.bf16Product: amp's rounding), which is the cast's value, and the
// gradient an activation's cast passes on is its readers' fp32 sum, what
// x gets as the reader itself. The op then records bf16 as x's operand
// format, the values its products read, and rounds x's gradient to it
// as it rounded the cast's.
// A cast that an earlier reader made is read as it is. The caller then
// calls readRaw.
func (b *Builder) roundsInProducts(x *G.Node, f amp.Format, productsOnBF16 bool) bool {
	_, cast := b.casts[castKey{x, f}]
	return b.RoundInProducts && productsOnBF16 && f == amp.BF16 && b.Dtype == tensor.Float32 &&
		b.format[x] == amp.FP32 && !b.isParam[x] && b.Eng.BF16 != nil && !cast
}

type castKey struct {
	n *G.Node
	f amp.Format
}

// apply adds op's node and records what the builder tracks about it. An
// input whose gradient op needs is read through Builder.reader, so that a
// low-precision tensor's readers' gradients add up as autograd adds them.
func (b *Builder) apply(op gradOp, inputs ...*G.Node) *G.Node {
	for i, in := range inputs {
		if op.base().wrt[i] {
			inputs[i] = b.reader(in)
		}
	}
	op.base().self = op
	n, err := G.ApplyOp(op, inputs...)
	if err != nil {
		// Shapes are checked by the builder methods before this point, so
		// an error here is a bug in mixtune, not bad user input.
		panic(fmt.Sprintf("nn: %v: %v", op, err))
	}
	for _, in := range inputs {
		if b.needsGrad[in] {
			b.needsGrad[n] = true
		}
	}
	b.format[n] = op.base().out
	return n
}

// newBase fills the fields every op shares. kind selects the compute
// format; wrt says which inputs need a gradient.
func (b *Builder) newBase(kind string, inputs ...*G.Node) opBase {
	b.nextID++
	ob := opBase{
		eng:  b.Eng,
		id:   b.nextID,
		kind: kind,
		out:  b.formatOf(kind, inputs...),
		wrt:  make([]bool, len(inputs)),
		inFm: make([]amp.Format, len(inputs)),
	}
	for i, in := range inputs {
		ob.wrt[i] = b.needsGrad[in]
		ob.inFm[i] = b.format[in]
	}
	return ob
}

// shapeOf returns a node's static shape as ints.
func shapeOf(n *G.Node) []int { return []int(n.Shape()) }

// check panics with a message naming the op when a builder precondition
// fails; the model package validates configs so users never reach these.
func check(ok bool, format string, args ...any) {
	if !ok {
		panic("nn: " + fmt.Sprintf(format, args...))
	}
}
