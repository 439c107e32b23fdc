package nn

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// headChunkBytes bounds the fp32 logits block LMHeadLoss holds at a time:
// 256 MiB, where the whole [tokens × vocab] logits of 8k tokens of a 152k
// vocabulary take 4.9 GB, and the unfused pair held three such tensors
// (logits, probabilities, their gradient). Each block multiplies by all
// of W twice (logits, dx), packing it each time, so smaller blocks cost
// time: at 2048 tokens of width 256 and 152k entries on two cores, blocks
// of 110 tokens (64 MiB) made a LoRA step about 35% slower than one block
// of all 2048 tokens, blocks of 441 (256 MiB) a few percent.
const headChunkBytes = 256 << 20

// HeadChunk is the number of tokens LMHeadLoss computes at a time by
// default for a vocabulary of v entries: as many as fit their fp32 logits
// in 256 MiB, and at least 32, below which the matmuls lose their speed.
// It depends only on v, never on the thread count, so results do not either.
func HeadChunk(v int) int { return max(32, headChunkBytes/(4*max(v, 1))) }

// LMHeadLoss returns CrossEntropy(Linear(x, w), targets) for x [N, D], an
// LM head w [V, D] and targets [N]: the mean over non-ignored targets of
// −log softmax(x·Wᵀ)[target], 0 when every target is ignored. It computes
// chunk tokens at a time (chunk ≤ 0: HeadChunk(V)), forward and backward,
// so that at most [chunk, V] logits exist at once instead of [N, V].
//
// The rounding points are the unfused pair's: x and w lowered as Linear
// lowers them, each block of logits rounded to the linear op's format,
// the softmax and loss in fp32, the logits' gradient rounded to the
// logits' format before the two matmuls of Linear's backward, and dx and
// dW rounded to their inputs' formats. The loss and dx are therefore the
// pair's bit for bit: every logit and every row of dx is the same product
// over D or over V whichever rows are in a block, which mixtune's
// backends (gonum, native, OpenBLAS; see TestLMHeadLossMatchesUnfused)
// compute alike. So is dW when the tokens fit one block; over several, dW
// adds its blocks' products over tokens in block order, a different
// summation order than one product over all N tokens, and agrees with the
// pair to fp32 rounding (then one ulp of W's format) only. The blocks are
// fixed by V alone and added in order, so no result depends on the
// thread count.
//
// Under the bf16 policy, on an engine with a bf16 GEMM (Engine.BF16),
// the three products (logits, dx, dW) have two bf16 operands and run
// there, as the pair's do (Engine.bf16Path), with W kept packed from call
// to call as Builder.linear keeps it (a frozen fp32 W, with
// Builder.PackFrozenWeights, rounded as it is packed, with no bf16 copy
// in the graph, as there); they are that GEMM's sums of the
// same exact products, so they agree with the emulation to fp32
// summation order, then one bf16 ulp where rounded.
//
// lossGrad, when not nil, must be the node the loss will be differentiated
// with (G.Backpropagate's gradOutputs): its value is then known during the
// forward pass, which computes the gradients there, from the same block of
// logits, instead of computing every block of logits again in the
// backward pass. Differentiated with any other gradient (G.Grad does),
// the backward pass recomputes the blocks.
func (b *Builder) LMHeadLoss(x, w, targets, lossGrad *G.Node, chunk int) *G.Node {
	return b.lmHead(x, w, targets, lossGrad, chunk, 0)
}

