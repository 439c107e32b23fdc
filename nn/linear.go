package nn

import (
	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// Linear returns x·Wᵀ for x [N, in] and W [out, in] (PyTorch's and HF's
// weight layout), shape [N, out].
func (b *Builder) Linear(x, w *G.Node) *G.Node {
	f := b.formatOf("linear", x, w)
	return b.linear(x, w, f, f)
}

// weightPackings are the packings of W that a bf16 GEMM may keep from
// call to call, as op(B) of the forward product and of dx (nil where none
// is kept). A parameter (or a 16-bit base weight) is what may be kept,
// whatever copy of it the op reads: both packings, for a float32 one in
// place of its bf16 copy where the GEMM rounds as it packs. A 16-bit one
// is held in bf16 already, and its dx operand (pairs of its rows side by
// side) was packed per call until that was 2–3% of a bf16 step at the
// mid shape of scripts/bench_vs_torch.sh, on a Zen 5: keeping it costs 2
// bytes a parameter (about 30 MB of peak RSS at the mid shape, 75–120 MB
// at SmolLM2's), with bf16's peak still well below PyTorch's autocast.
// Decided on W's node before it is lowered.
func (b *Builder) weightPackings(w *G.Node) (fwd, dx *packedWeight) {
	if b.isParam[w] || b.is16[w] {
		fwd = &packedWeight{trainable: b.needsGrad[w]}
		dx = &packedWeight{trainable: b.needsGrad[w]}
	}
	return fwd, dx
}

// linear computes x·Wᵀ with its inputs in format f and its output rounded
// to out: f, or fp32 when a bias is still to be added before the rounding.
func (b *Builder) linear(x, w *G.Node, f, out amp.Format) *G.Node {
	xs, ws := shapeOf(x), shapeOf(w)
	q4, is4 := b.q4[w]
	if is4 {
		ws = q4
	}
	check(len(xs) == 2 && len(ws) == 2 && xs[1] == ws[1], "linear: x %v and W %v do not fit (want [N,in] and [out,in])", xs, ws)
	// x is read by the forward product (with W) and, for a trainable W,
	// by dW's (with the output's gradient, in format out)
	w16 := weights16{on: b.is16[w], stored: b.format[w], compute: f}
	wFm := f // the values the products read from W
	switch {
	case is4:
		wFm = amp.FP32 // dequantized to fp32 blocks
	case w16.on:
		wFm = w16.bitsFormat()
	}
	productsOnBF16 := b.Eng.bf16Path(amp.BF16, wFm) && (!b.needsGrad[w] || b.Eng.bf16Path(out, amp.BF16))
	xRaw := b.roundsInProducts(x, f, productsOnBF16)
	if xRaw {
		b.readRaw(x, f)
	} else {
		x = b.lower(x, f)
	}
	var xBits *G.Node // x as bf16 bits, the operand every product reads (x is raw or lowered to f: bf16 values either way)
	if b.holdsBF16(x, f, productsOnBF16) {
		xBits = b.bf16Operand(x)
	}
	wfwd, wdx := b.weightPackings(w)
	roundsInPack := b.roundsInPack(w, f)
	if !b.is16[w] && !is4 && !roundsInPack { // a 16- or 4-bit weight is converted inside the op, block by block
		w = b.lower(w, f)
	}
	base := b.newBase("linear", x, w)
	base.out = out
	if xRaw {
		base.inFm[0] = amp.BF16 // the values the products read
	}
	if roundsInPack {
		base.inFm[1] = amp.BF16 // the values the products read
	}
	if b.Dtype == tensor.Float64 {
		check(!b.is16[w] && !is4, "linear: 16- and 4-bit weights need a float32 graph")
		return b.apply(&linearOp[float64]{opBase: base, n: xs[0], in: xs[1], outF: ws[0], buf: newBuffer[float64](xs[0], ws[0])}, x, w)
	}
	w4 := weights4{on: is4, compute: f}
	op := &linearOp[float32]{opBase: base, n: xs[0], in: xs[1], outF: ws[0], buf: newBuffer[float32](xs[0], ws[0]), w16: w16, w4: w4, packed: wfwd, packedDx: wdx}
	if xBits == nil {
		return b.apply(op, x, w)
	}
	op.xBits = true
	op.wrt, op.inFm = append(op.wrt, false), append(op.inFm, amp.BF16)
	return b.apply(op, x, w, xBits)
}

// roundsInPack says whether the products of an op computing in format f
// read weight w with no lowered bf16 copy: a frozen fp32 parameter read
// by a bf16 GEMM that rounds its operands as it packs them needs none
// (4 bytes a parameter, and a rounding pass over w every step), since the
// GEMM rounds it once, into the packings the op keeps (packedWeight). The
// op then records bf16 as w's operand format, the values its products
// read, and every product that reads w must take one of those packings.
func (b *Builder) roundsInPack(w *G.Node, f amp.Format) bool {
	_, packs := b.Eng.BF16.(bf16Packer)
	_, is4 := b.q4[w]
	return b.PackFrozenWeights && packs && f == amp.BF16 && b.Dtype == tensor.Float32 &&
		b.isParam[w] && !b.needsGrad[w] && !b.is16[w] && !is4 && b.format[w] == amp.FP32
}

// sgemmRound computes C = op(A)·op(B) and rounds it to f, each block of C
// as soon as the GEMM has finished it, while it is in cache (blas.Finisher),
// not in a pass of its own: the same values as a GEMM followed by
// roundAll (or, for a gradient, roundGrad, counting underflows).
func (e *Engine) sgemmRound(f amp.Format, grad, transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if f == amp.FP32 {
		e.BLAS.Sgemm(transA, transB, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
		return
	}
	rows := e.roundBlock(f, grad, c, ldc)
	if _, ok := e.BLAS.(blas.Finisher); ok {
		blas.SgemmFinish(e.BLAS, transA, transB, m, n, k, 1, a, lda, b, ldb, 0, c, ldc, rows)
	} else { // the GEMM, then a parallel pass over C
		e.BLAS.Sgemm(transA, transB, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
		e.parallel(m, max(1, (1<<14)/n), func(i0, i1 int) { rows(i0, i1, 0, n) })
	}
	if grad {
		e.Grads.rounded.Add(int64(m) * int64(n))
	}
}

// roundBlock returns the epilogue that rounds a block of C (row stride
// ldc) to f, counting the values a gradient's rounding sends to zero.
func (e *Engine) roundBlock(f amp.Format, grad bool, c []float32, ldc int) func(i0, i1, j0, j1 int) {
	return func(i0, i1, j0, j1 int) {
		under := 0
		for i := i0; i < i1; i++ {
			row := c[i*ldc+j0 : i*ldc+j1]
			if grad {
				under += f.RoundCount(row, row)
			} else {
				f.RoundSlice(row)
			}
		}
		if under > 0 {
			e.Grads.underflowed.Add(int64(under))
		}
	}
}

type linearOp[T Float] struct {
	opBase
	n, in, outF int // rows, input and output features
	buf         buffer[T]
	w16         weights16 // how a 16-bit weight converts, when W is one
	w4          weights4  // how a 4-bit weight dequantizes, when W is one
	// packed and packedDx keep W packed for a bf16 GEMM as op(B) of the
	// forward product and of dx; nil where W is not a parameter
	packed, packedDx *packedWeight
	// xBits: a third input holds x as bf16 bits (Builder.bf16Operand),
	// which the products read in place of x
	xBits bool
	// deferred: the op's one reader, an add (Builder.AddLinear), runs the
	// product into its own output; Do keeps the inputs for it (pending)
	// and leaves the output unwritten
	deferred bool
	pending  []G.Value
}

// readsInputsLater: a deferred op's inputs are read when its reader runs,
// so the memory plan keeps them that long (inputsReadLater).
func (o *linearOp[T]) readsInputsLater() bool { return o.deferred }

// fusable says whether the product may run as an add's epilogue
// (Builder.AddLinear): float32 operands on the engine's bf16 GEMM, which
// hands finished blocks of C to a callback.
func (o *linearOp[T]) fusable() bool {
	_, packs := o.eng.BF16.(bf16Packer)
	return isF32[T]() && packs && !o.w16.on && !o.w4.on && o.eng.bf16Path(o.inFm[0], o.inFm[1])
}

// productInto computes the deferred product, x·Wᵀ rounded to the op's
// output format, into y ([n, outF]) and calls then on each block of it
// once it is final (gemmBF16Then).
func (o *linearOp[T]) productInto(y []float32, then func(i0, i1, j0, j1 int)) {
	w := o.pending[1].Data().([]float32)
	o.eng.gemmBF16Then(o.out, false, false, true, o.n, o.outF, o.in, o.operandX(o.pending), blas.BF16Matrix{F32: w, Ld: o.in}, y, o.outF, o.packed, then)
}

// operandX is x as the bf16 products read it: its bits where the op has
// them, else x itself.
func (o *linearOp[T]) operandX(vs []G.Value) blas.BF16Matrix {
	if o.xBits {
		return blas.BF16Matrix{Bits: vs[2].Data().([]uint16), Ld: o.in}
	}
	return blas.BF16Matrix{F32: vs[0].Data().([]float32), Ld: o.in}
}

func (o *linearOp[T]) Arity() int { return 2 + btoi(o.xBits) }
func (o *linearOp[T]) Type() hm.Type {
	if o.xBits {
		return bitsOperandType(o.w16.on, 2)
	}
	return weightType[T](o.w16.on, o.w4.on)
}

// bitsOperandType is the type of an op on float32 values that reads one
// of them as bf16 bits as well, a [N, in] uint16 tensor: (x, W, xBits) →
// y for a linear op (bitsAt 2), (g, xBits) → dW for its dW (bitsAt 1).
// W may be a 16-bit tensor.
func bitsOperandType(w16 bool, bitsAt int) hm.Type {
	act := G.TensorType{Dims: 2, Of: tensor.Float32}
	w := act
	if w16 {
		w.Of = tensor.Uint16
	}
	bits := G.TensorType{Dims: 2, Of: tensor.Uint16}
	if bitsAt == 1 {
		return hm.NewFnType(act, bits, act)
	}
	return hm.NewFnType(act, w, bits, act)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// weightType is (x, W) → y with concrete types, where W may be a 16-bit
// tensor, or a 4-bit weight's blob (a uint8 vector), beside float
// activations.
func weightType[T Float](w16, w4 bool) hm.Type {
	var act tensor.Dtype = tensor.Float32
	if !isF32[T]() {
		act = tensor.Float64
	}
	w := G.TensorType{Dims: 2, Of: act}
	switch {
	case w16:
		w.Of = tensor.Uint16
	case w4:
		w = G.TensorType{Dims: 1, Of: tensor.Uint8}
	}
	return hm.NewFnType(G.TensorType{Dims: 2, Of: act}, w, G.TensorType{Dims: 2, Of: act})
}
func (o *linearOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.n, o.outF}, nil
}

func (o *linearOp[T]) Do(vs ...G.Value) (G.Value, error) {
	if o.deferred { // the add reading it computes the product (productInto)
		o.pending = append(o.pending[:0], vs...)
		t, _ := o.buf.tensor()
		return t, nil
	}
	x := vs[0].Data().([]T)
	t, y := o.buf.get()
	switch w := vs[1].Data().(type) {
	case []T:
		if isF32[T]() && o.eng.bf16Path(o.inFm[0], o.inFm[1]) {
			o.eng.gemmBF16(o.out, false, false, true, o.n, o.outF, o.in, o.operandX(vs), blas.BF16Matrix{F32: any(w).([]float32), Ld: o.in}, any(y).([]float32), o.outF, o.packed)
			break
		}
		if o.out == amp.FP32 || !isF32[T]() {
			blas.Gemm(o.eng.BLAS, false, true, o.n, o.outF, o.in, 1, x, o.in, w, o.in, 0, y, o.outF)
			break
		}
		o.eng.sgemmRound(o.out, false, false, true, o.n, o.outF, o.in, any(x).([]float32), o.in, any(w).([]float32), o.in, any(y).([]float32), o.outF)
	case []uint16:
		// y[:, r0:r1] = x · W[r0:r1]ᵀ, one block of weight rows at a time
		yf, xf := any(y).([]float32), any(x).([]float32)
		if o.eng.bf16Path(o.inFm[0], o.w16.bitsFormat()) { // W's bits are the bf16 operand
			o.eng.gemmBF16(o.out, false, false, true, o.n, o.outF, o.in, o.operandX(vs), blas.BF16Matrix{Bits: w, Ld: o.in}, yf, o.outF, o.packed)
			break
		}
		if o.w16.sgemm(o.eng, o.out, false, false, true, o.n, o.outF, o.in, xf, o.in, w, o.in, yf, o.outF) {
			break
		}
		o.w16.rowBlocks(o.eng, w, o.outF, o.in, func(r0, r1 int, wb []float32) {
			o.eng.sgemmRound(o.out, false, false, true, o.n, r1-r0, o.in, xf, o.in, wb, o.in, yf[r0:], o.outF)
		})
	case []uint8: // a 4-bit weight, dequantized as the GEMM packs it, or a block of rows at a time
		yf, xf := any(y).([]float32), any(x).([]float32)
		q := o.w4.decode(vs[1])
		if o.w4.sgemm(o.eng, o.out, false, false, true, o.n, o.outF, o.in, xf, o.in, q, o.in, yf, o.outF) {
			break
		}
		o.w4.rowBlocks(o.eng, q, o.outF, o.in, func(r0, r1 int, wb []float32) {
			o.eng.sgemmRound(o.out, false, false, true, o.n, r1-r0, o.in, xf, o.in, wb, o.in, yf[r0:], o.outF)
		})
	}
	return t, nil
}

func (o *linearOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	x, w := inputs[0], inputs[1]
	grads := make(G.Nodes, 2)
	if o.wrt[0] { // dx = g·W  [N, in]
		fw := o.inFm[1]
		if o.w16.on {
			fw = o.w16.bitsFormat()
		}
		op := &linearGradOp[T]{opBase: gradBase(&o.opBase, "linear.dx", 0, 2), m: o.n, n: o.in, k: o.outF, buf: newBuffer[T](o.n, o.in), w16: o.w16, w4: o.w4,
			fa: o.out, fb: fw, packed: o.packedDx}
		grads[0] = applyOp(op, grad, w)
	}
	if o.wrt[1] { // dW = gᵀ·x  [out, in]
		op := &linearGradOp[T]{opBase: gradBase(&o.opBase, "linear.dw", 1, 2), transA: true, m: o.outF, n: o.in, k: o.n, buf: newBuffer[T](o.outF, o.in),
			fa: o.out, fb: o.inFm[0]}
		if o.xBits { // x's bits, not x: x is not kept for the backward pass
			op.xBits = true
			x = inputs[2]
		}
		grads[1] = applyOp(op, grad, x)
	}
	if o.xBits {
		grads = append(grads, nil)
	}
	return grads, nil
}

// linearGradOp computes op(g)·B with g [N, out]: g·W for dx, gᵀ·x for dW.
type linearGradOp[T Float] struct {
	opBase
	transA  bool
	m, n, k int
	buf     buffer[T]
	w16     weights16
	w4      weights4
	// fa and fb are the formats of g (the forward's output format, to
	// which gradIn rounds it) and of B (W or x): both bf16 puts the
	// product on the engine's bf16 GEMM where it has one.
	fa, fb amp.Format
	// packed keeps W packed for a bf16 GEMM (dx only; nil otherwise)
	packed *packedWeight
	// xBits: dW's B is x as bf16 bits (Builder.bf16Operand)
	xBits bool
}

func (o *linearGradOp[T]) Arity() int { return 2 }
func (o *linearGradOp[T]) Type() hm.Type {
	if o.xBits {
		return bitsOperandType(false, 1)
	}
	return weightType[T](o.w16.on, o.w4.on)
}
func (o *linearGradOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.m, o.n}, nil
}
func (o *linearGradOp[T]) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errNotTwice
}

func (o *linearGradOp[T]) Do(vs ...G.Value) (G.Value, error) {
	if o.xBits { // dW = gᵀ·x, x as bf16 bits
		t, c := o.buf.get()
		g := vs[0].Data().([]float32)
		o.eng.gemmBF16(o.out, true, true, false, o.m, o.n, o.k, blas.BF16Matrix{F32: g, Ld: o.m}, blas.BF16Matrix{Bits: vs[1].Data().([]uint16), Ld: o.n}, any(c).([]float32), o.n, nil)
		return t, nil
	}
	if o.w4.on { // dx = g·W, dequantized as the GEMM packs it, or one slab of W's columns at a time
		g := vs[0].Data().([]float32)
		t, c := o.buf.get()
		dx := any(c).([]float32)
		q := o.w4.decode(vs[1])
		if o.w4.sgemm(o.eng, o.out, true, false, false, o.m, o.n, o.k, g, o.k, q, o.n, dx, o.n) {
			return t, nil
		}
		o.w4.colBlocks(o.eng, q, o.k, o.n, func(c0, c1 int, wb []float32) {
			o.eng.sgemmRound(o.out, true, false, false, o.m, c1-c0, o.k, g, o.k, wb, c1-c0, dx[c0:], o.n)
		})
		return t, nil
	}
	if w, ok := vs[1].Data().([]uint16); ok {
		// dx = g·W, one slab of W's columns (dx's columns) at a time;
		// g is [N, out] and W [out, in]
		g := vs[0].Data().([]float32)
		t, c := o.buf.get()
		dx := any(c).([]float32)
		if o.eng.bf16Path(o.fa, o.fb) {
			o.eng.gemmBF16(o.out, true, false, false, o.m, o.n, o.k, blas.BF16Matrix{F32: g, Ld: o.k}, blas.BF16Matrix{Bits: w, Ld: o.n}, dx, o.n, o.packed)
			return t, nil
		}
		if o.w16.sgemm(o.eng, o.out, true, false, false, o.m, o.n, o.k, g, o.k, w, o.n, dx, o.n) {
			return t, nil
		}
		o.w16.colBlocks(o.eng, w, o.k, o.n, func(c0, c1 int, wb []float32) {
			o.eng.sgemmRound(o.out, true, false, false, o.m, c1-c0, o.k, g, o.k, wb, c1-c0, dx[c0:], o.n)
		})
		return t, nil
	}
	in := vals[T](vs)
	t, c := o.buf.get()
	lda := o.k // g is [N, out]: as A it is m×k (dx) or, transposed, k×m (dW)
	if o.transA {
		lda = o.m
	}
	if isF32[T]() && o.eng.bf16Path(o.fa, o.fb) {
		o.eng.gemmBF16(o.out, true, o.transA, false, o.m, o.n, o.k, blas.BF16Matrix{F32: any(in[0]).([]float32), Ld: lda}, blas.BF16Matrix{F32: any(in[1]).([]float32), Ld: o.n}, any(c).([]float32), o.n, o.packed)
		return t, nil
	}
	if o.out == amp.FP32 || !isF32[T]() {
		blas.Gemm(o.eng.BLAS, o.transA, false, o.m, o.n, o.k, 1, in[0], lda, in[1], o.n, 0, c, o.n)
		return t, nil
	}
	o.eng.sgemmRound(o.out, true, o.transA, false, o.m, o.n, o.k, any(in[0]).([]float32), lda, any(in[1]).([]float32), o.n, any(c).([]float32), o.n)
	return t, nil
}
