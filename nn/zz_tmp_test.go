package nn

import (
	"math/rand/v2"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/cpufeat"
)

func TestTmpAttnCold(t *testing.T) {
	native, err := blas.NewNativeBF16(cpufeat.Detect(), 2)
	if err != nil {
		t.Skip(err)
	}
	s := AttentionShape{Batch: 8, SeqLen: 128, Heads: 8, KVHeads: 8, HeadDim: 32, Kernel: AttentionFull}
	eng := &Engine{BLAS: blas.Native{Workers: 2}, Workers: 2, BF16: native}
	n, w := s.Batch*s.SeqLen, s.Heads*s.HeadDim
	rng := rand.New(rand.NewPCG(7, 8))
	input := func() []float32 {
		x := make([]float32, n*w)
		for i := range x {
			x[i] = amp.BF16.Round(float32(rng.NormFloat64()))
		}
		return x
	}
	q, k, v, g := input(), input(), input(), input()
	dq, dk, dv := make([]float32, n*w), make([]float32, n*w), make([]float32, n*w)
	f := amp.BF16
	o := &attentionOp[float32]{opBase: opBase{eng: eng, out: f, inFm: []amp.Format{f, f, f}, wrt: []bool{true, true, true}},
		s: s, f: attnFormats{scores: f, softmax: amp.FP32, values: f}, buf: newBuffer[float32](n, w)}
	ts := make([]G.Value, 3)
	for i, x := range [][]float32{q, k, v} {
		ts[i] = tensor.New(tensor.WithShape(n, w), tensor.WithBacking(x))
	}
	flush := make([]float32, 16<<20)
	for _, cold := range []bool{false, true, false, true} {
		var tf, tb time.Duration
		for range 50 {
			if cold {
				for i := range flush {
					flush[i]++
				}
			}
			t0 := time.Now()
			o.Do(ts...)
			tf += time.Since(t0)
			if cold {
				for i := range flush {
					flush[i]++
				}
			}
			t0 = time.Now()
			o.backward([][]float32{q, k, v, g}, [][]float32{dq, dk, dv})
			tb += time.Since(t0)
		}
		t.Logf("cold %v: fwd %v bwd %v", cold, tf/50, tb/50)
	}
}