// lmHead is LMHeadLoss, or with seqRows SequenceLogProbsHead.
func (b *Builder) lmHead(x, w, targets, lossGrad *G.Node, chunk, seqRows int) *G.Node {
	xs, ws, ts := shapeOf(x), shapeOf(w), shapeOf(targets)
	check(len(xs) == 2 && len(ws) == 2 && xs[1] == ws[1], "lm head loss: x %v and W %v do not fit (want [N,D] and [V,D])", xs, ws)
	check(targets.Dtype() == tensor.Int && len(ts) == 1 && ts[0] == xs[0], "lm head loss: targets %v (%v) do not fit x %v", ts, targets.Dtype(), xs)
	check(lossGrad == nil || lossGrad.IsScalar() && lossGrad.Dtype() == b.Dtype, "lm head loss: the loss gradient must be a %v scalar", b.Dtype)
	if chunk <= 0 {
		chunk = HeadChunk(ws[0])
	}
	// Builder.Linear's lowering, then the formats of its output (the
	// logits) and of the cross-entropy op reading them.
	f := b.formatOf("linear", x, w)
	x = b.lower(x, f)
	// W's packings for a bf16 GEMM, kept as Builder.linear keeps them
	wfwd, wdx := b.weightPackings(w)
	// A frozen fp32 W that the bf16 GEMM rounds as it packs it has no
	// bf16 copy, as in Builder.linear: both products that read it (logits,
	// dx) take the packings above, and the op records bf16 as its operand
	// format (below), which sends them to that GEMM.
	roundsInPack := b.roundsInPack(w, f)
	if !b.is16[w] && !roundsInPack {
		w = b.lower(w, f)
	}
	// The linear op's output format. Where W rounds in the packing, f is
	// bf16 with an fp32 W, which only a low-precision linear gives: the
	// policy's low format whatever W's, the same as on a lowered copy.
	logitsFm := b.formatOf("linear", x, w)
	inputs := []*G.Node{x, w, targets}
	if lossGrad != nil {
		inputs = append(inputs, lossGrad)
	}
	base := b.newBase("lm_head_loss", inputs...)
	if roundsInPack {
		base.inFm[1] = amp.BF16 // the values the products read
	}
	base.out = amp.FP32
	if b.Policy != nil {
		base.out = b.Policy.Format("cross_entropy", logitsFm)
	}
	base.wrt[2] = false
	if lossGrad != nil {
		base.wrt[3] = false
	}
	shape := headShape{n: xs[0], d: xs[1], v: ws[0], chunk: min(chunk, xs[0]), logitsFm: logitsFm, seeded: lossGrad != nil, seqRows: seqRows}
	if b.Dtype == tensor.Float64 {
		check(!b.is16[w], "lm head loss: 16-bit weights need a float32 graph")
		return b.apply(&headLossOp[float64]{opBase: base, headShape: shape, seqOut: newBuffer[float64](max(seqRows, 1))}, inputs...)
	}
	shape.w16 = weights16{on: b.is16[w], stored: b.format[w], compute: f}
	return b.apply(&headLossOp[float32]{opBase: base, headShape: shape, packed: wfwd, packedDx: wdx, seqOut: newBuffer[float32](max(seqRows, 1))}, inputs...)
}

// SequenceLogProbsHead is SequenceLogProbs(Linear(x, w), targets, rows)
// computed as LMHeadLoss computes its loss: chunk tokens at a time
// (chunk ≤ 0: HeadChunk(V)), never holding the [N, V] logits, and every
// block computed again in the backward pass, with the rounding points of
// the unfused pair. Each sequence's log-probability is the unfused op's
// bit for bit (each token's is the same, summed in token order), and so
// is dx; dW adds its blocks in block order (see LMHeadLoss). A preference
// objective's head: the sequences' gradients are known only after the
// loss over all of them, so no block's gradient can be taken early.
func (b *Builder) SequenceLogProbsHead(x, w, targets *G.Node, rows, chunk int) *G.Node {
	xs := shapeOf(x)
	check(rows > 0 && len(xs) == 2 && xs[0]%rows == 0, "sequence log-probs head: %d tokens do not split into %d rows", xs[0], rows)
	return b.lmHead(x, w, targets, nil, chunk, rows)
}

