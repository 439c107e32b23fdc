package vulkan

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// TestAttentionBadArguments: the attention kernels refuse shapes they
// cannot run and buffers that do not fit, recording nothing; the values
// themselves are tested against the CPU engine in gpu/vkengine.
func TestAttentionBadArguments(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	buf := func(floats int) *Buffer {
		b, err := d.NewBuffer(4 * floats)
		must(t, err)
		t.Cleanup(b.Free)
		return b
	}
	ok := AttentionShape{Batch: 2, SeqLen: 5, Heads: 4, KVHeads: 2, HeadDim: 8}
	q, k, v, out := buf(2*5*32), buf(2*5*16), buf(2*5*16), buf(2*5*32)
	stats, rowSum, dq, dk, dv := buf(ok.StatsLen()), buf(ok.RowSumLen()), buf(2*5*32), buf(2*5*16), buf(2*5*16)
	heads := buf(ok.HeadGradsLen())
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for _, c := range []struct {
		name string
		edit func(s *AttentionShape)
		want string
	}{
		{"groups", func(s *AttentionShape) { s.KVHeads = 3 }, "multiple of key/value heads"},
		{"window", func(s *AttentionShape) { s.Window = -1 }, "window ≥ 0"},
		{"head dim", func(s *AttentionShape) { s.HeadDim = AttentionMaxHeadDim + 1 }, "head dimension 257"},
		{"rounding", func(s *AttentionShape) { s.Softmax = Rounding(9) }, "unknown rounding 9"},
		{"q too small", func(s *AttentionShape) { s.SeqLen = 6 }, "q:"},
		{"positions", func(s *AttentionShape) { s.Positions = buf(9) }, "positions:"},
	} {
		s := ok
		c.edit(&s)
		if err := ks.AttentionForward(r, s, q, k, v, stats, out, NoRounding); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("forward, %s: %v, want an error containing %q", c.name, err, c.want)
		}
		if err := ks.AttentionBackward(r, s, q, k, v, stats, AttentionGrads{DO: out, RowSum: rowSum, DQ: dq}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("backward, %s: %v, want an error containing %q", c.name, err, c.want)
		}
	}
	if err := ks.AttentionForward(r, ok, q, k, v, buf(3), out, NoRounding); err == nil || !strings.Contains(err.Error(), "stats:") {
		t.Errorf("forward with short stats: %v", err)
	}
	if err := ks.AttentionForward(r, ok, q, k, v, stats, q, NoRounding); err == nil || !strings.Contains(err.Error(), "must not share") {
		t.Errorf("forward in place: %v", err)
	}
	for name, g := range map[string]AttentionGrads{
		"short dK":      {DO: out, RowSum: rowSum, DK: buf(10)},
		"no row sums":   {DO: out, DQ: dq},
		"dV into v":     {DO: out, RowSum: rowSum, DV: v},
		"dQ is dK":      {DO: out, RowSum: rowSum, DQ: dq, DK: dq},
		"bad rounding":  {DO: out, RowSum: rowSum, DQ: dq, DQRound: Rounding(4)},
		"short dO":      {DO: dk, RowSum: rowSum, DQ: dq},
		"row sums = dV": {DO: out, RowSum: dv, DV: dv},
		"no head grads": {DO: out, RowSum: rowSum, DK: dk},
		"short heads":   {DO: out, RowSum: rowSum, DV: dv, HeadGrads: buf(ok.HeadGradsLen() - 1)},
		"heads = dK":    {DO: out, RowSum: rowSum, DK: dk, HeadGrads: dk},
	} {
		if err := ks.AttentionBackward(r, ok, q, k, v, stats, g); err == nil {
			t.Errorf("backward, %s: no error", name)
		}
	}
	// A device with less shared memory than the kernels declare.
	have := d.Physical.MaxSharedMemory
	d.Physical.MaxSharedMemory = 16384
	if err := ks.AttentionForward(r, ok, q, k, v, stats, out, NoRounding); err == nil || !strings.Contains(err.Error(), "shared memory") {
		t.Errorf("forward with 16 KiB of shared memory: %v", err)
	}
	d.Physical.MaxSharedMemory = have
	if r.Len() != 0 {
		t.Errorf("refused calls recorded %d commands", r.Len())
	}
	must(t, ks.AttentionForward(r, ok, q, k, v, stats, out, RoundBF16))
	must(t, ks.AttentionBackward(r, ok, q, k, v, stats, AttentionGrads{DO: out, RowSum: rowSum, HeadGrads: heads, DQ: dq, DK: dk, DV: dv}))
	if r.Len() != 4 {
		t.Errorf("forward and backward recorded %d dispatches, want 4 (forward, dQ, the heads' dK and dV, their sum)", r.Len())
	}
	must(t, r.Submit())
	// Without grouping the dK/dV pass writes the gradients itself and
	// needs no head gradients.
	mha := AttentionShape{Batch: 2, SeqLen: 5, Heads: 2, KVHeads: 2, HeadDim: 8}
	if n := mha.HeadGradsLen(); n != 0 {
		t.Errorf("HeadGradsLen without grouping: %d, want 0", n)
	}
	must(t, ks.AttentionBackward(r, mha, q, k, v, stats, AttentionGrads{DO: dk, RowSum: rowSum, DK: dq, DV: out}))
	if r.Len() != 2 {
		t.Errorf("backward without grouping recorded %d dispatches, want 2", r.Len())
	}
	must(t, r.Submit())
}

