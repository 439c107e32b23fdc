package vulkan

import (
	"fmt"
	"math"
)

// CacheShape describes decoding's key/value cache of one layer and a run
// of new rows over it (kv_cache.comp): the cache holds Slots sequences
// of up to Cap tokens, KVHeads·HeadDim values a token; the run's Rows
// query rows have Heads·HeadDim values, and row r continues sequence
// Slot[r] at position Pos[r] (two buffers of Rows int32 values, which the
// caller checks: Slot below Slots, Pos below Cap). Window > 0 limits a
// row to its last Window keys.
type CacheShape struct {
	Rows, Slots, Cap        int
	Heads, KVHeads, HeadDim int
	Window                  int
	Slot, Pos               *Buffer
}

// Width is the values a cached token holds.
func (s CacheShape) Width() int { return s.KVHeads * s.HeadDim }

// ScratchLen is the number of float32 values CacheAttention's scratch
// holds: each row and head's scores over the whole capacity.
func (s CacheShape) ScratchLen() int { return s.Rows * s.Heads * s.Cap }

func (s CacheShape) check(what string) error {
	if s.Rows < 0 || s.Slots <= 0 || s.Cap <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.Window < 0 {
		return fmt.Errorf("vulkan: %s: rows must be ≥ 0; slots, capacity, heads and head dim > 0", what)
	}
	if s.Heads%s.KVHeads != 0 {
		return fmt.Errorf("vulkan: %s: %d heads do not group into %d key/value heads", what, s.Heads, s.KVHeads)
	}
	if uint64(s.Slots)*uint64(s.Cap)*uint64(s.Width()) > math.MaxUint32/2 ||
		uint64(s.Rows)*uint64(s.Heads*s.HeadDim) > math.MaxUint32/2 {
		return fmt.Errorf("vulkan: %s: too many values for the kernel's 32-bit indexing", what)
	}
	return nil
}

// CacheAppend records kc[Slot[r], Pos[r], :] = k[r, :] and the same of v
// into vc, for each of the run's rows: a copy.
func (ks *Kernels) CacheAppend(r *Recorder, s CacheShape, k, v, kc, vc *Buffer) error {
	if err := s.check("CacheAppend"); err != nil {
		return err
	}
	wrap := func(err error) error {
		return fmt.Errorf("vulkan: CacheAppend of %d rows into %d×%d tokens: %w", s.Rows, s.Slots, s.Cap, err)
	}
	if s.Rows == 0 {
		return nil
	}
	w := s.Width()
	checks := []matrixCheck{{"k", k, s.Rows, w}, {"v", v, s.Rows, w}, {"slot", s.Slot, 1, s.Rows}, {"pos", s.Pos, 1, s.Rows},
		{"kc", kc, s.Slots * s.Cap, w}, {"vc", vc, s.Slots * s.Cap, w}}
	if err := checkMatrices(checks, 4); err != nil {
		return wrap(err)
	}
	if kc == vc {
		return wrap(fmt.Errorf("kc and vc must be two buffers"))
	}
	kern, err := ks.kernel("kv_append.spv", 6, 3*4)
	if err != nil {
		return wrap(err)
	}
	n := s.Rows * w
	groups := uint32(min((n+63)/64, 65535))
	return r.Dispatch(kern, []*Buffer{k, v, s.Slot, s.Pos, kc, vc}, pushWords(s.Rows, w, s.Cap), groups, 1, 1)
}

// CacheFormats are the rounding points of decoding attention: scores,
// softmax, the probabilities as the values product reads them, and the
// output.
type CacheFormats struct{ Scores, Softmax, Values, Out Rounding }

// CacheAttention records o = softmax(scale·q·kᵀ)·v of each new row over
// its sequence's cached keys and values (CacheAppend first puts the
// run's own rows there): nn's decoding attention with its rounding
// points, grouped-query, causal by position, windowed when Window > 0.
func (ks *Kernels) CacheAttention(r *Recorder, s CacheShape, q, kc, vc, scratch, o *Buffer, f CacheFormats) error {
	if err := s.check("CacheAttention"); err != nil {
		return err
	}
	wrap := func(err error) error {
		return fmt.Errorf("vulkan: CacheAttention of %d rows over %d×%d tokens: %w", s.Rows, s.Slots, s.Cap, err)
	}
	if s.Rows == 0 {
		return nil
	}
	if s.Rows > 65535 || s.Heads > 65535 {
		return wrap(fmt.Errorf("more than 65535 rows or heads"))
	}
	if uint64(s.ScratchLen()) > math.MaxUint32/2 { // CacheAppend needs no scores
		return wrap(fmt.Errorf("%d rows × %d heads × %d tokens of scores: too many for the kernel's 32-bit indexing", s.Rows, s.Heads, s.Cap))
	}
	qw, w := s.Heads*s.HeadDim, s.Width()
	checks := []matrixCheck{{"q", q, s.Rows, qw}, {"kc", kc, s.Slots * s.Cap, w}, {"vc", vc, s.Slots * s.Cap, w},
		{"slot", s.Slot, 1, s.Rows}, {"pos", s.Pos, 1, s.Rows}, {"scratch", scratch, 1, s.ScratchLen()}, {"o", o, s.Rows, qw}}
	if err := checkMatrices(checks, 5); err != nil {
		return wrap(err)
	}
	if scratch == o {
		return wrap(fmt.Errorf("scratch and o must be two buffers"))
	}
	kern, err := ks.kernel("kv_attention.spv", 7, 11*4)
	if err != nil {
		return wrap(err)
	}
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	push := pushWords(s.Rows, s.Heads, s.KVHeads, s.HeadDim, s.Cap, s.Window, scale,
		uint32(f.Scores), uint32(f.Softmax), uint32(f.Values), uint32(f.Out))
	return r.Dispatch(kern, []*Buffer{q, kc, vc, s.Slot, s.Pos, scratch, o}, push, uint32(s.Heads), uint32(s.Rows), 1)
}
