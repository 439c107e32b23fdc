package nn

import (
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// AttentionShape describes a batch of causal self-attention.
type AttentionShape struct {
	Batch, SeqLen  int
	Heads, KVHeads int // grouped-query attention: Heads/KVHeads query heads share one key/value head
	HeadDim        int
	// Positions, when set, holds each token's position in its document
	// (Batch·SeqLen values, which may change between runs of the graph):
	// a token attends only to the tokens of its own document, which are
	// the Positions[i] tokens before it. Packed rows hold several
	// documents; nil is one document per row.
	Positions []int
	// Window > 0 limits a token to itself and the Window−1 tokens before
	// it (Mistral's sliding window); 0 is no limit.
	Window int
	// Kernel picks the implementation; the zero value, AttentionAuto,
	// decides by sequence length. Tests and benchmarks force one.
	Kernel AttentionKernel
	// Cache, when set, makes a decoding graph's attention: the
	// Batch·SeqLen rows are new tokens of Cache's sequences (see
	// KVCache.SetRows), attending through the cache to their sequences'
	// earlier tokens, and Layer names the layer's place in it. Positions
	// and Kernel are not used; the graph is float32 and not differentiated.
	Cache *KVCache
	Layer int
}

// AttentionKernel names an implementation of Attention. Both compute the
// same function with the same rounding points; they differ in memory and
// in the order of some fp32 sums (see attention_tiled.go).
type AttentionKernel int

const (
	// AttentionAuto uses AttentionFull below tiledAttentionMinSeqLen
	// tokens per row and AttentionTiled from there on.
	AttentionAuto AttentionKernel = iota
	// AttentionFull keeps each head's probabilities for the backward
	// pass, the lower triangle of [T, T]: B·Heads·T(T+1)/2 values.
	AttentionFull
	// AttentionTiled keeps two values per query row (the softmax's max
	// and reciprocal sum) and recomputes the probabilities block by block
	// in the backward pass: B·Heads·T·2 values, O(T·tile) per worker.
	AttentionTiled
)

// tiledAttentionMinSeqLen is the sequence length from which AttentionAuto
// picks the tiled kernel. It depends on the shape alone, never on the
// thread count or the machine, so the kernel, and with it every bit of the
// result, is the same wherever a config runs. Measured on 2 shared cores
// with the native backend (BenchmarkAttentionKernels, 8 heads of 64,
// forward and backward): at 128 tokens the full kernel is faster; from 256
// to 512 the two are within the noise of each other (a few percent); at
// 1024 and 2048 the tiled one is 4-15% faster. It skips the masked half of
// every product but computes each exponential twice. From 512 tokens on
// it is no slower and keeps about T/4 times less than the full kernel's
// lower triangle: 128 times at 512.
const tiledAttentionMinSeqLen = 512

// AttentionKeepsProbabilities reports whether attention over sequences of
// seqLen tokens keeps each head's [T, T] probabilities for the backward
// pass (below the tiled kernel's length), for memory estimates.
func AttentionKeepsProbabilities(seqLen int) bool { return seqLen < tiledAttentionMinSeqLen }

// tiled reports whether s runs on the tiled kernel.
func (s AttentionShape) tiled() bool {
	switch s.Kernel {
	case AttentionFull:
		return false
	case AttentionTiled:
		return true
	}
	return s.SeqLen >= tiledAttentionMinSeqLen
}

// starts fills start[i] with the first key row i of batch row bi may
// attend to: 0, or the first token of its document, or of its window.
func (s AttentionShape) starts(start []int, bi int) {
	for i := range start {
		if s.Positions != nil {
			start[i] = i - s.Positions[bi*s.SeqLen+i]
		} else {
			start[i] = 0
		}
		if s.Window > 0 {
			start[i] = max(start[i], i-s.Window+1)
		}
	}
}

// Attention computes causal softmax(Q·Kᵀ/√d)·V per head. q is [B·T,
// Heads·HeadDim], k and v are [B·T, KVHeads·HeadDim]; the output has q's
// shape, laid out as o_proj expects. Heads are read in place through BLAS
// strides, so no transposed copies are made.
func (b *Builder) Attention(q, k, v *G.Node, s AttentionShape) *G.Node {
	qs, ks, vs := shapeOf(q), shapeOf(k), shapeOf(v)
	n := s.Batch * s.SeqLen
	check(s.KVHeads > 0 && s.Heads%s.KVHeads == 0, "attention: %d heads are not a multiple of %d key/value heads", s.Heads, s.KVHeads)
	check(len(qs) == 2 && qs[0] == n && qs[1] == s.Heads*s.HeadDim, "attention: q %v does not fit %+v", qs, s)
	check(len(ks) == 2 && ks[0] == n && ks[1] == s.KVHeads*s.HeadDim, "attention: k %v does not fit %+v", ks, s)
	check(len(vs) == 2 && vs[0] == n && vs[1] == s.KVHeads*s.HeadDim, "attention: v %v does not fit %+v", vs, s)
	check(s.Positions == nil || len(s.Positions) == n, "attention: %d positions for %d tokens", len(s.Positions), n)
	check(s.Kernel >= AttentionAuto && s.Kernel <= AttentionTiled, "attention: unknown kernel %d", s.Kernel)
	// autocast's view of attention: two matmuls around a softmax, each
	// with its own place in the op lists.
	fs, fv := b.formatOf("attention_scores", q, k), b.formatOf("attention_values", v)
	fsm := b.formatOf("softmax")
	// every product reads q, k and v with bf16 operands, scores and values
	// both bf16 (attnPathsOf), outside a decoding graph
	allBF16 := s.Cache == nil && b.Eng.bf16Path(fs, fv)
	raw := [3]bool{b.roundsInProducts(q, fs, allBF16), b.roundsInProducts(k, fs, allBF16), b.roundsInProducts(v, fv, allBF16)}
	ins := [3]*G.Node{q, k, v}
	for i, f := range [3]amp.Format{fs, fs, fv} {
		if raw[i] {
			b.readRaw(ins[i], f)
		} else {
			ins[i] = b.lower(ins[i], f)
		}
	}
	q, k, v = ins[0], ins[1], ins[2]
	base := b.newBase("attention", q, k, v)
	for i, f := range [3]amp.Format{fs, fs, fv} {
		if raw[i] {
			base.inFm[i] = f // the values the products read
		}
	}
	base.out = fv
	f := attnFormats{scores: fs, softmax: fsm, values: fv}
	if s.Cache != nil {
		check(b.Dtype == tensor.Float32 && s.Positions == nil && s.Layer >= 0 && s.Layer < s.Cache.layers && ks[1] == s.Cache.width,
			"attention: a decoding graph's layer %d of %d, k %v for cached rows of %d", s.Layer, s.Cache.layers, ks, s.Cache.width)
		base.kind = "attention_cache"
		return b.apply(&attentionCacheOp{opBase: base, s: s, f: f, buf: newBuffer[float32](qs...)}, q, k, v)
	}
	if s.tiled() {
		if b.Dtype == tensor.Float64 {
			return b.apply(&attentionTiledOp[float64]{opBase: base, s: s, f: f, buf: newBuffer[float64](qs...)}, q, k, v)
		}
		return b.apply(&attentionTiledOp[float32]{opBase: base, s: s, f: f, buf: newBuffer[float32](qs...)}, q, k, v)
	}
	if b.Dtype == tensor.Float64 {
		return b.apply(&attentionOp[float64]{opBase: base, s: s, f: f, buf: newBuffer[float64](qs...)}, q, k, v)
	}
	op := &attentionOp[float32]{opBase: base, s: s, f: f, buf: newBuffer[float32](qs...)}
	if !b.holdsBF16(q, fs, allBF16) { // allBF16: scores and values both bf16
		return b.apply(op, q, k, v)
	}
	// every product reads q, k and v as bf16 bits, converted once; the
	// backward pass keeps those, not the float32 values
	op.bits = true
	op.wrt, op.inFm = append(op.wrt, false, false, false), append(op.inFm, amp.BF16, amp.BF16, amp.BF16)
	return b.apply(op, q, k, v, b.bf16Operand(q), b.bf16Operand(k), b.bf16Operand(v))
}

// attnFormats are the formats of attention's intermediate tensors: the
// scores, the softmax probabilities, and the probabilities as the values
// matmul reads them.
type attnFormats struct{ scores, softmax, values amp.Format }

// probs is the format of the values the probabilities hold as the values
// matmul (and dV's) reads them: rounded to the softmax's format, then to
// the values matmul's, which in fp32 leaves them in the softmax's.
func (f attnFormats) probs() amp.Format {
	if f.values == amp.FP32 {
		return f.softmax
	}
	return f.values
}

// attnPaths says which of attention's six products run on the engine's
// bf16 GEMM: by Engine.bf16Path's rule, those whose two operands both
// hold bf16 values, in a float32 graph. The rest run in the backend's
// kernels as they always did, so an engine without a bf16 GEMM keeps its
// bits.
type attnPaths struct {
	scores, values bool // Q·Kᵀ and P·V
	dP, dQ, dK, dV bool // dO·Vᵀ, dS·K, dSᵀ·Q and Pᵀ·dO
}

// attnPathsOf is attnPaths for an attention op: Q, K and V hold their
// input formats, the output gradient dO the op's output format (gradIn
// rounds it there), P f.probs(), and dS the scores' format, to which the
// backward pass rounds it.
func attnPathsOf[T Float](o *opBase, f attnFormats) attnPaths {
	if !isF32[T]() {
		return attnPaths{}
	}
	e, q, k, v, g, p, ds := o.eng, o.inFm[0], o.inFm[1], o.inFm[2], o.out, f.probs(), f.scores
	return attnPaths{
		scores: e.bf16Path(q, k), values: e.bf16Path(p, v),
		dP: e.bf16Path(g, v), dQ: e.bf16Path(ds, k), dK: e.bf16Path(ds, q), dV: e.bf16Path(p, g),
	}
}

// attnGemm is one of attention's products, C = alpha·op(A)·op(B) + beta·C,
// on the engine's bf16 GEMM where onBF16 (one of attnPaths), else in the
// backend's fp32 (or float64) kernels. C is not rounded here.
func attnGemm[T Float](e *Engine, onBF16, transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	attnGemmBand(e, onBF16, blas.BandFull, transA, transB, m, n, k, alpha, valuesOf(a), lda, valuesOf(b), ldb, beta, c, ldc)
}

// attnOperand is an operand of attention's products: values (f), or,
// where the op reads its inputs as bf16 bits (Builder.HoldBF16Operands;
// every product then runs on the bf16 GEMM), their bits.
type attnOperand[T Float] struct {
	f    []T
	bits []uint16
}

func valuesOf[T Float](x []T) attnOperand[T] { return attnOperand[T]{f: x} }

// at is the operand from element off on.
func (x attnOperand[T]) at(off int) attnOperand[T] {
	if x.bits != nil {
		return attnOperand[T]{bits: x.bits[off:]}
	}
	return attnOperand[T]{f: x.f[off:]}
}

// matrix is the operand as the bf16 GEMM reads it, row stride ld (a
// float32 graph's).
func (x attnOperand[T]) matrix(ld int) blas.BF16Matrix {
	if x.bits != nil {
		return blas.BF16Matrix{Bits: x.bits, Ld: ld}
	}
	return blas.BF16Matrix{F32: any(x.f).([]float32), Ld: ld}
}

// touch is touch on elements [lo, hi) of the operand.
func (x attnOperand[T]) touch(lo, hi int) uint32 {
	if x.bits != nil {
		return touch(x.bits[lo:hi])
	}
	return touch(x.f[lo:hi])
}

// attnGemmBand is attnGemm on a product of the full kernel, whose causal
// mask band describes (blas.Band): the bf16 GEMM skips the tiles and
// pairs it leaves out, about a third of the work at 128 tokens and more
// with longer sequences. The skipped products are zeros, so the wanted
// elements keep their bits (GemmBand says what else may differ).
func attnGemmBand[T Float](e *Engine, onBF16 bool, band blas.Band, transA, transB bool, m, n, k int, alpha T, a attnOperand[T], lda int, b attnOperand[T], ldb int, beta T, c []T, ldc int) {
	if onBF16 {
		e.bf16Product(band, transA, transB, m, n, k, float32(alpha), a.matrix(lda), b.matrix(ldb), float32(beta), any(c).([]float32), ldc)
		return
	}
	blas.Gemm(e.BLAS, transA, transB, m, n, k, alpha, a.f, lda, b.f, ldb, beta, c, ldc)
}

// bandRounder is a bandGemmer whose kernel rounds C to bf16 as it stores
// it (blas.NativeBF16.GemmBandRound): no pass over C afterwards, and no
// value rounds to zero.
type bandRounder interface {
	GemmBandRound(band blas.Band, transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, c []float32, ldc int)
}

// attnGemmBandRound is attnGemmBand on the bf16 path with beta 0 and C
// rounded to bf16 by the kernel (e.BF16 is a bandRounder).
func attnGemmBandRound[T Float](e *Engine, band blas.Band, transA, transB bool, m, n, k int, alpha T, a attnOperand[T], lda int, b attnOperand[T], ldb int, c []T, ldc int) {
	e.BF16.(bandRounder).GemmBandRound(band, transA, transB, m, n, k, float32(alpha), a.matrix(lda), b.matrix(ldb), any(c).([]float32), ldc)
}

// roundsInKernel says whether the bf16 GEMM's kernel rounds attention's
// output (P·V, on the bf16 path, into a bf16 output) and, in the backward
// pass, dQ, dK and dV (all on the bf16 path into bf16 inputs, one query
// head per key/value head, so each head's dK and dV are final as the
// GEMM stores them): no passes over them afterwards.
func (o *attentionOp[T]) roundsInKernel() (out, grads bool) {
	if _, ok := o.eng.BF16.(bandRounder); !ok || !isF32[T]() {
		return false, false
	}
	on := attnPathsOf[T](&o.opBase, o.f)
	out = on.values && o.out == amp.BF16
	grads = on.dQ && on.dK && on.dV && o.s.Heads == o.s.KVHeads &&
		o.inFm[0] == amp.BF16 && o.inFm[1] == amp.BF16 && o.inFm[2] == amp.BF16
	return out, grads
}

type attentionOp[T Float] struct {
	opBase
	// sink takes what touch read, so that its loads are not dropped as
	// dead code
	sink atomic.Uint32
	s    AttentionShape
	f    attnFormats
	buf  buffer[T]
	// probs is saved for backward: each head's softmax outputs, the lower
	// triangle alone, row i's columns 0..i at i(i+1)/2 (tri): half of T²,
	// and half the memory traffic of a step that writes them in the
	// forward pass and reads them back in the backward, by then long out
	// of cache. The products read them from a full T×T buffer of their
	// worker's, in cache, zero above the diagonal.
	probs []T
	// bits: inputs 3 to 5 hold q, k and v as bf16 bits (Builder.bf16Operand),
	// which every product reads, and which the backward pass keeps in
	// place of the float32 values
	bits bool
	// T×T buffers the workers take from call to call: rows, for the
	// scores and dS, whose every row a call writes whole; lower, for the
	// backward pass's probabilities, written below the diagonal only, so
	// zero above it from their allocation on
	rows, lower sync.Pool
}

// lend takes a buffer of n values from pool, or makes one.
func lend[T Float](pool *sync.Pool, n int) *[]T {
	if b, _ := pool.Get().(*[]T); b != nil && len(*b) == n {
		return b
	}
	b := make([]T, n)
	return &b
}

// tri is the size of a head's lower triangle of t×t values, and the
// offset of its row t.
func tri(t int) int { return t * (t + 1) / 2 }

func (o *attentionOp[T]) Arity() int { return 3 + 3*btoi(o.bits) }
func (o *attentionOp[T]) Type() hm.Type {
	if o.bits { // q, k, v, then their bits
		f, u := G.TensorType{Dims: 2, Of: tensor.Float32}, G.TensorType{Dims: 2, Of: tensor.Uint16}
		return hm.NewFnType(f, f, f, u, u, u, f)
	}
	return fnType(2, 2, 2, 2)
}

// operands are q, k and v as the products read them: the values, or,
// where the op reads its inputs as bf16 bits, those (inputs 3 to 5).
func (o *attentionOp[T]) operands(vs []G.Value) (q, k, v attnOperand[T]) {
	if o.bits {
		return attnOperand[T]{bits: vs[3].Data().([]uint16)}, attnOperand[T]{bits: vs[4].Data().([]uint16)}, attnOperand[T]{bits: vs[5].Data().([]uint16)}
	}
	in := vals[T](vs)
	return valuesOf(in[0]), valuesOf(in[1]), valuesOf(in[2])
}

// savedOperands are q, k and v as the backward pass reads them: the
// backward op's inputs 0 to 2, values (in) or bf16 bits (bits).
func (o *attentionOp[T]) savedOperands(in [][]T, bits [][]uint16) (q, k, v attnOperand[T]) {
	if o.bits {
		return attnOperand[T]{bits: bits[0]}, attnOperand[T]{bits: bits[1]}, attnOperand[T]{bits: bits[2]}
	}
	return valuesOf(in[0]), valuesOf(in[1]), valuesOf(in[2])
}
func (o *attentionOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.s.Batch * o.s.SeqLen, o.s.Heads * o.s.HeadDim}, nil
}