type headShape struct {
	n, d, v, chunk int
	logitsFm       amp.Format // the linear op's output format
	w16            weights16
	seeded         bool // input 3 is the loss's gradient
	// seqRows, when not 0, makes the op SequenceLogProbsHead's: its
	// output is each of seqRows sequences' summed target log-probability
	seqRows int
}

type headLossOp[T Float] struct {
	opBase
	headShape
	seqOut  buffer[T] // SequenceLogProbsHead's output
	block   []T       // [chunk, V]: logits, then probabilities, then their gradient
	rowLoss []float64
	targets []int    // saved for a recomputing backward pass
	bits16  []uint16 // a 16-bit W (frozen, so never changed by a step), for the same
	// early is the backward op whose gradients the forward pass computes
	// (lossGrad's case); nil when the backward pass computes them.
	early *backwardOp[T]
	// packed and packedDx keep W packed for a bf16 GEMM as op(B) of the
	// logits' product and of dx's; nil where W is not a parameter (or,
	// packedDx, is 16-bit)
	packed, packedDx *packedWeight
}

func (o *headLossOp[T]) Arity() int {
	if o.seeded {
		return 4
	}
	return 3
}

// Type is concrete: W may be a 16-bit tensor beside float activations.
func (o *headLossOp[T]) Type() hm.Type {
	var act tensor.Dtype = tensor.Float32
	if !isF32[T]() {
		act = tensor.Float64
	}
	w := act
	if o.w16.on {
		w = tensor.Uint16
	}
	ts := []hm.Type{G.TensorType{Dims: 2, Of: act}, G.TensorType{Dims: 2, Of: w}, G.TensorType{Dims: 1, Of: tensor.Int}}
	if o.seeded {
		ts = append(ts, act)
	}
	if o.seqRows > 0 {
		return hm.NewFnType(append(ts, G.TensorType{Dims: 1, Of: act})...)
	}
	return hm.NewFnType(append(ts, act)...)
}

func (o *headLossOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	if o.seqRows > 0 {
		return tensor.Shape{o.seqRows}, nil
	}
	return tensor.ScalarShape(), nil
}

func (o *headLossOp[T]) Do(vs ...G.Value) (G.Value, error) {
	x, w := vs[0].Data().([]T), o.weight(vs[1])
	o.targets = append(o.targets[:0], ints(vs[2])...)
	var g *headGrads[T]
	if o.early != nil {
		g = &headGrads[T]{seed: vals[T](vs[3:4])[0][0]}
		if o.wrt[0] {
			_, g.dx = o.early.bufs[0].get()
		}
		if o.wrt[1] {
			_, g.dw = o.early.bufs[1].get()
		}
	}
	loss, err := o.pass(x, w, g)
	if err != nil {
		return nil, err
	}
	if o.seqRows > 0 {
		t, out := o.seqOut.get()
		per := o.n / o.seqRows
		for s := range out { // in token order: the same bits for any worker count or chunk
			var sum float64
			for _, l := range o.rowLoss[s*per : (s+1)*per] {
				sum -= l
			}
			out[s] = T(sum)
		}
		return t, nil
	}
	return scalarValue(loss), nil
}

// weight returns W's float values, or nil for a 16-bit W, which is kept
// in bits16 and converted block by block.
func (o *headLossOp[T]) weight(v G.Value) []T {
	if bits, ok := v.Data().([]uint16); ok {
		o.bits16 = bits
		return nil
	}
	return v.Data().([]T)
}

// headGrads are the gradients a pass computes: seed is the loss's
// gradient (seeds, SequenceLogProbsHead's, the sequences'), dx and dw the
// buffers to fill (nil when not needed).
type headGrads[T Float] struct {
	seed   T
	seeds  []T
	dx, dw []T
}

