package vulkan

import (
	"strings"
	"testing"
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
	} {
		if err := ks.AttentionBackward(r, ok, q, k, v, stats, g); err == nil {
			t.Errorf("backward, %s: no error", name)
		}
	}
	if r.Len() != 0 {
		t.Errorf("refused calls recorded %d commands", r.Len())
	}
	must(t, ks.AttentionForward(r, ok, q, k, v, stats, out, RoundBF16))
	must(t, ks.AttentionBackward(r, ok, q, k, v, stats, AttentionGrads{DO: out, RowSum: rowSum, DQ: dq, DK: dk, DV: dv}))
	if r.Len() != 3 {
		t.Errorf("forward and backward recorded %d dispatches, want 3", r.Len())
	}
	must(t, r.Submit())
}
