package nn

import (
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// The tiled attention kernel computes what attentionOp computes without
// ever holding a head's [T, T] probabilities: at T = 2048 and 32 heads
// those are 512 MiB per layer, kept from the forward to the backward pass.
//
// Work goes in blocks of attnTile query rows. A block's scores against
// the keys it may see, [attnTile, L] with L ≤ T, are one GEMM; keys after
// the block's last row (the causal mask), before the earliest document
// start of its rows, or before its earliest window start are never
// computed, so causal attention does about half the multiply-adds of the
// full kernel. The block's rows hold whole softmax rows, so each row's
// softmax is causalSoftmaxRow on the same rounded scores as in attentionOp: the
// same operations in the same order, the same probabilities to the bit.
// The forward pass keeps, per query row, only the max it subtracted and
// the reciprocal sum it multiplied by; the backward pass recomputes the
// block's scores with the same GEMM call and its probabilities as
// exp(s−m)·inv, which are again the forward's bits, and needs no extra
// pass for rowsum(P ⊙ dP) since a block holds whole rows of dP.
//
// Memory: B·Heads·T·2 saved values, and per worker a few [attnTile, T]
// blocks plus, for grouped-query attention in a low precision, one head's
// dK and dV ([T, HeadDim] each).
//
// What differs from attentionOp is the order of some fp32 (or float64)
// sums: P·V and dS·K are reduced over the block's L keys and not over all
// T, which moves the backend's k-blocking, and dK and dV add up one block
// of query rows at a time instead of in one GEMM. The scores and dP =
// dO·Vᵀ are sums over HeadDim, as before, so P, dP and dS keep their bits.

// attnTile is how many query rows one block holds. 64 rows keep the
// wasted upper triangle of the diagonal blocks at 64/T of the work and
// the GEMMs long enough for the BLAS kernels.
const attnTile = 64

type attentionTiledOp[T Float] struct {
	opBase
	s   AttentionShape
	f   attnFormats
	buf buffer[T]
	// stats is saved for backward: [B, Heads, T, 2], each query row's
	// softmax max and the reciprocal of its sum of exponentials.
	stats []T
}

func (o *attentionTiledOp[T]) Arity() int    { return 3 }
func (o *attentionTiledOp[T]) Type() hm.Type { return fnType(2, 2, 2, 2) }
func (o *attentionTiledOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.s.Batch * o.s.SeqLen, o.s.Heads * o.s.HeadDim}, nil
}

// As in attentionOp, one unit of parallel work is one (batch row,
// key/value head) pair, so the sums into dK and dV keep one order for any
// worker count.
func (o *attentionTiledOp[T]) units() int { return o.s.Batch * o.s.KVHeads }

// scores fills sb with the rounded scores of query rows [r0, r1) of the
// head at qOff against the keys they may see, from c0, the earliest start
// among them, to r1−1, and returns c0 and the block, [r1−r0, r1−c0].
// on says whether the product runs on the engine's bf16 GEMM
// (attnPaths.scores). The backward pass calls it with the same arguments
// as the forward, so it gets the same bits.
func (o *attentionTiledOp[T]) scores(on bool, sb []T, start []int, q, k []T, qOff, kOff, r0, r1 int) (int, []T) {
	s := o.s
	c0 := start[r0]
	for _, st := range start[r0+1 : r1] {
		c0 = min(c0, st)
	}
	qw, kw, l := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, r1-c0
	p := sb[:(r1-r0)*l]
	scale := T(1 / math.Sqrt(float64(s.HeadDim)))
	attnGemm(o.eng, on, false, true, r1-r0, l, s.HeadDim, scale, q[qOff+r0*qw:], qw, k[kOff+c0*kw:], kw, 0, p, l)
	round(o.f.scores, p)
	return c0, p
}