// Each unit of parallel work is one (batch row, key/value head) pair: all
// the query heads that share it run on one worker, so the gradient sums
// into dK and dV keep one order.
func (o *attentionOp[T]) units() int { return o.s.Batch * o.s.KVHeads }

func (o *attentionOp[T]) Do(vs ...G.Value) (G.Value, error) {
	q, k, v := o.operands(vs)
	t, out := o.buf.get()
	s := o.s
	T_ := s.SeqLen
	if len(o.probs) != s.Batch*s.Heads*tri(T_) {
		o.probs = make([]T, s.Batch*s.Heads*tri(T_))
	}
	qw, kw, group := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.Heads/s.KVHeads
	scale := T(1 / math.Sqrt(float64(s.HeadDim)))
	e, on := o.eng, attnPathsOf[T](&o.opBase, o.f)
	outInKernel, _ := o.roundsInKernel()
	// the kernel rounds the scores as it stores them, where it can: the
	// bits of round(scale·sum), one pass over the head's scores fewer
	_, bandRounds := e.BF16.(bandRounder)
	scoresInKernel := bandRounds && on.scores && o.f.scores == amp.BF16
	o.eng.parallel(o.units(), 1, func(lo, hi int) {
		pb := lend[T](&o.rows, T_*T_)
		defer o.rows.Put(pb)
		p := *pb // the head's scores, then probabilities
		scratch := valuesScratch[T](o.f, on.values, T_*T_)
		start := make([]int, T_)
		var sink uint32
		defer func() { o.sink.Add(sink) }()
		for u := lo; u < hi; u++ {
			bi, kh := u/s.KVHeads, u%s.KVHeads
			if u == lo || kh == 0 { // a new batch row: its inputs streamed in for its heads (touch)
				sink ^= q.touch(bi*T_*qw, (bi+1)*T_*qw) ^ k.touch(bi*T_*kw, (bi+1)*T_*kw) ^ v.touch(bi*T_*kw, (bi+1)*T_*kw)
			}
			s.starts(start, bi)
			kOff := bi*T_*kw + kh*s.HeadDim
			for h := kh * group; h < (kh+1)*group; h++ {
				qOff := bi*T_*qw + h*s.HeadDim
				saved := o.probs[(bi*s.Heads+h)*tri(T_) : (bi*s.Heads+h+1)*tri(T_)]
				pv := scratch // P as the values matmul reads it
				if scoresInKernel {
					attnGemmBandRound(e, blas.BandLowerC, false, true, T_, T_, s.HeadDim, scale, q.at(qOff), qw, k.at(kOff), kw, p, T_)
				} else {
					attnGemmBand(e, on.scores, blas.BandLowerC, false, true, T_, T_, s.HeadDim, scale, q.at(qOff), qw, k.at(kOff), kw, 0, p, T_)
					for i := range T_ {
						round(o.f.scores, p[i*T_:i*T_+i+1])
					}
				}
				causalSoftmaxRows(p, T_, start, 0, T_, func(i int, row []T) {
					round(o.f.softmax, row[:i+1])
					copy(saved[tri(i):tri(i+1)], row[:i+1])
					if pv != nil {
						asValuesRow(o.f, pv[i*T_:i*T_+i+1], row[:i+1])
					}
				})
				if pv == nil {
					pv = p
				}
				if outInKernel {
					attnGemmBandRound(e, blas.BandLowerA, false, false, T_, s.HeadDim, T_, 1, valuesOf(pv), T_, v.at(kOff), kw, out[qOff:], qw)
					continue
				}
				attnGemmBand(e, on.values, blas.BandLowerA, false, false, T_, s.HeadDim, T_, 1, valuesOf(pv), T_, v.at(kOff), kw, 0, out[qOff:], qw)
			}
		}
	})
	if !outInKernel {
		roundAll(o.eng, o.out, out)
	}
	return t, nil
}

