package vulkan

import (
	"fmt"
	"math"
)

// AttentionShape is a batch of causal grouped-query attention on the
// device (nn.AttentionAttrs): Q is [Batch·SeqLen, Heads·HeadDim], K and V
// are [Batch·SeqLen, KVHeads·HeadDim], fp32, rows packed.
type AttentionShape struct {
	Batch, SeqLen  int
	Heads, KVHeads int
	HeadDim        int // 1 to AttentionMaxHeadDim
	// Window > 0 limits a query row to itself and the Window−1 keys
	// before it.
	Window int
	// Positions, when not nil, holds each token's position in its
	// document as int32 [Batch·SeqLen]: a query row attends only to the
	// keys of its own document, the Positions[i] tokens before it.
	Positions *Buffer
	// Scores, Softmax and Values are the rounding points of the scores,
	// of the probabilities, and of the probabilities as the values
	// matmul reads them.
	Scores, Softmax, Values Rounding
	// Operands is the format every value of Q, K and V (and of dO, for
	// AttentionBackward) already has (the graph's casts and gradient
	// roundings put them there): RoundBF16 or RoundFP16, with Scores and
	// Values rounded to it too, lets the kernels run the products on that
	// format's tensor cores where the device has them (attention_coop.go),
	// exact in their products and fp32 in their sums like the scalar
	// kernel. NoRounding, the zero value, keeps the scalar kernel.
	Operands Rounding
}

// AttentionMaxHeadDim is the largest head dimension the kernels take:
// each invocation keeps HeadDim/16 fp32 accumulators per output row.
const AttentionMaxHeadDim = 256

// attnTile is the query and key tile of the shaders: 64 rows per
// workgroup of 16×16 invocations, each owning 4×4 scores.
const attnTile = 64

// attnShared is the shared memory the shaders declare, in bytes: two
// staged 64×16 dot operands with a padding column, the 64×65 tile of
// probabilities, and 64 row starts and two 64-row sums.
const attnShared = (2*attnTile*17 + attnTile*65 + 3*attnTile) * 4

// attnHeadDims are the head-dimension classes the shaders are compiled
// for (MAXD, build.txt): the smallest that holds HeadDim sizes each
// invocation's accumulators, so a 64-wide head does not pay registers
// for 256 columns.
var attnHeadDims = [...]int{64, 128, 256}

// kernelFile is the SPIR-V of pass ("fwd", "dq" or "dkv") for the
// shape's head dimension (check keeps it ≤ AttentionMaxHeadDim, the
// last class).
func (s AttentionShape) kernelFile(pass string) string {
	d := attnHeadDims[len(attnHeadDims)-1]
	for _, c := range attnHeadDims {
		if s.HeadDim <= c {
			d = c
			break
		}
	}
	return fmt.Sprintf("attention_%s_d%d.spv", pass, d)
}

// attnPush is the size of attention.comp's push constants, and
// attnSumPush attention_sum.comp's.
const (
	attnPush    = 16 * 4
	attnSumPush = 7 * 4
)

// attnBuffers is the number of buffers the attention kernels bind: the
// tensor-core ones' kept scores last (the scalar kernel reads none).
const attnBuffers = 11

// StatsLen is the number of float32 values of the buffer the
// forward pass fills and the backward pass reads: each query row's
// softmax max and reciprocal sum, [Batch, Heads, SeqLen, 2].
func (s AttentionShape) StatsLen() int { return s.Batch * s.Heads * s.SeqLen * 2 }

// RowSumLen is the number of float32 values of the backward
// pass's scratch: Σ_j P ⊙ dP per query row, [Batch, Heads, SeqLen].
func (s AttentionShape) RowSumLen() int { return s.Batch * s.Heads * s.SeqLen }

// HeadGradsLen is the number of float32 values of the backward pass's
// scratch for grouped-query attention (Heads > KVHeads; 0 otherwise):
// each query head's share of dK and of dV before the group's sum, two
// [Batch·SeqLen, Heads·HeadDim] arrays.
func (s AttentionShape) HeadGradsLen() int {
	if s.Heads == s.KVHeads {
		return 0
	}
	return 2 * s.Batch * s.SeqLen * s.Heads * s.HeadDim
}

