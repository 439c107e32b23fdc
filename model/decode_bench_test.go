package model

import (
	"testing"

	"github.com/mixtune/mixtune/blas"
)

// BenchmarkDecode generates greedily from a randomly initialized model the
// size of a small real one's layer (hidden 512, 8 heads over 4 key/value
// heads, 4 layers, a 4096-token vocabulary): a 16-token prompt, then 48
// tokens, one sequence and eight at a time. It reports new tokens per
// second, the figure `mixtune generate` and task accuracy depend on.
func BenchmarkDecode(b *testing.B) {
	c := Config{Family: Llama, VocabSize: 4096, HiddenSize: 512, IntermediateSize: 1376, NumHiddenLayers: 4,
		NumAttentionHeads: 8, NumKeyValueHeads: 4, MaxPositionEmbeddings: 512, RMSNormEps: 1e-5, RopeTheta: 10000, EOSTokenID: -1}
	m, err := New(c, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, batch := range []int{1, 8} {
		b.Run(map[int]string{1: "batch1", 8: "batch8"}[batch], func(b *testing.B) {
			prompts := make([][]int, batch)
			for i := range prompts {
				for j := 0; j < 16; j++ {
					prompts[i] = append(prompts[i], (i*31+j*7)%c.VocabSize)
				}
			}
			const maxNew = 48
			d := NewDecoder(m, nil, blas.Native{})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := d.Generate(prompts, maxNew, Sampling{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch*maxNew)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