// valuesScratch is a per-worker buffer of n values for the probabilities
// in the format of the values matmul (or of dV's, onBF16 saying which
// GEMM runs it), when that differs from the softmax's. A bf16 GEMM needs
// none for bf16: it rounds its operands to bf16 as it packs them, the
// bits amp's rounding gives.
func valuesScratch[T Float](f attnFormats, onBF16 bool, n int) []T {
	if f.values == f.softmax || onBF16 && f.values == amp.BF16 {
		return nil
	}
	return make([]T, n)
}

// asValuesRow copies one row of probabilities p into dst, the row as the
// values matmul reads them, rounded to its format.
func asValuesRow[T Float](f attnFormats, dst, p []T) {
	copy(dst, p)
	round(f.values, dst)
}

// asValuesLower is asValues on the full kernel's t×t probabilities, which
// are zero above the diagonal: it copies and rounds only rows i over
// columns 0..i, the half a causal mask leaves. scratch must hold zeros
// above its diagonal; it does, since valuesScratch makes it zeroed and
// only this writes it.
func asValuesLower[T Float](f attnFormats, p, scratch []T, t int) []T {
	if scratch == nil {
		return p
	}
	for i := range t {
		asValuesRow(f, scratch[i*t:i*t+i+1], p[i*t:i*t+i+1])
	}
	return scratch[:len(p)]
}

