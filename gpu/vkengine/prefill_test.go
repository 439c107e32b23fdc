package vkengine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
)

func TestPrefillRun(t *testing.T) {
	for _, tc := range []struct {
		seq, pos []int
		want     bool
	}{
		{[]int{0, 0, 0, 1, 1}, []int{0, 1, 2, 0, 1}, true},
		{[]int{2}, []int{0}, true},
		{[]int{0, 1, 2}, []int{0, 0, 0}, true},        // one-token prompts
		{[]int{0, 0, 1}, []int{3, 4, 0}, false},       // a sequence continued
		{[]int{0, 1, 0}, []int{0, 0, 1}, false},       // a sequence's rows apart
		{[]int{0, 0}, []int{0, 2}, false},             // a position skipped
		{[]int{0, 1, 1}, []int{0, 0, 1}, true},        // two sequences, one after the other
		{[]int{0, 0, 0, 0}, []int{0, 1, 0, 1}, false}, // a sequence started twice
		{nil, nil, false},
	} {
		if got := prefillRun(tc.seq, tc.pos); got != tc.want {
			t.Errorf("seq %v pos %v: %v, want %v", tc.seq, tc.pos, got, tc.want)
		}
	}
}

// TestPrefillOnTrainingKernel: a run that starts its sequences (three
// prompts of 50, 1 and 70 tokens) attends on the training kernel, packed
// documents over the run's own keys, with memory for each row's
// statistics where the cache kernel takes every row's scores over the
// whole capacity; the next run (a token each) then reads the keys and
// values the prefill appended, on the cache kernel. Both runs, with and
// without a window, fp32 and bf16 rounding points, against the CPU
// engine's op within 1e-5 of the largest output (in bf16, a rounding
// point's value one fp32 ulp apart may round to a neighbouring bf16
// value on one engine: within 2^-7 of the largest output), and against
// the same runs on the cache kernel alone.
func TestPrefillOnTrainingKernel(t *testing.T) {
	e := openEngine(t)
	const (
		H, KVH, D = 4, 2, 16
		qw, kw    = H * D, KVH * D
	)
	prompts := []int{50, 1, 70}
	for _, window := range []int{0, 16} {
		for _, f := range []amp.Format{amp.FP32, amp.BF16} {
			t.Run(fmt.Sprintf("window%d/%v", window, f), func(t *testing.T) {
				decode := func(t *testing.T, noPrefill bool) ([][]float32, *DecodeCache) {
					rng := rand.New(rand.NewPCG(11, 3))
					c := nn.NewKVCache(1, kw, nn.RopeInvFreq(D, 10000))
					for range prompts {
						c.Add()
					}
					c.Reserve(80)
					dc := NewDecodeCache(e, c)
					dc.noPrefill = noPrefill
					var outs [][]float32
					for run := range 2 {
						var seqs []int
						for s, n := range prompts {
							if run == 1 {
								n = 1
							}
							for range n {
								seqs = append(seqs, s)
							}
						}
						if err := c.SetRows(seqs); err != nil {
							t.Fatal(err)
						}
						rows := len(seqs)
						b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
						if f != amp.FP32 {
							p := amp.DefaultPolicy(f)
							b.Policy = &p
						}
						in := func(name string, w int) *G.Node {
							x := make([]float32, rows*w)
							for i := range x {
								x[i] = float32(rng.NormFloat64())
							}
							n := b.Input(name, rows, w)
							if err := G.Let(n, tensor.New(tensor.WithShape(rows, w), tensor.WithBacking(x))); err != nil {
								t.Fatal(err)
							}
							return n
						}
						qn, kn, vn := in("q", qw), in("k", kw), in("v", kw)
						out := b.Attention(qn, kn, vn, nn.AttentionShape{Batch: rows, SeqLen: 1, Heads: H, KVHeads: KVH, HeadDim: D, Window: window, Cache: c, Layer: 0})
						p, err := e.Compile(b.G, b.IsParam, WithCache(dc), PlanMemory(out), PoisonMemory())
						if err != nil {
							t.Fatal(err)
						}
						if err := p.Run(nn.Pass{}); err != nil {
							t.Fatal(err)
						}
						if run == 0 && dc.prefill == noPrefill {
							t.Fatalf("noPrefill %v: the prompts' run took the training kernel: %v", noPrefill, dc.prefill)
						}
						got := make([]float32, rows*qw)
						if err := p.Read(out, got); err != nil {
							t.Fatal(err)
						}
						p.Close()
						diff, top := maxDiff(got, cpuValue(t, b, out))
						tol := 1e-5
						if f != amp.FP32 {
							tol = 0x1p-7
						}
						if !(diff <= tol*top) {
							t.Fatalf("noPrefill %v, run %d: the device's outputs differ from the CPU's by %.3g (largest %.3g)", noPrefill, run, diff, top)
						}
						outs = append(outs, got)
					}
					return outs, dc
				}
				tiled, dcT := decode(t, false)
				defer dcT.Close()
				cached, dcC := decode(t, true)
				defer dcC.Close()
				if dcT.scratch != nil && dcT.scratch.Size() >= dcC.scratch.Size() {
					t.Errorf("the prefill's scores buffer: %d bytes, the cache kernel's %d", dcT.scratch.Size(), dcC.scratch.Size())
				}
				rows := 0
				for _, n := range prompts {
					rows += n
				}
				t.Logf("prompts' run: statistics %d bytes where the cache kernel's scores take %d (%d rows × %d heads × %d tokens)", dcT.stats.Size(), dcC.scratch.Size(), rows, H, dcC.cap)
				for run := range tiled {
					diff, top := maxDiff(tiled[run], cached[run])
					tol := 1e-5
					if f != amp.FP32 {
						tol = 0x1p-7
					}
					if !(diff <= tol*top) {
						t.Errorf("run %d: the training kernel's outputs differ from the cache kernel's by %.3g (largest %.3g)", run, diff, top)
					}
				}
			})
		}
	}
}