func (o *attentionTiledOp[T]) Do(vs ...G.Value) (G.Value, error) {
	in := vals[T](vs)
	q, k, v := in[0], in[1], in[2]
	t, out := o.buf.get()
	s := o.s
	n := s.SeqLen
	if len(o.stats) != s.Batch*s.Heads*n*2 {
		o.stats = make([]T, s.Batch*s.Heads*n*2)
	}
	qw, kw, group := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim, s.Heads/s.KVHeads
	on := attnPathsOf[T](&o.opBase, o.f)
	o.eng.parallel(o.units(), 1, func(lo, hi int) {
		sb := make([]T, attnTile*n)
		pv := valuesScratch[T](o.f, on.values, attnTile*n)
		start := make([]int, n)
		for u := lo; u < hi; u++ {
			bi, kh := u/s.KVHeads, u%s.KVHeads
			s.starts(start, bi)
			kOff := bi*n*kw + kh*s.HeadDim
			for h := kh * group; h < (kh+1)*group; h++ {
				qOff := bi*n*qw + h*s.HeadDim
				st := o.stats[(bi*s.Heads+h)*n*2 : (bi*s.Heads+h+1)*n*2]
				for r0 := 0; r0 < n; r0 += attnTile {
					r1 := min(r0+attnTile, n)
					c0, p := o.scores(on.scores, sb, start, q, k, qOff, kOff, r0, r1)
					l := r1 - c0
					for i := r0; i < r1; i++ {
						st[2*i], st[2*i+1] = causalSoftmaxRow(p[(i-r0)*l:(i-r0+1)*l], start[i]-c0, i-c0)
					}
					round(o.f.softmax, p)
					attnGemm(o.eng, on.values, false, false, r1-r0, s.HeadDim, l, 1, asValues(o.f, p, pv), l, v[kOff+c0*kw:], kw, 0, out[qOff+r0*qw:], qw)
				}
			}
		}
	})
	roundAll(o.eng, o.out, out)
	return t, nil
}

func (o *attentionTiledOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	n := o.s.Batch * o.s.SeqLen
	shapes := [][]int{{n, o.s.Heads * o.s.HeadDim}, {n, o.s.KVHeads * o.s.HeadDim}, {n, o.s.KVHeads * o.s.HeadDim}}
	return fusedBackward(&o.opBase, []*G.Node{inputs[0], inputs[1], inputs[2], grad}, shapes, o.backward), nil
}

// headGrad is where one head's dK or dV accumulates, block by block: the
// op's gradient itself (rows kw apart), or, for a group's later heads when
// each head's gradient is rounded before the group's sum, a [T, HeadDim]
// buffer that is rounded and added to it once the head is done.
type headGrad[T Float] struct {
	dst     []T // the gradient at this key/value head's column, nil if not needed
	buf     []T // the per-head buffer, nil unless rounded
	f       amp.Format
	rounded bool
	n, d    int // rows, and columns per row
	kw      int // row stride of dst

	into []T // where the current head accumulates
	ld   int
}

// begin starts one head of the group (first: the group's first head).
// The first head accumulates into dst from zero; a later one adds to dst,
// or, when rounded, accumulates in the buffer from zero.
func (g *headGrad[T]) begin(first bool) {
	if g.dst == nil {
		return
	}
	switch {
	case first:
		g.into, g.ld = g.dst, g.kw
		for i := 0; i < g.n; i++ {
			clear(g.dst[i*g.kw : i*g.kw+g.d])
		}
	case g.rounded:
		g.into, g.ld = g.buf, g.d
		clear(g.buf)
	default:
		g.into, g.ld = g.dst, g.kw
	}
}

// end finishes a head: when rounded, the first head is rounded in place
// and a later one rounded in its buffer and added to dst, in fp32.
func (g *headGrad[T]) end(first bool) {
	if g.dst == nil || !g.rounded {
		return
	}
	if first {
		for i := 0; i < g.n; i++ {
			round(g.f, g.dst[i*g.kw:i*g.kw+g.d])
		}
		return
	}
	round(g.f, g.buf)
	for i := 0; i < g.n; i++ {
		d := g.dst[i*g.kw : i*g.kw+g.d]
		for j, x := range g.buf[i*g.d : (i+1)*g.d] {
			d[j] += x
		}
	}
}