// pass computes the loss over the tokens chunk by chunk and, with g, the
// gradients of x and W (unrounded: the backward op rounds them, as the
// linear op's gradient ops do). Each token's logits, probabilities and
// loss are those of the unfused pair; dW adds the blocks' products in
// block order, so for any worker count the result is the same.
func (o *headLossOp[T]) pass(x, w []T, g *headGrads[T]) (T, error) {
	count := 0
	for r, t := range o.targets {
		switch {
		case t == IgnoreIndex:
		case t < 0 || t >= o.v:
			return 0, fmt.Errorf("target %d at position %d is outside the vocabulary (size %d)", t, r, o.v)
		default:
			count++
		}
	}
	if len(o.block) != o.chunk*o.v {
		o.block, o.rowLoss = make([]T, o.chunk*o.v), make([]float64, o.n)
	}
	wBits, release := o.encodedWeight(w)
	defer release()
	for r0 := 0; r0 < o.n; r0 += o.chunk {
		rows := min(o.chunk, o.n-r0)
		blk, xc := o.block[:rows*o.v], x[r0*o.d:(r0+rows)*o.d]
		if o.logits(xc, w, wBits, blk, rows); !o.logitsRounded() {
			roundAll(o.eng, o.logitsFm, blk)
		}
		// each row's softmax and loss, then, in the training pass, its
		// gradient, rounded and counted, while the row is in cache
		o.eng.parallel(rows, 8, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				l, t := blk[r*o.v:(r+1)*o.v], o.targets[r0+r]
				var lt T
				if t != IgnoreIndex {
					lt = l[t] // read before softmaxRow overwrites the row in place
				}
				lse := softmaxRow(l, l)
				o.rowLoss[r0+r] = 0
				if t != IgnoreIndex {
					o.rowLoss[r0+r] = lse - float64(lt)
				}
				if g == nil {
					continue
				}
				// d loss / d logits = seed·(softmax − onehot(target)) /
				// count on kept rows, as crossEntropyOp's backward
				// computes it; a sequence's log-probability's gradient is
				// −seed·(softmax − onehot(target)), as seqLogProbsOp's
				if t == IgnoreIndex || count == 0 {
					clear(l)
					continue
				}
				scale := g.seed / T(count)
				if o.seqRows > 0 {
					scale = -g.seeds[(r0+r)/(o.n/o.seqRows)]
				}
				scaleSlice(l, l, scale)
				l[t] -= scale
				roundGradBlock(o.eng, o.logitsFm, l)
			}
		})
		if g == nil {
			continue
		}
		if o.logitsFm != amp.FP32 && isF32[T]() {
			o.eng.Grads.rounded.Add(int64(len(blk)))
		}
		if g.dx != nil {
			o.inputGrad(blk, w, wBits, g.dx[r0*o.d:(r0+rows)*o.d], rows)
		}
		if g.dw != nil {
			beta := T(1)
			if r0 == 0 {
				beta = 0
			}
			if isF32[T]() && o.eng.bf16Path(o.logitsFm, o.inFm[0]) { // dl and x both bf16
				o.eng.bf16Product(blas.BandFull, true, false, o.v, o.d, rows, 1, blas.BF16Matrix{F32: any(blk).([]float32), Ld: o.v}, blas.BF16Matrix{F32: any(xc).([]float32), Ld: o.d}, float32(beta), any(g.dw).([]float32), o.d)
			} else {
				blas.Gemm(o.eng.BLAS, true, false, o.v, o.d, rows, 1, blk, o.v, xc, o.d, beta, g.dw, o.d)
			}
		}
	}
	if count == 0 {
		return 0, nil
	}
	var sum float64 // in token order: the same bits for any worker count or chunk
	for _, l := range o.rowLoss {
		sum += l
	}
	return T(sum / float64(count)), nil
}

// headSlab is the fewest vocabulary entries a worker computes the logits
// of: a product of a few hundred rows and columns still runs at speed.
// Slabs start at multiples of headSlabAlign, so that a column's position
// modulo any kernel's column unrolling (a power of two up to 128) is the
// same as in one product over the whole vocabulary, and every product
// ends where that one ends: OpenBLAS computes a partial group of columns
// at a product's end with another kernel, which rounds differently.
const (
	headSlab      = 512
	headSlabAlign = 128
)

