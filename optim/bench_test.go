package optim

import (
	"math/rand/v2"
	"testing"
)

// benchParams returns n elements split over four params, with random grads.
func benchParams(n int) []*Param {
	r := rand.New(rand.NewPCG(1, 2))
	ps := make([]*Param, 4)
	for i := range ps {
		p := &Param{Name: "p" + string(rune('0'+i)), Value: make([]float32, n/4), Grad: make([]float32, n/4)}
		for j := range p.Value {
			p.Value[j] = float32(r.NormFloat64())
			p.Grad[j] = float32(r.NormFloat64() * 1e-3)
		}
		ps[i] = p
	}
	return ps
}

func BenchmarkAdamW(b *testing.B) {
	const n = 1 << 20
	ps := benchParams(n)
	o := mustAdamW(b)
	b.SetBytes(n * 4 * 4) // read+write param and both moments, read grad: ~4 fp32 streams
	for b.Loop() {
		if err := o.Step(ps, 1e-4); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/param")
}

func BenchmarkSGD(b *testing.B) {
	const n = 1 << 20
	ps := benchParams(n)
	o, err := NewSGD(SGDConfig{Momentum: 0.9, WeightDecay: 1e-4, Nesterov: true})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := o.Step(ps, 1e-3); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/param")
}

func BenchmarkClipGlobalNorm(b *testing.B) {
	const n = 1 << 20
	ps := benchParams(n)
	for b.Loop() {
		ClipGlobalNorm(ps, 1e9) // never clips: measures the norm
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/param")
}