// check validates the shape and its buffers for the kernels.
func (s AttentionShape) check(ks *Kernels, q, k, v *Buffer) error {
	if s.Batch <= 0 || s.SeqLen <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.Heads%s.KVHeads != 0 || s.Window < 0 {
		return fmt.Errorf("batch %d, %d tokens, %d heads, %d key/value heads, window %d: sizes must be positive, window ≥ 0 and heads a multiple of key/value heads",
			s.Batch, s.SeqLen, s.Heads, s.KVHeads, s.Window)
	}
	if s.HeadDim <= 0 || s.HeadDim > AttentionMaxHeadDim {
		return fmt.Errorf("head dimension %d: the kernels take 1 to %d", s.HeadDim, AttentionMaxHeadDim)
	}
	for _, r := range []Rounding{s.Scores, s.Softmax, s.Values, s.Operands} {
		if r > RoundFP16 {
			return fmt.Errorf("unknown rounding %d", r)
		}
	}
	if have := ks.d.Physical.MaxSharedMemory; have < attnShared {
		return fmt.Errorf("the kernels need %d bytes of shared memory; the device has %d", attnShared, have)
	}
	lim := ks.d.Physical.MaxWorkgroupCount
	// Heads along x, row bands along y, batch along z (the kernels start
	// the longest bands first).
	if uint64(s.Heads) > uint64(lim[0]) || uint64((s.SeqLen+attnTile-1)/attnTile) > uint64(lim[1]) || uint64(s.Batch) > uint64(lim[2]) {
		return fmt.Errorf("%d×%d×%d workgroups exceed the device's %v", s.Heads, (s.SeqLen+attnTile-1)/attnTile, s.Batch, lim)
	}
	n := s.Batch * s.SeqLen
	if err := extent("q", q, 0, n, s.Heads*s.HeadDim, s.Heads*s.HeadDim, 4); err != nil {
		return err
	}
	for name, b := range map[string]*Buffer{"k": k, "v": v} {
		if err := extent(name, b, 0, n, s.KVHeads*s.HeadDim, s.KVHeads*s.HeadDim, 4); err != nil {
			return err
		}
	}
	if s.Positions != nil {
		if err := extent("positions", s.Positions, 0, 1, n, n, 4); err != nil {
			return err
		}
	}
	return nil
}

// push packs attention.comp's push constants: the shape, then the
// rounding of O or dQ, of dK and of dV, the per-head roundings, the
// gradients wanted and whether the tensor-core kernels keep the scores
// (attnKeep; the scalar kernel reads no such word).
func (s AttentionShape) push(out, dk, dv Rounding, roundHeads, need uint32, keep bool) []byte {
	scale := float32(1 / math.Sqrt(float64(s.HeadDim))) // as nn's kernels form it
	return pushWords(s.SeqLen, s.Heads, s.KVHeads, s.HeadDim, s.Window, s.Positions != nil, scale,
		uint32(s.Scores), uint32(s.Softmax), uint32(s.Values), uint32(out), uint32(dk), uint32(dv), roundHeads, need, keep)
}

// standIn is b, or, when b is nil, stand, a buffer bound where the kernel
// reads nothing.
func standIn(b, stand *Buffer) *Buffer {
	if b == nil {
		return stand
	}
	return b
}

