package vulkan

import (
	"math"
	"math/rand/v2"
	"testing"
)

// cacheRun is one run of decoding: (sequence, new tokens) pairs, each
// sequence's rows adjacent.
type cacheRun [][2]int

// cacheSchedule feeds 3 sequences of up to T tokens as a Decoder does:
// prompts of different lengths in one run, then a token of each live
// sequence a run (the first finishing early), then the rest in chunks.
func cacheSchedule(T int) []cacheRun {
	runs := []cacheRun{{{0, 5}, {1, 3}, {2, 1}}}
	for range 4 {
		runs = append(runs, cacheRun{{0, 1}, {1, 1}, {2, 1}})
	}
	runs = append(runs, cacheRun{{2, 1}, {1, 1}}) // sequence 0 is done; the order of sequences is free
	runs = append(runs, cacheRun{{1, T - 9}, {2, T - 7}})
	return runs
}

// TestCacheAttention runs decoding's attention (CacheAppend, then
// CacheAttention) through cacheSchedule and holds every output to
// attnReference, the float64 attention with the same rounding points and
// the bound any correct kernel meets (see attention_ref.go): a row at
// position p of sequence s is the training attention's query row p of
// batch row s, whose keys are the tokens the cache holds. fp32, bf16 and
// fp16 roundings; grouped and multi-query heads; a window; rows longer
// than the kernel's 64 invocations; head dims up to 128. A kernel that
// drops the values' rounding point fails the same reference.
func TestCacheAttention(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	cases := []struct {
		s AttentionShape
		f Rounding
	}{
		{AttentionShape{Heads: 2, KVHeads: 2, HeadDim: 8, SeqLen: 20}, NoRounding},
		{AttentionShape{Heads: 4, KVHeads: 2, HeadDim: 16, SeqLen: 40, Window: 7}, RoundBF16},
		{AttentionShape{Heads: 3, KVHeads: 1, HeadDim: 32, SeqLen: 150}, RoundFP16},
		{AttentionShape{Heads: 4, KVHeads: 1, HeadDim: 128, SeqLen: 90}, RoundBF16},
		{AttentionShape{Heads: 2, KVHeads: 1, HeadDim: 64, SeqLen: 130, Window: 100}, NoRounding},
	}
	rng := rand.New(rand.NewPCG(71, 73))
	for _, c := range cases {
		s := c.s
		s.Batch = 3
		rc := newAttnCase(rng, s, c.f, nil)
		ref := attnReference(rc)
		f := CacheFormats{Scores: rc.s.Scores, Softmax: rc.s.Softmax, Values: rc.s.Values, Out: rc.out}
		worst, differ, n := cacheAgainstReference(t, d, ks, rc, ref, f, true)
		t.Logf("%s: worst error %.3g of the bound; %d of %d outputs differ from the float64 reference's", rc, worst, differ, n)
		if c.f == RoundBF16 && s.HeadDim == 16 {
			bad := f
			bad.Values = NoRounding
			if w, _, _ := cacheAgainstReference(t, d, ks, rc, ref, bad, false); w <= 1 {
				t.Errorf("%s: decoding attention without the values' rounding point stays within the reference's bound (worst %.3g of it)", rc, w)
			}
		}
	}
}

// cacheAgainstReference runs rc's sequences through the cache kernels
// with formats f, run by run, and returns the worst output error as a
// fraction of ref's bound, and how many of the n outputs differ from the
// reference. With strict, an output outside the bound fails the test.
func cacheAgainstReference(t *testing.T, d *Device, ks *Kernels, rc attnRefCase, ref attnRefResult, f CacheFormats, strict bool) (worst float64, differ, n int) {
	t.Helper()
	s := rc.s
	S, T := s.Batch, s.SeqLen
	qw, kw := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
	fail := func(err error) { must(t, err) }
	newBuf := func(n int) *Buffer {
		b, err := d.NewBuffer(4 * max(n, 1))
		fail(err)
		return b
	}
	kc, vc := newBuf(S*T*kw), newBuf(S*T*kw)
	scratch := newBuf(S * T * s.Heads * T) // at most S·T rows a run
	q, k, v, o := newBuf(S*T*qw), newBuf(S*T*kw), newBuf(S*T*kw), newBuf(S*T*qw)
	slot, pos := newBuf(S*T), newBuf(S*T)
	for _, b := range []*Buffer{kc, vc, scratch, q, k, v, o, slot, pos} {
		defer b.Free()
	}
	r, err := d.NewRecorder()
	fail(err)
	defer r.Close()
	length := make([]int, S)
	for ri, run := range cacheSchedule(T) {
		var seqs, at []int
		var qr, kr, vr []float32
		for _, sn := range run {
			for range sn[1] {
				src := sn[0]*T + length[sn[0]]
				seqs, at = append(seqs, sn[0]), append(at, length[sn[0]])
				qr = append(qr, rc.q[src*qw:(src+1)*qw]...)
				kr = append(kr, rc.k[src*kw:(src+1)*kw]...)
				vr = append(vr, rc.v[src*kw:(src+1)*kw]...)
				length[sn[0]]++
			}
		}
		rows := len(seqs)
		fail(q.WriteFloat32(0, qr))
		fail(k.WriteFloat32(0, kr))
		fail(v.WriteFloat32(0, vr))
		ints := func(b *Buffer, xs []int) {
			w := make([]byte, 4*len(xs))
			for i, x := range xs {
				w[4*i], w[4*i+1], w[4*i+2], w[4*i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
			}
			fail(b.Write(0, w))
		}
		ints(slot, seqs)
		ints(pos, at)
		cs := CacheShape{Rows: rows, Slots: S, Cap: T, Heads: s.Heads, KVHeads: s.KVHeads, HeadDim: s.HeadDim, Window: s.Window, Slot: slot, Pos: pos}
		fail(ks.CacheAppend(r, cs, k, v, kc, vc))
		fail(ks.CacheAttention(r, cs, q, kc, vc, scratch, o, f))
		fail(r.Submit())
		got := make([]float32, rows*qw)
		fail(o.ReadFloat32(0, got))
		for row := range rows {
			base := (seqs[row]*T + at[row]) * qw
			for j := range qw {
				want, bound := ref.o.want[base+j], ref.o.bound[base+j]
				e := math.Abs(float64(got[row*qw+j]) - want)
				if strict && !(e <= bound) {
					t.Fatalf("%s: run %d, row %d (sequence %d, position %d), value %d: %g, want %g ± %.3g", rc, ri, row, seqs[row], at[row], j, got[row*qw+j], want, bound)
				}
				switch {
				case bound > 0:
					worst = max(worst, e/bound)
				case e > 0:
					worst = math.Inf(1)
				}
				if e != 0 {
					differ++
				}
				n++
			}
		}
	}
	return worst, differ, n
}