// logits computes blk = xc·Wᵀ [rows, V] as linearOp.Do does, every logit
// the same product over D. A backend given a product of few rows and many
// columns splits it by rows, packing each block of W's rows on one
// goroutine while the others wait: for blocks of tokens, where the same
// W is packed once per block, that serial packing left one of two cores
// idle for much of the head's time. Slabs of the vocabulary, one per
// worker, pack their parts of W at once.
//
// Where x and W both hold bf16 values and the engine has a bf16 GEMM, the
// product runs there in one call (the GEMM splits it among its threads),
// unrounded: pass rounds the logits after. wBits is W encoded for the
// pass (encodedWeight), or nil.
// logitsRounded says whether logits leaves the block rounded to the
// logits' format: on a bf16 GEMM whose kernel rounds C as it stores it
// (bf16Rounder), in bf16.
func (o *headLossOp[T]) logitsRounded() bool {
	_, rounds := o.eng.BF16.(bf16Rounder)
	return isF32[T]() && rounds && o.logitsFm == amp.BF16 && o.eng.bf16Path(o.inFm[0], o.weightFormat())
}

func (o *headLossOp[T]) logits(xc, w []T, wBits []uint16, blk []T, rows int) {
	if isF32[T]() && o.eng.bf16Path(o.inFm[0], o.weightFormat()) {
		wf, bits := o.weightOperand(w, wBits)
		f := amp.FP32 // rounded after, unless the kernel rounds as it stores
		if o.logitsRounded() {
			f = o.logitsFm
		}
		o.eng.gemmBF16(f, false, false, true, rows, o.v, o.d, blas.BF16Matrix{F32: any(xc).([]float32), Ld: o.d}, blas.BF16Matrix{F32: wf, Bits: bits, Ld: o.d}, any(blk).([]float32), o.v, o.packed)
		return
	}
	if w != nil {
		groups := (o.v + headSlabAlign - 1) / headSlabAlign
		o.eng.parallel(groups, headSlab/headSlabAlign, func(g0, g1 int) {
			lo, hi := g0*headSlabAlign, min(g1*headSlabAlign, o.v)
			blas.Gemm(o.eng.BLAS, false, true, rows, hi-lo, o.d, 1, xc, o.d, w[lo*o.d:], o.d, 0, blk[lo:], o.v)
		})
		return
	}
	yf, xf := any(blk).([]float32), any(xc).([]float32)
	if o.w16.sgemm(o.eng, amp.FP32, false, false, true, rows, o.v, o.d, xf, o.d, o.bits16, o.d, yf, o.v) {
		return
	}
	o.w16.rowBlocks(o.eng, o.bits16, o.v, o.d, func(r0, r1 int, wb []float32) {
		o.eng.BLAS.Sgemm(false, true, rows, r1-r0, o.d, 1, xf, o.d, wb, o.d, 0, yf[r0:], o.v)
	})
}

// inputGrad computes dx = dl·W [rows, D] as linearGradOp.Do does, on the
// bf16 GEMM where dl (rounded to the logits' format) and W hold bf16
// values, unrounded: the backward op rounds it. wBits is as for logits.
func (o *headLossOp[T]) inputGrad(dl, w []T, wBits []uint16, dx []T, rows int) {
	if isF32[T]() && o.eng.bf16Path(o.logitsFm, o.weightFormat()) {
		wf, bits := o.weightOperand(w, wBits)
		o.eng.gemmBF16(amp.FP32, true, false, false, rows, o.d, o.v, blas.BF16Matrix{F32: any(dl).([]float32), Ld: o.v}, blas.BF16Matrix{F32: wf, Bits: bits, Ld: o.d}, any(dx).([]float32), o.d, o.packedDx)
		return
	}
	if w != nil {
		blas.Gemm(o.eng.BLAS, false, false, rows, o.d, o.v, 1, dl, o.v, w, o.d, 0, dx, o.d)
		return
	}
	gf, dxf := any(dl).([]float32), any(dx).([]float32)
	if o.w16.sgemm(o.eng, amp.FP32, false, false, false, rows, o.d, o.v, gf, o.v, o.bits16, o.d, dxf, o.d) {
		return
	}
	o.w16.colBlocks(o.eng, o.bits16, o.v, o.d, func(c0, c1 int, wb []float32) {
		o.eng.BLAS.Sgemm(false, false, rows, c1-c0, o.v, 1, gf, o.v, wb, c1-c0, 0, dxf[c0:], o.d)
	})
}

