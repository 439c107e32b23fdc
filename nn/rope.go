package nn

import (
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// RopeTable holds cos and sin of the rotary angles, [positions, headDim/2].
// The angles are always computed in fp32, the way HF's LlamaRotaryEmbedding
// computes them, and then converted to the graph's element type: the table
// never takes the precision of the activations (rounding positions ×
// frequencies to 16 bits would scramble the angles of distant positions),
// and a float64 graph sees exactly the table an fp32 run sees.
type RopeTable[T Float] struct {
	Cos, Sin []T
	Half     int
}

// NewRopeTable computes angles pos·θ^(−2i/headDim) for pos < positions.
func NewRopeTable[T Float](positions, headDim int, theta float64) RopeTable[T] {
	return NewRopeTableFreqs[T](positions, RopeInvFreq(headDim, theta))
}

// RopeInvFreq is HF's default inverse frequencies, in fp32 as
// 1 / base**(arange(0, dim, 2).float() / dim) computes them.
func RopeInvFreq(headDim int, theta float64) []float32 {
	inv := make([]float32, headDim/2)
	for i := range inv {
		e := float32(2*i) / float32(headDim)
		inv[i] = 1 / float32(math.Pow(theta, float64(e)))
	}
	return inv
}

// NewRopeTableFreqs computes the angles pos·invFreq[i] for pos < positions,
// each product in fp32 as torch.outer forms it, and their cos and sin
// rounded once to fp32.
func NewRopeTableFreqs[T Float](positions int, invFreq []float32) RopeTable[T] {
	half := len(invFreq)
	t := RopeTable[T]{Cos: make([]T, positions*half), Sin: make([]T, positions*half), Half: half}
	for i, inv := range invFreq {
		for p := 0; p < positions; p++ {
			a := float32(p) * inv
			t.Cos[p*half+i] = T(float32(math.Cos(float64(a))))
			t.Sin[p*half+i] = T(float32(math.Sin(float64(a))))
		}
	}
	return t
}

// RotateRows applies the rotation to x [rows, heads·headDim] in place,
// with row r at position pos(r): HF's rotate_half convention, where element
// i pairs with element i+headDim/2 of the same head. sign −1 applies the
// inverse rotation (the backward pass).
func (t RopeTable[T]) RotateRows(x []T, heads int, pos func(r int) int, sign T) {
	half := t.Half
	width := heads * 2 * half
	for r := 0; r*width < len(x); r++ {
		p := pos(r)
		c, s := t.Cos[p*half:(p+1)*half], t.Sin[p*half:(p+1)*half]
		row := x[r*width : (r+1)*width]
		i0 := 0 // every head in one call: a call a head cost more than the rotation at 16 pairs a head
		if isF32[T]() {
			i0 = ropeHeadsFast(any(row).([]float32), any(c).([]float32), any(s).([]float32), float32(sign), half, heads)
		}
		if i0 == half {
			continue
		}
		for h := 0; h < heads; h++ {
			x1 := row[h*2*half : h*2*half+half]
			x2 := row[h*2*half+half : (h+1)*2*half]
			for i := i0; i < len(x1); i++ {
				a, b := x1[i], x2[i]
				si := sign * s[i]
				x1[i] = a*c[i] - b*si
				x2[i] = b*c[i] + a*si
			}
		}
	}
}

// Rope rotates x [B·T, heads·headDim]; row r is position r mod T.
func (b *Builder) Rope(x *G.Node, heads, headDim, seqLen int, theta float64) *G.Node {
	return b.RopeAt(x, heads, headDim, seqLen, theta, nil)
}

// RopeAt is Rope with row r at position positions[r] (< seqLen), which the
// caller may change between runs of the graph: packed rows restart the
// positions of each document at 0. nil means r mod T.
func (b *Builder) RopeAt(x *G.Node, heads, headDim, seqLen int, theta float64, positions []int) *G.Node {
	return b.RopeFreqs(x, heads, seqLen, RopeInvFreq(headDim, theta), positions)
}

// RopeFreqs is RopeAt with the inverse frequencies given: a scaled rotary
// embedding (linear, llama3) computes its own.
func (b *Builder) RopeFreqs(x *G.Node, heads, seqLen int, invFreq []float32, positions []int) *G.Node {
	headDim := 2 * len(invFreq)
	xs := shapeOf(x)
	check(len(xs) == 2 && xs[1] == heads*headDim && xs[0]%seqLen == 0 && headDim%2 == 0,
		"rope: x %v does not fit %d heads of dim %d and sequence length %d", xs, heads, headDim, seqLen)
	base := b.newBase("rope", x)
	check(positions == nil || len(positions) == xs[0], "rope: %d positions for %d rows", len(positions), xs[0])
	if b.Dtype == tensor.Float64 {
		return b.apply(newRopeOp[float64](base, xs, heads, seqLen, invFreq, positions), x)
	}
	return b.apply(newRopeOp[float32](base, xs, heads, seqLen, invFreq, positions), x)
}

func newRopeOp[T Float](base opBase, shape []int, heads, seqLen int, invFreq []float32, positions []int) *ropeOp[T] {
	return &ropeOp[T]{opBase: base, shape: shape, heads: heads, seqLen: seqLen, positions: positions, invFreq: invFreq,
		table: NewRopeTableFreqs[T](seqLen, invFreq), buf: newBuffer[T](shape...)}
}

type ropeOp[T Float] struct {
	opBase
	shape         []int
	heads, seqLen int
	positions     []int     // nil: row mod seqLen
	invFreq       []float32 // the table's inverse frequencies (OpSpec: other engines rebuild the table)
	table         RopeTable[T]
	cache         *KVCache // a decoding graph's: positions and table come from it
	buf           buffer[T]
	bitsOut       // where it writes its output's bf16 bits too (bitsProducer)
}

func (o *ropeOp[T]) writeBits(b *bitsBuffer) bool {
	return o.take(b, acceptsBits[T](o.out) && o.cache == nil)
}

func (o *ropeOp[T]) Arity() int    { return 1 }
func (o *ropeOp[T]) Type() hm.Type { return fnType(2, 2) }
func (o *ropeOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}

func (o *ropeOp[T]) Do(vs ...G.Value) (G.Value, error) {
	if o.cache != nil {
		if err := o.cache.rows(o.shape[0]); err != nil {
			return nil, err
		}
	}
	t, y := o.buf.get()
	if o.bits != nil { // each block rounded and written as bits while in cache
		_, bits := o.bits.get()
		o.rotate(y, vals[T](vs)[0], 1, bits)
		return t, nil
	}
	o.rotate(y, vals[T](vs)[0], 1, nil)
	roundAll(o.eng, o.out, y)
	return t, nil
}

// rotate writes x rotated by sign·θ into y. With bits (float32 only),
// each block of rows is then rounded to the op's format and written into
// bits as bf16.
func (o *ropeOp[T]) rotate(y, x []T, sign T, bits []uint16) {
	width := o.shape[1]
	table, positions := o.table, o.positions
	if o.cache != nil {
		table, positions = any(o.cache.rope).(RopeTable[T]), o.cache.pos
	}
	o.eng.parallel(o.shape[0], 16, func(lo, hi int) {
		// a few rows at a time, copied and rotated while they are in L1:
		// copying the worker's whole share first sent it out of cache
		// and back
		const rows = 4
		for b0 := lo; b0 < hi; b0 += rows {
			b1 := min(b0+rows, hi)
			copy(y[b0*width:b1*width], x[b0*width:b1*width])
			pos := func(r int) int { return (b0 + r) % o.seqLen }
			if positions != nil {
				pos = func(r int) int { return positions[b0+r] }
			}
			table.RotateRows(y[b0*width:b1*width], o.heads, pos, sign)
			if bits != nil {
				y32 := any(y).([]float32)
				round(o.out, y32[b0*width:b1*width])
				writeBitsOut(bits, y32, b0*width, b1*width)
			}
		}
	})
}

// The rotation is orthogonal, so its gradient is the inverse rotation.
func (o *ropeOp[T]) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	return fusedBackward(&o.opBase, []*G.Node{grad}, [][]int{o.shape}, func(in, grads [][]T) error {
		o.rotate(grads[0], in[0], -1, nil)
		return nil
	}), nil
}
