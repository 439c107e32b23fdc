package nn

import (
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