// BenchmarkPrefill times one layer's attention over a prompt of T tokens
// (8 heads of 64, 2 key/value heads) on the training kernel ("tiled") and
// on the cache kernel ("cache"), the keys appended in both.
func BenchmarkPrefill(b *testing.B) {
	e := openEngine(b)
	const H, KVH, D = 8, 2, 64
	for _, T := range []int{256, 1024} {
		for _, kernel := range []string{"tiled", "cache"} {
			b.Run(fmt.Sprintf("T%d/%s", T, kernel), func(b *testing.B) {
				c := nn.NewKVCache(1, KVH*D, nn.RopeInvFreq(D, 10000))
				c.Add()
				c.Reserve(T)
				dc := NewDecodeCache(e, c)
				defer dc.Close()
				dc.noPrefill = kernel == "cache"
				seqs := make([]int, T)
				if err := c.SetRows(seqs); err != nil {
					b.Fatal(err)
				}
				bld := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
				in := func(name string, w int) *G.Node {
					n := bld.Input(name, T, w)
					x := make([]float32, T*w)
					for i := range x {
						x[i] = float32(i%13)/13 - 0.5
					}
					if err := G.Let(n, tensor.New(tensor.WithShape(T, w), tensor.WithBacking(x))); err != nil {
						b.Fatal(err)
					}
					return n
				}
				out := bld.Attention(in("q", H*D), in("k", KVH*D), in("v", KVH*D), nn.AttentionShape{Batch: T, SeqLen: 1, Heads: H, KVHeads: KVH, HeadDim: D, Cache: c, Layer: 0})
				p, err := e.Compile(bld.G, bld.IsParam, WithCache(dc), PlanMemory(out))
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				if err := p.Run(nn.Pass{}); err != nil { // warm: the pipelines compile
					b.Fatal(err)
				}
				b.ResetTimer()
				for b.Loop() {
					if err := p.Run(nn.Pass{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