// AttentionForward records O = causal softmax(Q·Kᵀ/√HeadDim)·V per head,
// with s's rounding points, O rounded to outRound, and fills stats
// (StatsLen values) for AttentionBackward.
func (ks *Kernels) AttentionForward(r *Recorder, s AttentionShape, q, k, v, stats, out *Buffer, outRound Rounding) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: AttentionForward: %w", err) }
	if err := s.check(ks, q, k, v); err != nil {
		return wrap(err)
	}
	if outRound > RoundFP16 {
		return wrap(fmt.Errorf("unknown rounding %d", outRound))
	}
	if err := extent("stats", stats, 0, 1, s.StatsLen(), s.StatsLen(), 4); err != nil {
		return wrap(err)
	}
	if err := extent("out", out, 0, s.Batch*s.SeqLen, s.Heads*s.HeadDim, s.Heads*s.HeadDim, 4); err != nil {
		return wrap(err)
	}
	if out == q || out == k || out == v || out == stats {
		return wrap(fmt.Errorf("out must not share a buffer with q, k, v or stats"))
	}
	kern, err := ks.kernel(ks.attentionFile(s, "fwd"), attnBuffers, attnPush)
	if err != nil {
		return wrap(err)
	}
	kept, err := ks.attnKept(r, s, 1)
	if err != nil {
		return wrap(err)
	}
	bufs := []*Buffer{q, k, v, q, standIn(s.Positions, q), stats, stats, out, out, out, standIn(kept, q)}
	push := s.push(outRound, NoRounding, NoRounding, 0, 0, kept != nil)
	if err := r.Dispatch(kern, bufs, push, uint32(s.Heads), uint32((s.SeqLen+attnTile-1)/attnTile), uint32(s.Batch)); err != nil {
		return wrap(err)
	}
	return nil
}

// AttentionGrads are the buffers of attention's backward pass: the
// output's gradient DO (Q's shape), the gradients to compute (nil: not
// wanted) with the format each is rounded to, and the scratch: RowSum
// of RowSumLen values, and HeadGrads of HeadGradsLen values when the
// shape groups query heads and dK or dV is wanted (else unused, may be
// nil).
type AttentionGrads struct {
	DO, RowSum, HeadGrads     *Buffer
	DQ, DK, DV                *Buffer
	DQRound, DKRound, DVRound Rounding
	// RoundHeadsK and RoundHeadsV round each query head's dK (dV) to
	// DKRound (DVRound) before the fp32 sum over the heads that share a
	// key/value head, as PyTorch's repeat_kv backward does.
	RoundHeadsK, RoundHeadsV bool
	// Unrounded leaves dQ, dK and dV in fp32 for the caller to round
	// after (and count what the rounding sends to zero): the same values
	// once rounded. The roundings of each head's share before a group's
	// sum stay.
	Unrounded bool
}