// backward is attentionOp.backward block by block, with the probabilities
// recomputed from the saved max and reciprocal sum (see the comments
// there for the formulas, the row sum and the rounding of each head's dK
// and dV in grouped-query attention at low precision).
func (o *attentionTiledOp[T]) backward(in [][]T, grads [][]T) error {
	q, k, v, g := in[0], in[1], in[2], in[3]
	dq, dk, dv := grads[0], grads[1], grads[2]
	s := o.s
	n, hd := s.SeqLen, s.HeadDim
	qw, kw, group := s.Heads*hd, s.KVHeads*hd, s.Heads/s.KVHeads
	scale := T(1 / math.Sqrt(float64(hd)))
	e, on := o.eng, attnPathsOf[T](&o.opBase, o.f)
	roundK, roundV := group > 1 && o.inFm[1] != amp.FP32, group > 1 && o.inFm[2] != amp.FP32
	o.eng.parallel(o.units(), 1, func(lo, hi int) {
		sb := make([]T, attnTile*n)
		ds := make([]T, attnTile*n)
		pv := valuesScratch[T](o.f, on.dV, attnTile*n)
		start := make([]int, n)
		gk := headGrad[T]{f: o.inFm[1], rounded: roundK, n: n, d: hd, kw: kw}
		gv := headGrad[T]{f: o.inFm[2], rounded: roundV, n: n, d: hd, kw: kw}
		if roundK && dk != nil {
			gk.buf = make([]T, n*hd)
		}
		if roundV && dv != nil {
			gv.buf = make([]T, n*hd)
		}
		for u := lo; u < hi; u++ {
			bi, kh := u/s.KVHeads, u%s.KVHeads
			s.starts(start, bi)
			kOff := bi*n*kw + kh*hd
			gk.dst, gv.dst = nil, nil
			if dk != nil {
				gk.dst = dk[kOff:]
			}
			if dv != nil {
				gv.dst = dv[kOff:]
			}
			for h := kh * group; h < (kh+1)*group; h++ {
				qOff := bi*n*qw + h*hd
				st := o.stats[(bi*s.Heads+h)*n*2 : (bi*s.Heads+h+1)*n*2]
				first := h == kh*group
				gk.begin(first)
				gv.begin(first)
				for r0 := 0; r0 < n; r0 += attnTile {
					r1 := min(r0+attnTile, n)
					c0, p := o.scores(on.scores, sb, start, q, k, qOff, kOff, r0, r1)
					l, rows := r1-c0, r1-r0
					for i := r0; i < r1; i++ {
						row, s0, m, inv := p[(i-r0)*l:(i-r0+1)*l], start[i]-c0, st[2*i], st[2*i+1]
						e := row[s0 : i-c0+1]
						expSub(e, e, m)
						for j := range e {
							e[j] *= inv
						}
						clear(row[:s0])
						clear(row[i-c0+1:])
					}
					round(o.f.softmax, p)
					if dv != nil {
						attnGemm(e, on.dV, true, false, l, hd, rows, 1, asValues(o.f, p, pv), l, g[qOff+r0*qw:], qw, 1, gv.into[c0*gv.ld:], gv.ld)
					}
					if dq == nil && dk == nil {
						continue
					}
					d := ds[:rows*l]
					attnGemm(e, on.dP, false, true, rows, l, hd, 1, g[qOff+r0*qw:], qw, v[kOff+c0*kw:], kw, 0, d, l)
					// gradient dtype = tensor dtype: dP in the values matmul's
					// format, then the softmax output's, dS in the scores'
					round(o.f.values, d)
					round(o.f.softmax, d)
					for i := r0; i < r1; i++ {
						causalSoftmaxGradRow(p[(i-r0)*l:(i-r0+1)*l], d[(i-r0)*l:(i-r0+1)*l], start[i]-c0, i-c0)
					}
					round(o.f.scores, d)
					if dq != nil {
						attnGemm(e, on.dQ, false, false, rows, hd, l, scale, d, l, k[kOff+c0*kw:], kw, 0, dq[qOff+r0*qw:], qw)
					}
					if dk != nil {
						attnGemm(e, on.dK, true, false, l, hd, rows, scale, d, l, q[qOff+r0*qw:], qw, 1, gk.into[c0*gk.ld:], gk.ld)
					}
				}
				gk.end(first)
				gv.end(first)
			}
		}
	})
	return nil
}
