package nn

import (
	"errors"
	"unsafe"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// Activations held in bf16.
//
// A linear layer whose products run on the engine's bf16 GEMM reads its
// input as bf16 bits (Builder.HoldBF16Operands), and so does attention
// its q, k and v where all its products do: the activation is converted
// once, and every product that reads it takes the bits, the forward
// products of q, k and v (and their adapters' A) alike, and the backward
// pass's (a linear layer's dW, an adapter's dA; attention's dS·K, dSᵀ·Q
// and dO·Vᵀ). Without it each of those products converted the float32
// activation again as it packed it, and the backward pass kept the
// float32 activation, 4 bytes an element; the bits are 2. The float32
// activation is then read by no backward op, so the memory plan frees it
// once the forward pass is done with it. Where the op producing the
// activation can (bitsProducer: RMSNorm, RoPE, the pointwise ops), it
// writes the bits itself as it writes each block of its output;
// elsewhere (a linear layer's output, attention's) an op converts it
// after.
//
// The conversion is amp's rounding (nearest even), the rounding a bf16
// GEMM applies to a float32 operand as it packs it, so the products see
// the same values and every result keeps its bits: designed in, and
// checked by TestCPUGraphFusionsSameBits (peft) and the memory plan's
// poisoned runs.
//
// The bits node is not differentiated: the reading op takes the float32
// activation as an input, for its gradient, and the bits as another
// input whose gradient is never asked for.

// bf16Operand returns the node holding x (a float32 activation, [N, in])
// as bf16 bits, made once per x and read by every op that asks.
func (b *Builder) bf16Operand(x *G.Node) *G.Node {
	if n, ok := b.bits[x]; ok {
		return n
	}
	shape := shapeOf(x)
	b.bitsID--
	op := &bf16OperandOp{
		// an id of its own (negative: no forward op's, no gradient's), so
		// that every other op keeps the id it has without the conversion
		// (dropout draws its masks by op id)
		opBase: opBase{eng: b.Eng, id: b.bitsID, kind: "bf16operand", out: amp.BF16, wrt: []bool{false}, inFm: []amp.Format{b.format[x]}},
		shape:  shape,
		buf:    bitsBuffer{shape: shape},
	}
	op.self = op
	if p, ok := x.Op().(bitsProducer); ok && p.writeBits(&op.buf) {
		op.byProducer = true
	}
	n, err := G.ApplyOp(op, x)
	if err != nil {
		panic("nn: " + op.String() + ": " + err.Error())
	}
	b.format[n] = amp.BF16
	b.bits[x] = n
	return n
}

// holdsBF16 says whether a linear op computing in format f reads x as
// bf16 bits (bf16Operand): x is a float32 activation whose products all
// run on the engine's bf16 GEMM (productsOnBF16, the caller's check), in
// a float32 graph, with the builder's HoldBF16Operands set.
func (b *Builder) holdsBF16(x *G.Node, f amp.Format, productsOnBF16 bool) bool {
	return b.HoldBF16Operands && productsOnBF16 && f == amp.BF16 && b.Dtype == tensor.Float32 &&
		b.Eng.BF16 != nil && !b.isParam[x] && len(shapeOf(x)) == 2
}

// bf16OperandOp converts a float32 activation to bf16 bits, nearest even.
type bf16OperandOp struct {
	opBase
	shape []int
	buf   bitsBuffer
	// byProducer: the op that produces the activation writes the bits too,
	// each block as it finishes it, while it is in cache (bitsProducer);
	// this op only hands them on
	byProducer bool
}

// bitsProducer is an op that can write its float32 output's bf16 bits as
// it writes the output, block by block while each is in cache: one pass
// over the activation fewer than converting it after. writeBits says
// whether it will, into b, on every run from then on.
type bitsProducer interface {
	writeBits(b *bitsBuffer) bool
}

func (o *bf16OperandOp) Arity() int { return 1 }
func (o *bf16OperandOp) Type() hm.Type {
	return hm.NewFnType(G.TensorType{Dims: len(o.shape), Of: tensor.Float32}, G.TensorType{Dims: len(o.shape), Of: tensor.Uint16})
}
func (o *bf16OperandOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}

func (o *bf16OperandOp) Do(vs ...G.Value) (G.Value, error) {
	if o.byProducer {
		t, _ := o.buf.tensor()
		return t, nil
	}
	x := vs[0].Data().([]float32)
	t, bits := o.buf.get()
	o.eng.parallel(len(x), 1<<14, func(lo, hi int) { amp.BF16.Bits16Slice(bits[lo:hi], x[lo:hi]) })
	return t, nil
}

// SymDiff is never called: the op's input is not differentiated through
// it (wrt is false), and the linear ops reading it give it no gradient.
func (o *bf16OperandOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errors.New("nn: a bf16 operand is not differentiated")
}

func (o *bf16OperandOp) outputBuffer() any { return &o.buf }

// bitsBuffer is buffer for bf16 bits: an op's reusable uint16 output,
// allocated on first use or placed in a block of the memory plan.
type bitsBuffer struct {
	shape  []int
	t      *tensor.Dense
	poison bool // PoisonBlocks: a NaN in every element before each write
}

func (b *bitsBuffer) get() (*tensor.Dense, []uint16) {
	t, d := b.tensor()
	if b.poison {
		for i := range d {
			d[i] = 0x7fc0 // bf16's quiet NaN
		}
	}
	return t, d
}

// tensor returns the bits as they stand, for the op that hands on what a
// producer wrote.
func (b *bitsBuffer) tensor() (*tensor.Dense, []uint16) {
	if b.t == nil {
		b.t = tensor.New(tensor.WithShape(b.shape...), tensor.WithBacking(make([]uint16, b.len())))
	}
	return b.t, b.t.Data().([]uint16)
}

// bitsOut is what a bitsProducer holds: the buffer it writes its
// output's bits into (nil: none).
type bitsOut struct{ bits *bitsBuffer }

// take makes b the bits buffer where ok and none is taken yet, and says
// whether it did.
func (o *bitsOut) take(b *bitsBuffer, ok bool) bool {
	if !ok || o.bits != nil {
		return false
	}
	o.bits = b
	return true
}

// writeBitsOut converts y's elements [lo, hi), final, into the bits out
// holds (nil: none asked for): a producer's last step on each block.
func writeBitsOut(out []uint16, y []float32, lo, hi int) {
	if out != nil {
		amp.BF16.Bits16Slice(out[lo:hi], y[lo:hi])
	}
}

// acceptsBits says whether an op of float32 output rounded to format out
// can write its output's bf16 bits: the bits of its final values are those
// of the unrounded ones (out bf16 or fp32; an fp16 output's would not be).
func acceptsBits[T Float](out amp.Format) bool {
	return isF32[T]() && (out == amp.FP32 || out == amp.BF16)
}

func (b *bitsBuffer) len() int {
	n := 1
	for _, d := range b.shape {
		n *= d
	}
	return n
}

// planned is the memory plan's view of an op's output buffer: its size in
// float32 words, whether it is allocated already, and placing it in a
// block of the plan.
type planned interface {
	words() int
	allocated() bool
	place(mem []float32, poison bool)
}

func (b *buffer[T]) words() int      { return b.len() }
func (b *buffer[T]) allocated() bool { return b.t != nil }

// place is for a float32 buffer: the plan leaves float64 graphs alone.
func (b *buffer[T]) place(mem []float32, poison bool) {
	b.t = tensor.New(tensor.WithShape(b.shape...), tensor.WithBacking(any(mem[:b.len()]).([]T)))
	b.poison = poison
}

func (b *bitsBuffer) words() int      { return (b.len() + 1) / 2 }
func (b *bitsBuffer) allocated() bool { return b.t != nil }

// place backs the bits with the block's memory, its words viewed as
// uint16s (the garbage collector keeps the block alive through either
// view).
func (b *bitsBuffer) place(mem []float32, poison bool) {
	n := b.len()
	var bits []uint16
	if n > 0 {
		bits = unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(mem))), 2*len(mem))[:n]
	}
	b.t = tensor.New(tensor.WithShape(b.shape...), tensor.WithBacking(bits))
	b.poison = poison
}
