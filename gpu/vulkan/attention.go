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
}

// AttentionMaxHeadDim is the largest head dimension the kernels take:
// each invocation keeps HeadDim/16 fp32 accumulators per output.
const AttentionMaxHeadDim = 256

// attnTile is the query and key tile of the shaders (16×16 invocations).
const attnTile = 16

// attnPush is the size of attention.comp's push constants.
const attnPush = 15 * 4

// StatsLen is the number of float32 values of the buffer the
// forward pass fills and the backward pass reads: each query row's
// softmax max and reciprocal sum, [Batch, Heads, SeqLen, 2].
func (s AttentionShape) StatsLen() int { return s.Batch * s.Heads * s.SeqLen * 2 }

// RowSumLen is the number of float32 values of the backward
// pass's scratch: Σ_j P ⊙ dP per query row, [Batch, Heads, SeqLen].
func (s AttentionShape) RowSumLen() int { return s.Batch * s.Heads * s.SeqLen }

// check validates the shape and its buffers for the kernels.
func (s AttentionShape) check(ks *Kernels, q, k, v *Buffer) error {
	if s.Batch <= 0 || s.SeqLen <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.Heads%s.KVHeads != 0 || s.Window < 0 {
		return fmt.Errorf("batch %d, %d tokens, %d heads, %d key/value heads, window %d: sizes must be positive, window ≥ 0 and heads a multiple of key/value heads",
			s.Batch, s.SeqLen, s.Heads, s.KVHeads, s.Window)
	}
	if s.HeadDim <= 0 || s.HeadDim > AttentionMaxHeadDim {
		return fmt.Errorf("head dimension %d: the kernels take 1 to %d", s.HeadDim, AttentionMaxHeadDim)
	}
	for _, r := range []Rounding{s.Scores, s.Softmax, s.Values} {
		if r > RoundFP16 {
			return fmt.Errorf("unknown rounding %d", r)
		}
	}
	lim := ks.d.Physical.MaxWorkgroupCount
	if uint64((s.SeqLen+attnTile-1)/attnTile) > uint64(lim[0]) || uint64(s.Heads) > uint64(lim[1]) || uint64(s.Batch) > uint64(lim[2]) {
		return fmt.Errorf("%d×%d×%d workgroups exceed the device's %v", (s.SeqLen+attnTile-1)/attnTile, s.Heads, s.Batch, lim)
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
// rounding of O or dQ, of dK and of dV, the per-head roundings and the
// gradients wanted.
func (s AttentionShape) push(out, dk, dv Rounding, roundHeads, need uint32) []byte {
	scale := float32(1 / math.Sqrt(float64(s.HeadDim))) // as nn's kernels form it
	return pushWords(s.SeqLen, s.Heads, s.KVHeads, s.HeadDim, s.Window, s.Positions != nil, scale,
		uint32(s.Scores), uint32(s.Softmax), uint32(s.Values), uint32(out), uint32(dk), uint32(dv), roundHeads, need)
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
	kern, err := ks.kernel("attention_fwd.spv", 10, attnPush)
	if err != nil {
		return wrap(err)
	}
	bufs := []*Buffer{q, k, v, q, standIn(s.Positions, q), stats, stats, out, out, out}
	push := s.push(outRound, NoRounding, NoRounding, 0, 0)
	if err := r.Dispatch(kern, bufs, push, uint32((s.SeqLen+attnTile-1)/attnTile), uint32(s.Heads), uint32(s.Batch)); err != nil {
		return wrap(err)
	}
	return nil
}

// AttentionGrads are the buffers of attention's backward pass: the
// output's gradient DO (Q's shape), the gradients to compute (nil: not
// wanted) with the format each is rounded to, and RowSum, scratch of
// RowSumLen values.
type AttentionGrads struct {
	DO, RowSum                *Buffer
	DQ, DK, DV                *Buffer
	DQRound, DKRound, DVRound Rounding
	// RoundHeadsK and RoundHeadsV round each query head's dK (dV) to
	// DKRound (DVRound) before the fp32 sum over the heads that share a
	// key/value head, as PyTorch's repeat_kv backward does.
	RoundHeadsK, RoundHeadsV bool
}

// AttentionBackward records attention's backward pass from the stats
// AttentionForward filled for the same q, k and v: dQ, dK and dV (those
// not nil), each rounded to its format. Two dispatches: per query rows,
// the softmax's row sums and dQ; then per key rows, dK and dV.
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
	checks := []struct {
		name       string
		b          *Buffer
		rows, cols int
		optional   bool // a gradient: nil when not wanted
	}{
		{"stats", stats, 1, s.StatsLen(), false}, {"dO", g.DO, n, qw, false}, {"rowsum", g.RowSum, 1, s.RowSumLen(), false},
		{"dQ", g.DQ, n, qw, true}, {"dK", g.DK, n, kw, true}, {"dV", g.DV, n, kw, true},
	}
	for _, c := range checks {
		if c.b == nil && c.optional {
			continue
		}
		if err := extent(c.name, c.b, 0, c.rows, c.cols, c.cols, 4); err != nil {
			return wrap(err)
		}
	}
	for _, w := range []*Buffer{g.DQ, g.DK, g.DV, g.RowSum} {
		if w == nil {
			continue
		}
		for _, o := range []*Buffer{q, k, v, stats, g.DO} {
			if w == o {
				return wrap(fmt.Errorf("a gradient or the row sums share a buffer with an input"))
			}
		}
	}
	if g.DQ != nil && (g.DQ == g.DK || g.DQ == g.DV || g.DQ == g.RowSum) || g.DK != nil && (g.DK == g.DV || g.DK == g.RowSum) || g.DV != nil && g.DV == g.RowSum {
		return wrap(fmt.Errorf("dQ, dK, dV and the row sums must be distinct buffers"))
	}
	groups := uint32((s.SeqLen + attnTile - 1) / attnTile)
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
	push := s.push(g.DQRound, g.DKRound, g.DVRound, roundHeads, need)
	pos := standIn(s.Positions, q)
	if need&3 != 0 { // dQ and dK need the row sums
		kern, err := ks.kernel("attention_dq.spv", 10, attnPush)
		if err != nil {
			return wrap(err)
		}
		bufs := []*Buffer{q, k, v, g.DO, pos, stats, g.RowSum, standIn(g.DQ, g.RowSum), g.RowSum, g.RowSum}
		if err := r.Dispatch(kern, bufs, push, groups, uint32(s.Heads), uint32(s.Batch)); err != nil {
			return wrap(err)
		}
	}
	if need&6 != 0 {
		kern, err := ks.kernel("attention_dkv.spv", 10, attnPush)
		if err != nil {
			return wrap(err)
		}
		bufs := []*Buffer{q, k, v, g.DO, pos, stats, g.RowSum, g.RowSum, standIn(g.DK, g.RowSum), standIn(g.DV, g.RowSum)}
		if err := r.Dispatch(kern, bufs, push, groups, uint32(s.KVHeads), uint32(s.Batch)); err != nil {
			return wrap(err)
		}
	}
	return nil
}