// asValues is p as the values matmul reads it: rounded to its format.
func asValues[T Float](f attnFormats, p, scratch []T) []T {
	if scratch == nil {
		return p
	}
	scratch = scratch[:len(p)]
	copy(scratch, p)
	round(f.values, scratch)
	return scratch
}

// causalSoftmaxRow turns row[s0..i] into its softmax, zeroes the rest of row,
// and returns the max it subtracted and the reciprocal of the sum of
// exponentials it multiplied by. Both kernels call it, so their
// probabilities are the same operations on the same scores.
func causalSoftmaxRow[T Float](row []T, s0, i int) (m, inv T) {
	m = maxSlice(row[s0 : i+1])
	inv = 1 / expSubSum(row[s0:i+1], row[s0:i+1], m)
	scaleSlice(row[s0:i+1], row[s0:i+1], inv)
	clear(row[:s0])
	clear(row[i+1:])
	return m, inv
}

// softmaxGroup is how many rows causalSoftmaxRows takes through each of
// softmax's steps before the next step: the steps of one row wait on each
// other (the max, then the exponentials and their sum, then its
// reciprocal, then the scaling), and a causal row is short (64 values on
// average at 128 tokens), so row after row the CPU waits on each step's
// latency; the same step on several rows has no such chain.
const softmaxGroup = 8