// BenchmarkAttention times each attention dispatch at a TinyLlama-1.1B
// layer's shape (one sequence of 2048 tokens, 32 query heads of 64, 4
// key/value heads; on a CPU device such as lavapipe 256 tokens), with
// the default bf16 policy's rounding points:
//   - forward: AttentionForward, 3 HeadDim-long products per causal
//     query-key pair (the scores twice, P·V);
//   - dq: AttentionBackward for dQ alone, the row-sum pass, 5 (scores
//     and dP twice, dS·K);
//   - backward: AttentionBackward for dQ, dK and dV, all three
//     dispatches, 9 (dq's 5, then scores, dP, Pᵀ·dO and dSᵀ·Q per key
//     block and query head; the heads' sum adds no products).
//
// A product is 2·HeadDim flops; GFLOP/op is the flops a run executes,
// GFLOP/s those over the time, so the dK/dV pass alone takes backward's
// time less dq's for 4 products (the counts of the scores computed again;
// the tensor-core kernels keep them, so they execute fewer: compare
// times). Each runs on the scalar kernel ("scalar") and, where the device
// runs them, on the tensor-core kernels ("coopmat": the products'
// operands are bf16 values, Operands; "coopmat_recomputed": with the
// scores computed again, not kept; "coopmat_split", backward only: with
// the dK/dV kernel split in two, KernelOptions.SplitDKV).
func BenchmarkAttention(b *testing.B) {
	e, ks := openKernels(b)
	d := e.dev
	s := AttentionShape{Batch: 1, SeqLen: 2048, Heads: 32, KVHeads: 4, HeadDim: 64, Scores: RoundBF16, Values: RoundBF16, Operands: RoundBF16}
	if d.Physical.Type == TypeCPU {
		s.SeqLen = 256
	}
	qn, kn := s.Batch*s.SeqLen*s.Heads*s.HeadDim, s.Batch*s.SeqLen*s.KVHeads*s.HeadDim
	filled := func(n int, seed uint64) *Buffer {
		buf, err := d.NewBuffer(4 * n)
		must(b, err)
		b.Cleanup(buf.Free)
		rng := rand.New(rand.NewPCG(seed, 1))
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = amp.BF16.Round(float32(rng.NormFloat64())) // the values Operands promises
		}
		must(b, buf.WriteFloat32(0, xs))
		return buf
	}
	q, k, v, dO := filled(qn, 1), filled(kn, 2), filled(kn, 3), filled(qn, 4)
	stats, rowSum, out := filled(s.StatsLen(), 5), filled(s.RowSumLen(), 6), filled(qn, 7)
	dq, dk, dv, heads := filled(qn, 8), filled(kn, 9), filled(kn, 10), filled(max(1, s.HeadGradsLen()), 11)
	r, err := d.NewRecorder()
	must(b, err)
	defer r.Close()
	must(b, ks.AttentionForward(r, s, q, k, v, stats, out, RoundBF16)) // the stats the backward reads
	must(b, r.Submit())
	pairs := float64(s.Batch*s.Heads) * float64(s.SeqLen) * float64(s.SeqLen+1) / 2
	product := 2 * float64(s.HeadDim) * pairs
	for _, c := range []struct {
		name     string
		products float64
		record   func() error
	}{
		{"forward", 3, func() error { return ks.AttentionForward(r, s, q, k, v, stats, out, RoundBF16) }},
		{"dq", 5, func() error {
			return ks.AttentionBackward(r, s, q, k, v, stats, AttentionGrads{DO: dO, RowSum: rowSum, DQ: dq, DQRound: RoundBF16})
		}},
		{"backward", 9, func() error {
			return ks.AttentionBackward(r, s, q, k, v, stats, AttentionGrads{DO: dO, RowSum: rowSum, HeadGrads: heads, DQ: dq, DK: dk, DV: dv,
				DQRound: RoundBF16, DKRound: RoundBF16, DVRound: RoundBF16, RoundHeadsK: true, RoundHeadsV: true})
		}},
	} {
		builds, keepMax, split := ks.attn.builds, ks.attnKeepMax, ks.splitDKV
		for _, kernel := range []string{"scalar", "coopmat", "coopmat_recomputed", "coopmat_split"} {
			if kernel == "coopmat_split" && c.name != "backward" {
				continue // the split is of the dK/dV kernel
			}
			ks.attnKeepMax, ks.splitDKV = keepMax, kernel == "coopmat_split"
			if kernel == "scalar" {
				ks.attn.builds = nil
			} else if ks.attn.builds = builds; s.tensorFormat() == NoRounding || builds[s.tensorFormat()] == (attnBuild{}) {
				continue // no tensor-core attention here
			}
			if kernel == "coopmat_recomputed" {
				ks.attnKeepMax = 0 // the scores computed again, not kept
			}
			b.Run(fmt.Sprintf("%s_T%d_H%d_KV%d_D%d_%s", c.name, s.SeqLen, s.Heads, s.KVHeads, s.HeadDim, kernel), func(b *testing.B) {
				must(b, c.record()) // warm: the pipeline compiles on first use
				must(b, r.Submit())
				b.ResetTimer()
				for b.Loop() {
					must(b, c.record())
					must(b, r.Submit())
				}
				flops := c.products * product
				b.ReportMetric(flops/1e9, "GFLOP/op")
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
		ks.attn.builds, ks.attnKeepMax, ks.splitDKV = builds, keepMax, split
	}
}
