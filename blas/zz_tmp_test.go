package blas

import (
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/cpufeat"
)

// the LoRA products of the bench shape as nn calls them
func BenchmarkTmpLoRA(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := func(n int) []float32 { x, _ := bf16Rand(rng, n); return x }
	x, a, bw, xa, g, dxa := r(1024*256), r(8*256), r(256*8), r(1024*8), r(1024*256), r(1024*8)
	c := make([]float32, 1024*256)
	nb, err := NewNativeBF16(cpufeat.Detect(), 2)
	if err != nil {
		b.Skip(err)
	}
	rnd := func(c []float32, ldc int) func(i0, i1, j0, j1 int) {
		return func(i0, i1, j0, j1 int) {
			for i := i0; i < i1; i++ {
				amp.BF16.RoundSlice(c[i*ldc+j0 : i*ldc+j1])
			}
		}
	}
	pa := nb.PackB(nil, true, 256, 8, BF16Matrix{F32: a, Ld: 256})
	pbw := nb.PackB(nil, true, 8, 256, BF16Matrix{F32: bw, Ld: 8})
	pbdx := nb.PackB(nil, false, 256, 8, BF16Matrix{F32: bw, Ld: 8})
	pad := nb.PackB(nil, false, 8, 256, BF16Matrix{F32: a, Ld: 256})
	cases := []struct {
		name string
		f    func()
	}{
		{"Afwd", func() { nb.Gemm(false, true, 1024, 8, 256, 1, BF16Matrix{F32: x, Ld: 256}, BF16Matrix{F32: a, Ld: 256}, pa, 0, c, 8, rnd(c, 8)) }},
		{"Bfwd", func() { nb.Gemm(false, true, 1024, 256, 8, 1, BF16Matrix{F32: xa, Ld: 8}, BF16Matrix{F32: bw, Ld: 8}, pbw, 0, c, 256, rnd(c, 256)) }},
		{"Bdx", func() { nb.Gemm(false, false, 1024, 8, 256, 1, BF16Matrix{F32: g, Ld: 256}, BF16Matrix{F32: bw, Ld: 8}, pbdx, 0, c, 8, rnd(c, 8)) }},
		{"BdW", func() { nb.Gemm(true, false, 256, 8, 1024, 1, BF16Matrix{F32: g, Ld: 256}, BF16Matrix{F32: xa, Ld: 8}, nil, 0, c, 8, rnd(c, 8)) }},
		{"Adx", func() { nb.Gemm(false, false, 1024, 256, 8, 1, BF16Matrix{F32: dxa, Ld: 8}, BF16Matrix{F32: a, Ld: 256}, pad, 0, c, 256, rnd(c, 256)) }},
		{"AdW", func() { nb.Gemm(true, false, 8, 256, 1024, 1, BF16Matrix{F32: dxa, Ld: 8}, BF16Matrix{F32: x, Ld: 256}, nil, 0, c, 256, rnd(c, 256)) }},
	}
	for _, cs := range cases {
		b.Run(cs.name, func(b *testing.B) {
			for b.Loop() {
				cs.f()
			}
		})
	}
}