// causalSoftmaxRows is causalSoftmaxRow on rows [r0, r1) of the t×t
// scores p, row i starting at start[i], the same operations on each row
// in a different interleaving (the same bits), then calls done on each
// row (i, and the row's t values).
func causalSoftmaxRows[T Float](p []T, t int, start []int, r0, r1 int, done func(i int, row []T)) {
	var m, sum [softmaxGroup]T
	for g0 := r0; g0 < r1; g0 += softmaxGroup {
		g1 := min(g0+softmaxGroup, r1)
		for i := g0; i < g1; i++ {
			m[i-g0] = maxSlice(p[i*t+start[i] : i*t+i+1])
		}
		for i := g0; i < g1; i++ {
			row := p[i*t+start[i] : i*t+i+1]
			sum[i-g0] = expSubSum(row, row, m[i-g0])
		}
		for i := g0; i < g1; i++ {
			row := p[i*t : (i+1)*t]
			scaleSlice(row[start[i]:i+1], row[start[i]:i+1], 1/sum[i-g0])
			clear(row[:start[i]])
			clear(row[i+1:])
			done(i, row)
		}
	}
}

// causalSoftmaxGradRows is causalSoftmaxGradRow on rows [r0, r1) of the
// t×t probabilities p and their gradient dp, row i starting at start[i],
// in groups of rows as causalSoftmaxRows takes them (the same bits):
// before calls before on each row of dp (i, and its t values), after
// after.
func causalSoftmaxGradRows[T Float](p, dp []T, t int, start []int, r0, r1 int, before, after func(i int, row []T)) {
	var sum [softmaxGroup]T
	for g0 := r0; g0 < r1; g0 += softmaxGroup {
		g1 := min(g0+softmaxGroup, r1)
		for i := g0; i < g1; i++ {
			before(i, dp[i*t:(i+1)*t])
			sum[i-g0] = dot16(p[i*t+start[i]:i*t+i+1], dp[i*t+start[i]:i*t+i+1])
		}
		for i := g0; i < g1; i++ {
			row := dp[i*t : (i+1)*t]
			mulSubSlice(row[start[i]:i+1], p[i*t+start[i]:i*t+i+1], row[start[i]:i+1], sum[i-g0])
			clear(row[:start[i]])
			clear(row[i+1:])
			after(i, row)
		}
	}
}

