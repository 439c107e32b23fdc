package nn

import (
	"slices"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// pointwiseOp is an elementwise op of same-shaped inputs: SwiGLU's
// silu(gate)·up and the weighted sum a + s·b that joins residuals and
// adapter branches.
type pointwiseOp[T Float] struct {
	opBase
	shape []int
	arity int
	scale float64 // add's: x + scale·y (OpSpec)
	fwd   func(y []T, in [][]T)
	bwd   func(in, grads [][]T) // in: the forward inputs, then the output gradient
	buf   buffer[T]
	// product, when set, is the deferred linear op whose output is input
	// 1 (Builder.AddLinear): Do runs its product into this op's output
	// and applies fwd to each block of it as the GEMM finishes the block
	product *linearOp[float32]
	bitsOut // where it writes its output's bf16 bits too (bitsProducer)
}

func (o *pointwiseOp[T]) writeBits(b *bitsBuffer) bool {
	return o.take(b, acceptsBits[T](o.out))
}

func (o *pointwiseOp[T]) Arity() int { return o.arity }
func (o *pointwiseOp[T]) Type() hm.Type {
	r := make([]int, o.arity+1)
	for i := range r {
		r[i] = len(o.shape)
	}
	return fnType(r...)
}
func (o *pointwiseOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.shape).Clone(), nil
}

func (o *pointwiseOp[T]) Do(vs ...G.Value) (G.Value, error) {
	in := vals[T](vs)
	t, y := o.buf.get()
	var bits []uint16 // y's bf16 bits, each block's written once it is final
	var y32 []float32
	if o.bits != nil {
		_, bits = o.bits.get()
		y32 = any(y).([]float32)
	}
	if o.product != nil {
		// y = fwd(in[0], x·Wᵀ): the product (rounded as the linear op
		// rounds it) into y, then each block of y through fwd with y as
		// input 1, and rounded, as below
		y32, base := any(y).([]float32), any(in[0]).([]float32)
		cols := o.product.outF
		o.product.productInto(y32, func(i0, i1, j0, j1 int) {
			args := make([][]T, 2) // one for the block: a literal per row was most of a step's allocations
			pass := func(y, base []T) {
				args[0], args[1] = base, y
				o.fwd(y, args)
				round(o.out, y)
			}
			if j0 == 0 && j1 == cols { // whole rows, one run of memory: each pass once (fwd is elementwise)
				pass(y[i0*cols:i1*cols], any(base[i0*cols:i1*cols]).([]T))
				writeBitsOut(bits, y32, i0*cols, i1*cols)
				return
			}
			for i := i0; i < i1; i++ {
				pass(y[i*cols+j0:i*cols+j1], any(base[i*cols+j0:i*cols+j1]).([]T))
				writeBitsOut(bits, y32, i*cols+j0, i*cols+j1)
			}
		})
		return t, nil
	}
	o.eng.parallel(len(y), 4096, func(lo, hi int) {
		// in blocks that stay in L1, each rounded right after it is computed
		sub := make([][]T, len(in))
		for b0 := lo; b0 < hi; b0 += pointwiseBlock {
			b1 := min(b0+pointwiseBlock, hi)
			for i := range in {
				sub[i] = in[i][b0:b1]
			}
			o.fwd(y[b0:b1], sub)
			round(o.out, y[b0:b1])
			writeBitsOut(bits, y32, b0, b1)
		}
	})
	return t, nil
}

func (o *pointwiseOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	shapes := make([][]int, o.arity)
	for i := range shapes {
		shapes[i] = o.shape
	}
	graphIn := append(append([]*G.Node(nil), inputs...), grad)
	pass, need := o.passedGrads()
	var bw *backwardOp[T]
	bwd := func(in, grads [][]T) error {
		o.eng.parallel(len(in[0]), 4096, func(lo, hi int) {
			// in blocks that stay in L1, each gradient rounded to its
			// input's format right after the block is computed
			si, sg := make([][]T, len(in)), make([][]T, len(grads))
			for b0 := lo; b0 < hi; b0 += pointwiseBlock {
				b1 := min(b0+pointwiseBlock, hi)
				for i := range in {
					si[i] = in[i][b0:b1]
				}
				for i := range grads {
					if grads[i] != nil {
						sg[i] = grads[i][b0:b1]
					}
				}
				o.bwd(si, sg)
				for i, g := range sg {
					if g != nil {
						roundGradBlock(o.eng, bw.inFm[i], g)
					}
				}
			}
		})
		for i, g := range grads {
			if (g != nil || pass[i]) && bw.inFm[i] != amp.FP32 && isF32[T]() {
				o.eng.Grads.rounded.Add(int64(len(in[0])))
			}
		}
		return nil
	}
	if !slices.Contains(need, true) { // every gradient is the output's
		grads := make(G.Nodes, o.arity)
		for i := range grads {
			if pass[i] {
				grads[i] = grad
			}
		}
		return grads, nil
	}
	bw, grads := newBackwardFor(&o.opBase, need, graphIn, shapes, bwd)
	bw.rounded = true
	for i := range grads {
		if pass[i] {
			grads[i] = grad
		}
	}
	return grads, nil
}

