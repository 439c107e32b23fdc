package nn

import (
	"fmt"
	"hash"
	"hash/fnv"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// Float is the element type of a graph: float32 for training, float64 for
// gradient checks.
type Float interface{ float32 | float64 }

// opBase holds what every op shares and implements the parts of
// gorgonia.Op that are the same for all of them.
type opBase struct {
	eng  *Engine
	id   int    // unique within a graph: ops with saved state must never be merged by hash
	kind string // the op-list name a precision policy refers to ("linear", "rmsnorm", ...)
	out  amp.Format
	wrt  []bool       // which inputs need a gradient
	inFm []amp.Format // each input's format: its gradient is rounded to it
	self gradOp       // the op this is the base of, set when it joins a graph (OpSpec)
}

type gradOp interface {
	G.Op
	base() *opBase
}

func (o *opBase) base() *opBase         { return o }
func (o *opBase) ReturnsPtr() bool      { return false }
func (o *opBase) CallsExtern() bool     { return false }
func (o *opBase) OverwritesInput() int  { return -1 }
func (o *opBase) String() string        { return fmt.Sprintf("%s#%d", o.kind, o.id) }
func (o *opBase) WriteHash(h hash.Hash) { fmt.Fprintf(h, "mixtune.%s#%d", o.kind, o.id) }
func (o *opBase) Hashcode() uint32 {
	h := fnv.New32a()
	o.WriteHash(h)
	return h.Sum32()
}

// DiffWRT reports the inputs that need a gradient, decided when the op was built.
func (o *opBase) DiffWRT(int) []bool { return o.wrt }

// fnType builds an op type from input ranks; a negative rank is an int
// tensor (token ids), rank 0 a scalar. The last rank is the output's.
func fnType(ranks ...int) hm.Type {
	a := hm.TypeVariable('a')
	ts := make([]hm.Type, len(ranks))
	for i, r := range ranks {
		switch {
		case r < 0:
			ts[i] = G.TensorType{Dims: -r, Of: tensor.Int}
		case r == 0:
			ts[i] = a
		default:
			ts[i] = G.TensorType{Dims: r, Of: a}
		}
	}
	return hm.NewFnType(ts...)
}

// vals extracts the typed backing slices of gorgonia values; a scalar (the
// gradient flowing into the loss) becomes a slice of one.
func vals[T Float](vs []G.Value) [][]T {
	out := make([][]T, len(vs))
	for i, v := range vs {
		switch d := v.Data().(type) {
		case []T:
			out[i] = d
		case T:
			out[i] = []T{d}
		case []int, []uint16:
			// int inputs (token ids) are read with ints(), bf16 bits
			// (bf16Operand) by the op itself; keep the slot empty
		default:
			panic(fmt.Sprintf("nn: unexpected value of type %T", d))
		}
	}
	return out
}

func ints(v G.Value) []int { return v.Data().([]int) }

// buffer is an op's reusable output tensor, allocated on first use, or
// placed in a block it shares with outputs of other lifetimes by
// Builder.PlanMemory.
type buffer[T Float] struct {
	shape  []int
	t      *tensor.Dense
	poison bool // PoisonBlocks: filled with NaN before each write
}

func newBuffer[T Float](shape ...int) buffer[T] { return buffer[T]{shape: shape} }

// get returns the output tensor and its data, for the op about to write
// it. Kernels overwrite every element.
func (b *buffer[T]) get() (*tensor.Dense, []T) {
	t, d := b.tensor()
	if b.poison {
		nan := T(math.NaN())
		for i := range d {
			d[i] = nan
		}
	}
	return t, d
}

// tensor returns the output tensor and its data as they stand, for an op
// that hands on a value another op wrote (a pick).
func (b *buffer[T]) tensor() (*tensor.Dense, []T) {
	if b.t == nil {
		b.t = tensor.New(tensor.WithShape(b.shape...), tensor.WithBacking(make([]T, b.len())))
	}
	return b.t, b.t.Data().([]T)
}

func (b *buffer[T]) len() int {
	n := 1
	for _, d := range b.shape {
		n *= d
	}
	return n
}

// scalarValue is a 0-d output (the loss).
func scalarValue[T Float](v T) G.Value {
	if isF32[T]() {
		return G.NewF32(float32(v))
	}
	return G.NewF64(float64(v))
}

// roundAll rounds a whole buffer to format f, split across the engine's
// workers: emulating a low precision touches every output and gradient,
// and a single core would make it the bottleneck.
func roundAll[T Float](e *Engine, f amp.Format, xs []T) {
	if f == amp.FP32 {
		return
	}
	e.parallel(len(xs), 1<<14, func(lo, hi int) { round(f, xs[lo:hi]) })
}

// roundGrad is roundAll for a gradient: it also counts, in the same pass
// over each chunk, the values that underflow to zero.
func roundGrad[T Float](e *Engine, f amp.Format, g []T) {
	if f == amp.FP32 {
		return
	}
	if x, ok := any(g).([]float32); ok {
		roundGradTo(e, f, x, x)
	}
}

// roundGradTo writes src rounded to f into dst (which may be src),
// counting underflows as roundGrad does, in one pass.
func roundGradTo(e *Engine, f amp.Format, dst, src []float32) {
	e.parallel(len(src), 1<<14, func(lo, hi int) {
		if n := f.RoundCount(dst[lo:hi], src[lo:hi]); n > 0 {
			e.Grads.underflowed.Add(int64(n))
		}
	})
	if f != amp.FP32 {
		e.Grads.rounded.Add(int64(len(src)))
	}
}

// roundGradBlock is roundGrad on one block of a gradient, on the calling
// goroutine, for kernels that round each block as they finish it; the
// caller adds the whole gradient's length to e.Grads.rounded once.
func roundGradBlock[T Float](e *Engine, f amp.Format, g []T) {
	if f == amp.FP32 {
		return
	}
	if x, ok := any(g).([]float32); ok {
		if n := f.RoundCount(x, x); n > 0 {
			e.Grads.underflowed.Add(int64(n))
		}
	}
}

// round rounds xs to format f. Low-precision formats are emulated in
// float32; the Builder refuses them for float64 graphs.
func round[T Float](f amp.Format, xs []T) {
	if f == amp.FP32 {
		return
	}
	if x, ok := any(xs).([]float32); ok {
		f.RoundSlice(x)
	}
}

// shape helpers for InferShape.
func shapeArg(d G.DimSizer) tensor.Shape { return d.(tensor.Shape) }

// applyOp applies a backward op, panicking on graph errors (they are bugs:
// the forward op already checked the shapes).
func applyOp(op G.Op, inputs ...*G.Node) *G.Node {
	if g, ok := op.(gradOp); ok {
		g.base().self = g
	}
	n, err := G.ApplyOp(op, inputs...)
	if err != nil {
		panic(fmt.Sprintf("nn: %v: %v", op, err))
	}
	return n
}

// gradBase is the opBase of a backward op producing the gradient of input i
// of fwd: it rounds to that input's format.
func gradBase(fwd *opBase, kind string, i int, nInputs int) opBase {
	return opBase{
		eng:  fwd.eng,
		id:   fwd.id*16 + i + 1, // distinct from every forward id and sibling gradient
		kind: kind,
		out:  fwd.inFm[i],
		wrt:  make([]bool, nInputs), // gradients are not differentiated again
		inFm: make([]amp.Format, nInputs),
	}
}

// Scalar value of a 0-d gorgonia value as float64.
func scalarOf(v G.Value) float64 {
	switch x := v.Data().(type) {
	case float32:
		return float64(x)
	case float64:
		return x
	case []float32:
		return float64(x[0])
	case []float64:
		return x[0]
	}
	panic(fmt.Sprintf("nn: not a float scalar: %T", v.Data()))
}