// causalSoftmaxGradRow is softmax's backward on one row: dp[s0..i] (the
// probabilities' gradient) becomes p ⊙ (dp − Σ p ⊙ dp), the scores'
// gradient, and the rest of dp is zeroed. Both kernels call it.
func causalSoftmaxGradRow[T Float](p, dp []T, s0, i int) {
	sum := dot16(p[s0:i+1], dp[s0:i+1])
	mulSubSlice(dp[s0:i+1], p[s0:i+1], dp[s0:i+1], sum)
	clear(dp[:s0])
	clear(dp[i+1:])
}

func (o *attentionOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	n := o.s.Batch * o.s.SeqLen
	shapes := [][]int{{n, o.s.Heads * o.s.HeadDim}, {n, o.s.KVHeads * o.s.HeadDim}, {n, o.s.KVHeads * o.s.HeadDim}}
	saved := inputs[:3]
	if o.bits {
		saved = inputs[3:6] // the bits: q, k and v themselves are not kept for the backward pass
	}
	var bw *backwardOp[T]
	bw, grads := newBackward(&o.opBase, []*G.Node{saved[0], saved[1], saved[2], grad}, shapes, func(in, grads [][]T) error {
		return o.backward(in, bw.bits, grads)
	})
	_, bw.rounded = o.roundsInKernel() // the kernel rounds dq, dk and dv as it stores them
	if o.bits {
		grads = append(grads, nil, nil, nil) // the bits have none
	}
	return grads, nil
}