// weightFormat is the format of the values W enters the products with:
// its node's format, or for a 16-bit W that of its bits as the products
// read them (weights16.bitsFormat), as linearOp decides.
func (o *headLossOp[T]) weightFormat() amp.Format {
	if o.w16.on {
		return o.w16.bitsFormat()
	}
	return o.inFm[1]
}

// weightOperand is W as a bf16 GEMM's operand: its bits encoded for the
// pass (wBits), else its float32 values w, else (w nil) a 16-bit W's
// bits.
func (o *headLossOp[T]) weightOperand(w []T, wBits []uint16) ([]float32, []uint16) {
	switch {
	case wBits != nil:
		return nil, wBits
	case w != nil:
		return any(w).([]float32), nil
	}
	return nil, o.bits16
}

// encodedWeight is a float32 W encoded as bf16 bits once for a pass
// (lent from the engine's pool; release gives them back), for a bf16
// GEMM that reads bits: given float32 values, gemmBF16 would encode all
// of W again for every block of tokens, in the logits and in dx. nil,
// with a release that does nothing, where W is 16-bit already, where the
// GEMM packs W itself (a bf16Packer keeps its packings), or where no
// product of W runs on the bf16 GEMM.
func (o *headLossOp[T]) encodedWeight(w []T) ([]uint16, func()) {
	none := func() {}
	if !isF32[T]() || w == nil || !o.eng.bf16Path(amp.BF16, o.weightFormat()) ||
		!o.eng.bf16Path(o.inFm[0], amp.BF16) && !o.eng.bf16Path(o.logitsFm, amp.BF16) {
		return nil, none
	}
	if _, packs := o.eng.BF16.(bf16Packer); packs {
		return nil, none
	}
	return o.eng.bf16Bits(any(w).([]float32))
}

// SymDiff returns the gradients of x and W. Given the loss's own gradient
// node (lossGrad), the forward pass has computed them and the backward
// node only rounds them; otherwise the backward node computes every block
// of logits again.
func (o *headLossOp[T]) SymDiff(inputs G.Nodes, output, grad *G.Node) (G.Nodes, error) {
	shapes := [][]int{{o.n, o.d}, {o.v, o.d}, {o.n}}
	if o.seeded {
		shapes = append(shapes, []int{})
	}
	if o.seeded && grad == inputs[3] && o.early == nil {
		// output is an input only to order the backward node after the
		// forward one, whose gradients it hands on
		bw, grads := newBackward(&o.opBase, []*G.Node{output, grad}, shapes, func([][]T, [][]T) error { return nil })
		o.early, bw.early = bw, true
		return grads, nil
	}
	in := []*G.Node{inputs[0]}
	if !o.w16.on {
		in = append(in, inputs[1])
	}
	in = append(in, grad)
	return fusedBackward(&o.opBase, in, shapes, func(vs, grads [][]T) error {
		var w []T
		if !o.w16.on {
			w = vs[1]
		}
		g := &headGrads[T]{dx: grads[0], dw: grads[1]}
		if o.seqRows > 0 {
			g.seeds = vs[len(vs)-1]
		} else {
			g.seed = vs[len(vs)-1][0]
		}
		_, err := o.pass(vs[0], w, g)
		return err
	}), nil
}