// passedGrads says which inputs of an add get the output's gradient g
// itself, with no op and no copy (pass), and which the backward op
// computes (need). An input passes where its coefficient is 1 and
// rounding g to its format changes nothing: g is already in the add's
// output format (gradIn), so the input's format must be that or fp32.
// A pass-through of a low-precision input still counts as a rounding
// (Grads.rounded), done by the backward op: so one such input passes
// only while another input keeps the op.
func (o *pointwiseOp[T]) passedGrads() (pass, need []bool) {
	pass, need = make([]bool, o.arity), slices.Clone(o.wrt)
	if o.kind != "add" {
		return pass, need
	}
	coef := [2]float64{1, o.scale}
	for i := range pass {
		pass[i] = o.wrt[i] && coef[i] == 1 && (o.inFm[i] == amp.FP32 || o.inFm[i] == o.out)
		need[i] = o.wrt[i] && !pass[i]
	}
	if !slices.Contains(need, true) {
		for i := range pass {
			if pass[i] && o.inFm[i] != amp.FP32 { // keep the op, to count it
				pass[i], need[i] = false, true
			}
		}
	}
	return pass, need
}

// pointwiseBlock is how many values a pointwise kernel computes before it
// rounds them, while they are in L1.
const pointwiseBlock = 2048

func samePointwise(kind string, nodes ...*G.Node) []int {
	s := shapeOf(nodes[0])
	for _, n := range nodes[1:] {
		check(tensor.Shape(s).Eq(n.Shape()), "%s: shapes %v and %v differ", kind, s, n.Shape())
	}
	return s
}

// SwiGLU returns silu(gate) ⊙ up, the Llama MLP's activation.
func (b *Builder) SwiGLU(gate, up *G.Node) *G.Node {
	shape := samePointwise("silu", gate, up)
	base := b.newBase("silu", gate, up)
	if b.Dtype == tensor.Float64 {
		return b.apply(swiglu[float64](base, shape), gate, up)
	}
	return b.apply(swiglu[float32](base, shape), gate, up)
}

func swiglu[T Float](base opBase, shape []int) *pointwiseOp[T] {
	return &pointwiseOp[T]{opBase: base, shape: shape, arity: 2, buf: newBuffer[T](shape...),
		fwd: func(y []T, in [][]T) { SwiGLUInto(y, in[0], in[1]) },
		// with s = σ(a): d silu(a)/da = s·(1 + a·(1−s))
		bwd: func(in, grads [][]T) {
			a, u, g := in[0], in[1], in[2]
			da, du := grads[0], grads[1]
			if a32, ok := any(a).([]float32); ok {
				swigluBackward(a32, any(u).([]float32), any(g).([]float32), any(da).([]float32), any(du).([]float32))
				return
			}
			for i := range g {
				s := sigmoid(a[i])
				if da != nil {
					da[i] = g[i] * u[i] * s * (1 + a[i]*(1-s))
				}
				if du != nil {
					du[i] = g[i] * a[i] * s
				}
			}
		}}
}

// swigluBlock is how many sigmoids the float32 SwiGLU kernels compute
// (sixteen at a time) before using them.
const swigluBlock = 256

// swigluBackward is SwiGLU's backward kernel for float32: the generic
// loop's arithmetic, with the sigmoids computed a block at a time.
func swigluBackward(a, u, g, da, du []float32) {
	var sb [swigluBlock]float32
	for b0 := 0; b0 < len(g); b0 += swigluBlock {
		b1 := min(b0+swigluBlock, len(g))
		s := sb[:b1-b0]
		sigmoidSlice(s, a[b0:b1])
		ab, ub, gb := a[b0:b1], u[b0:b1], g[b0:b1]
		if da != nil {
			d := da[b0:b1]
			for i := swigluGradAFast(d, gb, ub, s, ab); i < len(s); i++ {
				d[i] = gb[i] * ub[i] * s[i] * (1 + ab[i]*(1-s[i]))
			}
		}
		if du != nil {
			d := du[b0:b1]
			for i := mulMulFast(d, gb, ab, s); i < len(s); i++ {
				d[i] = gb[i] * ab[i] * s[i]
			}
		}
	}
}

// SwiGLUInto writes silu(a) ⊙ u into y (which may be a).
func SwiGLUInto[T Float](y, a, u []T) {
	if y32, ok := any(y).([]float32); ok {
		a32, u32 := any(a).([]float32), any(u).([]float32)
		var sb [swigluBlock]float32
		for b0 := 0; b0 < len(y32); b0 += swigluBlock {
			b1 := min(b0+swigluBlock, len(y32))
			s := sb[:b1-b0]
			sigmoidSlice(s, a32[b0:b1])
			yb, ab, ub := y32[b0:b1], a32[b0:b1], u32[b0:b1]
			for i := mulMulFast(yb, ab, s, ub); i < len(s); i++ {
				yb[i] = ab[i] * s[i] * ub[i]
			}
		}
		return
	}
	for i := range y {
		y[i] = a[i] * sigmoid(a[i]) * u[i]
	}
}