// backward, per head with P the saved probabilities and dO the output gradient:
// dP = dO·Vᵀ, dS = P ⊙ (dP − rowsum(P ⊙ dP)), dQ = dS·K/√d, dK += dSᵀ·Q/√d, dV += Pᵀ·dO.
// The row sum is softmax's own backward; the cheaper rowsum(dO ⊙ O) equals
// it only while O is not rounded to a narrower format.
//
// With grouped-query attention in a low precision, each head's dK and dV
// are rounded to K's and V's format before the group's sum, which is
// formed in fp32 in head order and rounded once (by backwardOp): PyTorch's
// repeat_kv expands K and V to every query head, so each head's matmul
// backward yields a rounded gradient, and expand's backward sums them in
// fp32. In fp32 the heads accumulate into dK and dV directly.
func (o *attentionOp[T]) backward(in [][]T, bits [][]uint16, grads [][]T) error {
	q, k, v := o.savedOperands(in, bits)
	g := in[3]
	dq, dk, dv := grads[0], grads[1], grads[2]
	s := o.s
	T_ := s.SeqLen
	qw, kw, group := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.Heads/s.KVHeads
	scale := T(1 / math.Sqrt(float64(s.HeadDim)))
	e, on := o.eng, attnPathsOf[T](&o.opBase, o.f)
	roundK, roundV := group > 1 && o.inFm[1] != amp.FP32, group > 1 && o.inFm[2] != amp.FP32
	_, inKernel := o.roundsInKernel()
	// dP rounded to the values' format by the kernel as it stores it, where
	// it can; dS is read only by dQ's and dK's products, and where both run
	// on the bf16 GEMM, its rounding to bf16 is theirs (the GEMM rounds its
	// float32 operands as amp does): no passes over the head's rows for them
	_, bandRounds := e.BF16.(bandRounder)
	dPInKernel := bandRounds && on.dP && o.f.values == amp.BF16
	dSInPacking := o.f.scores == amp.BF16 && (dq == nil || on.dQ) && (dk == nil || on.dK)
	o.eng.parallel(o.units(), 1, func(lo, hi int) {
		dsb, pb := lend[T](&o.rows, T_*T_), lend[T](&o.lower, T_*T_)
		defer o.rows.Put(dsb)
		defer o.lower.Put(pb)
		ds, p := *dsb, *pb // dP, then dS; the head's saved probabilities
		pv := valuesScratch[T](o.f, on.dV, T_*T_)
		start := make([]int, T_)
		var sink uint32
		defer func() { o.sink.Add(sink) }()
		var head []T // one head's dK or dV, [T_, HeadDim], to round before the group sum
		if roundK || roundV {
			head = make([]T, T_*s.HeadDim)
		}
		// accumulate adds one head's gradient Aᵀ·B into dst (rows kw wide):
		// directly, or, when rounded, after rounding it to f.
		accumulate := func(first bool, f amp.Format, rounded, onBF16 bool, at []T, lda int, b attnOperand[T], ldb int, alpha T, dst []T) {
			a := valuesOf(at)
			if inKernel { // one head per group: its gradient, rounded by the kernel
				attnGemmBandRound(e, blas.BandUpperA, true, false, T_, s.HeadDim, T_, alpha, a, lda, b, ldb, dst, kw)
				return
			}
			if !rounded {
				var beta T // the first head of a group overwrites, the others add
				if !first {
					beta = 1
				}
				attnGemmBand(e, onBF16, blas.BandUpperA, true, false, T_, s.HeadDim, T_, alpha, a, lda, b, ldb, beta, dst, kw)
				return
			}
			if first { // the group's first head: straight into dst, rounded there
				attnGemmBand(e, onBF16, blas.BandUpperA, true, false, T_, s.HeadDim, T_, alpha, a, lda, b, ldb, 0, dst, kw)
				for i := 0; i < T_; i++ {
					round(f, dst[i*kw:i*kw+s.HeadDim])
				}
				return
			}
			attnGemmBand(e, onBF16, blas.BandUpperA, true, false, T_, s.HeadDim, T_, alpha, a, lda, b, ldb, 0, head, s.HeadDim)
			round(f, head)
			for i := 0; i < T_; i++ {
				d := dst[i*kw : i*kw+s.HeadDim]
				for j, x := range head[i*s.HeadDim : (i+1)*s.HeadDim] {
					d[j] += x
				}
			}
		}
		for u := lo; u < hi; u++ {
			bi, kh := u/s.KVHeads, u%s.KVHeads
			if u == lo || kh == 0 {
				sink ^= q.touch(bi*T_*qw, (bi+1)*T_*qw) ^ k.touch(bi*T_*kw, (bi+1)*T_*kw) ^ v.touch(bi*T_*kw, (bi+1)*T_*kw) ^
					touch(g[bi*T_*qw:(bi+1)*T_*qw]) ^ touch(o.probs[bi*s.Heads*tri(T_):(bi+1)*s.Heads*tri(T_)])
			}
			s.starts(start, bi)
			kOff := bi*T_*kw + kh*s.HeadDim
			for h := kh * group; h < (kh+1)*group; h++ {
				qOff := bi*T_*qw + h*s.HeadDim
				saved := o.probs[(bi*s.Heads+h)*tri(T_) : (bi*s.Heads+h+1)*tri(T_)]
				for i := range T_ { // only the lower triangle is written: the rest stays zero
					copy(p[i*T_:i*T_+i+1], saved[tri(i):tri(i+1)])
				}
				first := h == kh*group
				if dv != nil {
					accumulate(first, o.inFm[2], roundV, on.dV, asValuesLower(o.f, p, pv, T_), T_, valuesOf(g[qOff:]), qw, 1, dv[kOff:])
				}
				if dq == nil && dk == nil {
					continue
				}
				// gradient dtype = tensor dtype: dP in the values matmul's
				// format, then the softmax output's, dS in the scores'
				if dPInKernel {
					attnGemmBandRound(e, blas.BandLowerC, false, true, T_, T_, s.HeadDim, 1, valuesOf(g[qOff:]), qw, v.at(kOff), kw, ds, T_)
				} else {
					attnGemmBand(e, on.dP, blas.BandLowerC, false, true, T_, T_, s.HeadDim, 1, valuesOf(g[qOff:]), qw, v.at(kOff), kw, 0, ds, T_)
					for i := range T_ {
						round(o.f.values, ds[i*T_:i*T_+i+1])
					}
				}
				causalSoftmaxGradRows(p, ds, T_, start, 0, T_, func(i int, row []T) {
					round(o.f.softmax, row[:i+1]) // before the gradient: dP's rounding to the softmax's format
				}, func(i int, row []T) {
					if !dSInPacking {
						round(o.f.scores, row[:i+1])
					}
				})
				if dq != nil && inKernel {
					attnGemmBandRound(e, blas.BandLowerA, false, false, T_, s.HeadDim, T_, scale, valuesOf(ds), T_, k.at(kOff), kw, dq[qOff:], qw)
				} else if dq != nil {
					attnGemmBand(e, on.dQ, blas.BandLowerA, false, false, T_, s.HeadDim, T_, scale, valuesOf(ds), T_, k.at(kOff), kw, 0, dq[qOff:], qw)
				}
				if dk != nil {
					accumulate(first, o.inFm[1], roundK, on.dK, ds, T_, q.at(qOff), qw, scale, dk[kOff:])
				}
			}
		}
	})
	if inKernel { // what backwardOp would have counted (rounded, it counts nothing)
		for _, g := range grads {
			if g != nil {
				e.Grads.rounded.Add(int64(len(g)))
			}
		}
	}
	return nil
}

// touch reads one value from each cache line of x, in order, and returns
// their xor. The heads of a batch row read its q, k and v in 128-byte
// pieces a row apart (a head's columns), an order the prefetchers do not
// follow, and in the training graph those values were written long
// before: read in order first, each line comes in at the speed of a
// stream, and the heads find it in cache (attention's forward pass 8%
// faster in the graph at the bench shape, its backward 6%).
func touch[T Float | uint16](x []T) uint32 {
	var h uint32
	step := 64 / int(unsafe.Sizeof(x[0]))
	for i := 0; i < len(x); i += step {
		h ^= uint32(x[i])
	}
	return h
}