// AttentionBackward records attention's backward pass from the stats
// AttentionForward filled for the same q, k and v: dQ, dK and dV (those
// not nil), each rounded to its format. Two dispatches: per query rows,
// the softmax's row sums and dQ; then per key rows and query head, dK
// and dV, or with grouped heads each head's share of them, and a third
// that adds the shares in head order.
func (ks *Kernels) AttentionBackward(r *Recorder, s AttentionShape, q, k, v, stats *Buffer, g AttentionGrads) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: AttentionBackward: %w", err) }
	if err := s.check(ks, q, k, v); err != nil {
		return wrap(err)
	}
	for _, x := range []Rounding{g.DQRound, g.DKRound, g.DVRound} {
		if x > RoundFP16 {
			return wrap(fmt.Errorf("unknown rounding %d", x))
		}
	}
	n := s.Batch * s.SeqLen
	qw, kw := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	headGrads := s.HeadGradsLen() > 0 && (g.DK != nil || g.DV != nil)
	checks := []struct {
		name       string
		b          *Buffer
		rows, cols int
		optional   bool // a gradient: nil when not wanted
	}{
		{"stats", stats, 1, s.StatsLen(), false}, {"dO", g.DO, n, qw, false}, {"rowsum", g.RowSum, 1, s.RowSumLen(), false},
		{"dQ", g.DQ, n, qw, true}, {"dK", g.DK, n, kw, true}, {"dV", g.DV, n, kw, true},
		{"head gradients", g.HeadGrads, 1, s.HeadGradsLen(), !headGrads},
	}
	for _, c := range checks {
		if c.b == nil && c.optional {
			continue
		}
		if err := extent(c.name, c.b, 0, c.rows, c.cols, c.cols, 4); err != nil {
			return wrap(err)
		}
	}
	scratch := g.HeadGrads
	if !headGrads {
		scratch = nil // not bound: may alias anything
	}
	for _, w := range []*Buffer{g.DQ, g.DK, g.DV, g.RowSum, scratch} {
		if w == nil {
			continue
		}
		for _, o := range []*Buffer{q, k, v, stats, g.DO} {
			if w == o {
				return wrap(fmt.Errorf("a gradient or the row sums share a buffer with an input"))
			}
		}
	}
	outs := []*Buffer{g.DQ, g.DK, g.DV, g.RowSum, scratch}
	for i, a := range outs {
		for _, b := range outs[i+1:] {
			if a != nil && a == b {
				return wrap(fmt.Errorf("dQ, dK, dV, the row sums and the head gradients must be distinct buffers"))
			}
		}
	}
	tiles := uint32((s.SeqLen + attnTile - 1) / attnTile)
	var need uint32
	if g.DQ != nil {
		need |= 1
	}
	if g.DK != nil {
		need |= 2
	}
	if g.DV != nil {
		need |= 4
	}
	var roundHeads uint32
	if g.RoundHeadsK {
		roundHeads |= 1
	}
	if g.RoundHeadsV {
		roundHeads |= 2
	}
	pos := standIn(s.Positions, q)
	// The dQ kernel keeps S and dP for the dK/dV kernel where it runs
	// (dQ or dK wanted) and the rounding of P leaves dP a value of the
	// products' format.
	var kept *Buffer
	if need&3 != 0 && (s.Softmax == NoRounding || s.Softmax == s.tensorFormat()) {
		var err error
		if kept, err = ks.attnKept(r, s, 2); err != nil {
			return wrap(err)
		}
	}
	dqR, dkR, dvR, sumK, sumV := g.DQRound, g.DKRound, g.DVRound, g.DKRound, g.DVRound
	if g.Unrounded {
		dqR, sumK, sumV = NoRounding, NoRounding, NoRounding
		if s.HeadGradsLen() == 0 { // no groups: the dK/dV kernel writes the gradients themselves
			dkR, dvR = NoRounding, NoRounding
		}
	}
	push := s.push(dqR, dkR, dvR, roundHeads, need, kept != nil)
	if need&3 != 0 { // dQ and dK need the row sums
		kern, err := ks.kernel(ks.attentionFile(s, "dq"), attnBuffers, attnPush)
		if err != nil {
			return wrap(err)
		}
		bufs := []*Buffer{q, k, v, g.DO, pos, stats, g.RowSum, standIn(g.DQ, g.RowSum), g.RowSum, g.RowSum, standIn(kept, q)}
		if err := r.Dispatch(kern, bufs, push, uint32(s.Heads), tiles, uint32(s.Batch)); err != nil {
			return wrap(err)
		}
	}
	if need&6 == 0 {
		return nil
	}
	dk, dv := standIn(g.DK, g.RowSum), standIn(g.DV, g.RowSum)
	bufs := []*Buffer{q, k, v, g.DO, pos, stats, g.RowSum, standIn(scratch, g.RowSum), dk, dv, standIn(kept, q)}
	passes := []string{"dkv"}
	if need&6 == 6 && ks.splitDKV && ks.attnTensorFor(s) {
		passes = []string{"dk", "dv"} // the same push constants: each build leaves the other's half
	}
	for _, pass := range passes {
		kern, err := ks.kernel(ks.attentionFile(s, pass), attnBuffers, attnPush)
		if err != nil {
			return wrap(err)
		}
		if err := r.Dispatch(kern, bufs, push, uint32(s.Heads), tiles, uint32(s.Batch)); err != nil {
			return wrap(err)
		}
	}
	if !headGrads {
		return nil
	}
	sumPush := pushWords(n, s.Heads, s.KVHeads, s.HeadDim, uint32(sumK), uint32(sumV), need)
	return ks.dispatch(r, wrap, "attention_sum.spv", []*Buffer{scratch, dk, dv}, sumPush, ks.groups1D(n*kw))
}
