package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// BenchmarkAttentionStep times attention's forward and backward pass, at
// the shipped model's shape (8 query heads sharing 4 key/value heads), in
// fp32 and in bf16, where each head's dK and dV are rounded before the
// group sum.
func BenchmarkAttentionStep(b *testing.B) {
	s := AttentionShape{Batch: 8, SeqLen: 128, Heads: 8, KVHeads: 4, HeadDim: 32}
	for _, f := range []amp.Format{amp.FP32, amp.BF16} {
		b.Run(f.String(), func(b *testing.B) {
			bl := NewBuilder(&Engine{BLAS: blas.Native{}, Workers: 2}, tensor.Float32)
			if f != amp.FP32 {
				p := amp.DefaultPolicy(f)
				bl.Policy = &p
			}
			rng := rand.New(rand.NewPCG(1, 1))
			n := s.Batch * s.SeqLen
			q := randParam(bl, rng, "q", 1, n, s.Heads*s.HeadDim)
			k := randParam(bl, rng, "k", 1, n, s.KVHeads*s.HeadDim)
			v := randParam(bl, rng, "v", 1, n, s.KVHeads*s.HeadDim)
			if _, err := G.Grad(G.Must(G.Sum(bl.Attention(q, k, v, s))), q, k, v); err != nil {
				b.Fatal(err)
			}
			vm := G.NewTapeMachine(bl.G)
			defer vm.Close()
			for b.Loop() {
				vm.Reset()
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAttentionKernels times one forward and backward pass of each
// attention kernel at long sequence lengths (batch 1, 8 heads of 64, as
// the CLI's bench model at --dim 512 --heads 8), in fp32. saved-MiB is
// what the op keeps from the forward to the backward pass: the full
// kernel's probabilities, B·Heads·T² values, or the tiled kernel's two
// values per query row. B/op counts what a step allocates besides.
func BenchmarkAttentionKernels(b *testing.B) {
	for _, seq := range []int{256, 512, 1024, 2048} {
		for _, kind := range []AttentionKernel{AttentionFull, AttentionTiled} {
			name := map[AttentionKernel]string{AttentionFull: "full", AttentionTiled: "tiled"}[kind]
			b.Run(fmt.Sprintf("T%d/%s", seq, name), func(b *testing.B) {
				s := AttentionShape{Batch: 1, SeqLen: seq, Heads: 8, KVHeads: 8, HeadDim: 64, Kernel: kind}
				bl := NewBuilder(&Engine{BLAS: blas.Native{}, Workers: 2}, tensor.Float32)
				rng := rand.New(rand.NewPCG(1, 1))
				n := s.Batch * s.SeqLen
				q := randParam(bl, rng, "q", 1, n, s.Heads*s.HeadDim)
				k := randParam(bl, rng, "k", 1, n, s.KVHeads*s.HeadDim)
				v := randParam(bl, rng, "v", 1, n, s.KVHeads*s.HeadDim)
				out := bl.Attention(q, k, v, s)
				if _, err := G.Grad(G.Must(G.Sum(out)), q, k, v); err != nil {
					b.Fatal(err)
				}
				vm := G.NewTapeMachine(bl.G)
				defer vm.Close()
				b.ReportAllocs()
				for b.Loop() {
					vm.Reset()
					if err := vm.RunAll(); err != nil {
						b.Fatal(err)
					}
				}
				var saved int
				switch op := out.Op().(type) {
				case *attentionOp[float32]:
					saved = len(op.probs)
				case *attentionTiledOp[float32]:
					saved = len(op.stats)
				}
				b.ReportMetric(float64(saved*4)/(1<<20), "saved-MiB")
			})
		}
	}
}
