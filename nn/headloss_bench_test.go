package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
)

// BenchmarkLMHeadLoss times the LM head and loss, forward and backward
// with a frozen head (as LoRA trains it), at 2048 tokens of width 256 and
// a vocabulary of 151936 (Qwen2's), unfused and fused in blocks of
// several sizes (110 tokens: 64 MiB of logits; HeadChunk: 256 MiB), on
// one thread: what each block costs beyond its share of the products is
// packing W for the two matmuls that read it.
func BenchmarkLMHeadLoss(b *testing.B) {
	const n, d, v = 2048, 256, 151936
	for _, chunk := range []int{-1, 110, HeadChunk(v), 1024} {
		name := fmt.Sprintf("fused/block=%d", chunk)
		if chunk < 0 {
			name = "unfused"
		}
		b.Run(name, func(b *testing.B) {
			bl := NewBuilder(&Engine{BLAS: blas.Native{Workers: 1}, Workers: 1}, tensor.Float32)
			rng := rand.New(rand.NewPCG(1, 1))
			x := randParam(bl, rng, "x", 1, n, d)
			wd := make([]float32, v*d)
			for i := range wd {
				wd[i] = rng.Float32()*0.2 - 0.1
			}
			w := bl.Param("w", []int{v, d}, wd, false)
			targets := make([]int, n)
			for i := range targets {
				targets[i] = rng.IntN(v)
			}
			tg := intInput(bl, "targets", targets)
			seed := G.NewScalar(bl.G, tensor.Float32, G.WithName("seed"), G.WithValue(float32(1)))
			var loss *G.Node
			if chunk < 0 {
				loss = bl.CrossEntropy(bl.Linear(x, w), tg)
			} else {
				loss = bl.LMHeadLoss(x, w, tg, seed, chunk)
			}
			if _, err := G.Backpropagate(G.Nodes{loss}, G.Nodes{seed}, G.Nodes{x}); err != nil {
				b.Fatal(err)
			}
			benchGraph(b, bl.G)
		})
	}
}