// AddLinear returns base + s·y, AddScaled(base, y, s), for y the output
// of Linear that nothing else reads: an adapter's branch joining its base
// layer's output (PEFT's result + lora_B(...)·scaling). The graph and the
// bits are AddScaled's. With FuseAdapterAdd, where y's product runs on a
// bf16 GEMM that hands it finished blocks, the add forms the sum as the
// GEMM's epilogue: y's op leaves its output unwritten, and the add runs
// the product into its own output, each block scaled, rounded and added
// to base while it is in cache, the same operations on the same values as
// the two ops apart. Neither op's backward reads y, so the branch's
// product is never written to memory and read back. A second reader of y
// would read nothing: y must have none.
func (b *Builder) AddLinear(base, y *G.Node, s float64) *G.Node {
	check(b.G.To(y.ID()).Len() == 0, "add: the linear output %v has readers already", y)
	out := b.AddScaled(base, y, s)
	if b.FuseAdapterAdd {
		lin, _ := y.Op().(*linearOp[float32])
		add, _ := out.Op().(*pointwiseOp[float32])
		if lin != nil && add != nil && lin.fusable() {
			lin.deferred, add.product = true, lin
		}
	}
	return out
}

// Add returns a + b (residual connections).
func (b *Builder) Add(x, y *G.Node) *G.Node { return b.AddScaled(x, y, 1) }

// AddScaled returns x + s·y: a residual (s = 1) or a base output plus a
// scaled adapter branch (s = lora_alpha/r).
func (b *Builder) AddScaled(x, y *G.Node, s float64) *G.Node {
	shape := samePointwise("add", x, y)
	base := b.newBase("add", x, y)
	if b.Dtype == tensor.Float64 {
		return b.apply(addScaled[float64](base, shape, s), x, y)
	}
	return b.apply(addScaled[float32](base, shape, s), x, y)
}

// In a low precision the scaled branch is rounded before the sum, as
// PEFT's result + lora_B(...)·scaling rounds the bf16 product; the sum is
// rounded as every output is.
func addScaled[T Float](base opBase, shape []int, scale float64) *pointwiseOp[T] {
	s, f := T(scale), base.out
	fwd := func(y []T, in [][]T) { addScaledSlice(y, in[0], in[1], s) }
	if f != amp.FP32 && scale != 1 {
		fwd = func(y []T, in [][]T) {
			scaleSlice(y, in[1], s)
			round(f, y)
			addScaledSlice(y, in[0], y, 1) // a + 1·y is a + y exactly
		}
	}
	return &pointwiseOp[T]{opBase: base, shape: shape, arity: 2, scale: scale, buf: newBuffer[T](shape...),
		fwd: fwd,
		bwd: func(in, grads [][]T) {
			g := in[2]
			if grads[0] != nil {
				copy(grads[0], g)
			}
			if grads[1] != nil {
				scaleSlice(grads[1], g, s)
			}
		}}
}

// addScaledSlice sets y[i] = a[i] + s·b[i] (y may be a or b), in
// assembly where it can (addScaledFast: the same bits).
func addScaledSlice[T Float](y, a, b []T, s T) {
	i0 := 0
	if y32, ok := any(y).([]float32); ok {
		i0 = addScaledFast(y32, any(a).([]float32), any(b).([]float32), float32(s))
	}
	for i := i0; i < len(y); i++ {
		y[i] = a[i] + s*b[i]
	}
}

// maxSlice is the largest of xs (at least one), as Go's max folds it:
// NaN if any is, +0 over −0. A float32 slice of 16 or more takes AVX2
// where maxFast can say its answer is that one.
func maxSlice[T Float](xs []T) T {
	if x32, ok := any(xs).([]float32); ok {
		if m, ok := maxFast(x32); ok {
			return T(m)
		}
	}
	m := xs[0]
	for _, x := range xs[1:] {
		m = max(m, x)
	}
	return m
}

// scaleSlice sets y[i] = s·x[i] (y may be x), as addScaledSlice.
func scaleSlice[T Float](y, x []T, s T) {
	i0 := 0
	if y32, ok := any(y).([]float32); ok {
		i0 = scaleFast(y32, any(x).([]float32), float32(s))
	}
	for i := i0; i < len(y); i++ {
		y[i] = s * x[i]
	}
}

// mulSubSlice sets y[i] = a[i]·(b[i] - s) (y may be b), as addScaledSlice.
func mulSubSlice[T Float](y, a, b []T, s T) {
	i0 := 0
	if y32, ok := any(y).([]float32); ok {
		i0 = mulSubFast(y32, any(a).([]float32), any(b).([]float32), float32(s))
	}
	for i := i0; i < len(y); i++ {
		y[i] = a[i] * (b[i] - s)
	}
}
