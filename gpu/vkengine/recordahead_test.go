package vkengine

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/nn"
)

// TestRecordAhead runs a LoRA layer stack with attention, forward and
// backward, flushing to the device after every node's commands
// (RecordAhead(1)), at the default interval (this graph's run is shorter)
// and in one command buffer (RecordAhead(0)): the same commands in the same order with the same
// barriers between them, so every output and gradient has the same bits.
func TestRecordAhead(t *testing.T) {
	e := openEngine(t)
	s := nn.AttentionShape{Batch: 2, SeqLen: 24, Heads: 2, KVHeads: 2, HeadDim: 16}
	attn := attentionBuild(s)
	build := func(b *nn.Builder) (*G.Node, G.Nodes) {
		out, wrt := attn(b)
		x := param(b, "x2", 21, 1, true, 48, 32)
		w := param(b, "w2", 22, 0.1, false, 32, 32)
		a := param(b, "a2", 23, 0.1, true, 8, 32)
		bb := param(b, "b2", 24, 0.1, true, 32, 8)
		lin := b.AddScaled(b.Linear(x, w), b.Linear(b.Linear(x, a), bb), 2)
		return b.AddScaled(out, lin, 1), append(wrt, x, a, bb)
	}
	p := amp.DefaultPolicy(amp.BF16)
	for _, pol := range []*amp.Policy{nil, &p} {
		c := opCase{name: "record ahead", build: build, policy: pol}
		var runs []ran
		for _, every := range []int{0, 1, defaultFlushEvery} {
			e.RecordAhead(every)
			before := e.rec.Flushes()
			runs = append(runs, runVulkan(t, e, c))
			if f := e.rec.Flushes() - before; (every == 0 && f != 0) || (every == 1 && f < 10) {
				t.Fatalf("RecordAhead(%d): %d flushes in a run", every, f)
			}
		}
		e.RecordAhead(defaultFlushEvery)
		for i, r := range runs[1:] {
			for j, vals := range r.vals {
				for k, v := range vals {
					if math.Float64bits(v) != math.Float64bits(runs[0].vals[j][k]) {
						t.Fatalf("policy %v, run %d, %s[%d]: %v flushing, %v in one command buffer", pol, i+1, r.names[j], k, v, runs[0].vals[j][k])
					}
				}
			}
		}
	}
}
