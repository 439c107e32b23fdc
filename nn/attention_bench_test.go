package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/cpufeat"
)

// BenchmarkAttentionStep times attention's forward and backward pass, at
// the shipped model's shape (8 query heads sharing 4 key/value heads), in
// fp32 and in bf16, where each head's dK and dV are rounded before the
// group sum.
func BenchmarkAttentionStep(b *testing.B) {
	s := AttentionShape{Batch: 8, SeqLen: 128, Heads: 8, KVHeads: 4, HeadDim: 32}
	for _, f := range []amp.Format{amp.FP32, amp.BF16} {
		b.Run(f.String(), func(b *testing.B) {
			var p *amp.Policy
			if f != amp.FP32 {
				dp := amp.DefaultPolicy(f)
				p = &dp
			}
			benchAttention(b, &Engine{BLAS: blas.Native{}, Workers: 2}, p, s)
		})
	}
}

// benchAttention times attention's forward and backward pass (every
// input's gradient) of shape s on eng under policy p (nil: fp32), on
// seeded random inputs, and returns attention's node.
func benchAttention(b *testing.B, eng *Engine, p *amp.Policy, s AttentionShape) *G.Node {
	bl, out, err := attentionStep(eng, p, s, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		b.Fatal(err)
	}
	benchGraph(b, bl.G)
	return out
}

// attentionStep builds attention of shape s and the gradients of its
// output's sum with respect to q, k and v, on eng under policy p (nil:
// fp32), with inputs in [-1, 1) drawn from rng; it returns attention's
// node.
func attentionStep(eng *Engine, p *amp.Policy, s AttentionShape, rng *rand.Rand) (*Builder, *G.Node, error) {
	bl := NewBuilder(eng, tensor.Float32)
	bl.Policy = p
	q, k, v := attnInputs(bl, rng, s)
	out := bl.Attention(q, k, v, s)
	_, err := G.Grad(G.Must(G.Sum(out)), q, k, v)
	return bl, out, err
}

// benchGraph runs graph g once per iteration of benchmark b.
func benchGraph(b *testing.B, g *G.ExprGraph) {
	vm := G.NewTapeMachine(g)
	defer vm.Close()
	for b.Loop() {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
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
				b.ReportAllocs()
				out := benchAttention(b, &Engine{BLAS: blas.Native{}, Workers: 2}, nil, s)
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

// BenchmarkAttentionBF16 times one forward and backward pass of attention
// at SmolLM2-135M's shape (512 tokens, 9 query heads sharing 3 key/value
// heads of 64) under the bf16 policy, 2 workers: its products emulated in
// the fp32 kernels of native and of oneDNN, and on the bf16 GEMMs that run
// on the CPU's bf16 units, the native kernel (AMX where the CPU has it and
// the OS grants it, else VDPBF16PS) and oneDNN's. A GEMM that does not run
// here is skipped, with the reason: the Go models of the kernels, which
// run anywhere, are far too slow to time. GFLOP/s counts the products'
// multiply-adds, those the tiled kernel skips above the diagonal too.
//
//	go test ./nn -run '^$' -bench AttentionBF16 -benchtime 3x
func BenchmarkAttentionBF16(b *testing.B) {
	s := AttentionShape{Batch: 1, SeqLen: 512, Heads: 9, KVHeads: 3, HeadDim: 64}
	native, nativeErr := blas.NewNativeBF16(cpufeat.Detect(), 2)
	dnn, dnnErr := blas.OpenOneDNN(2)
	dnnBF16Err := dnnErr
	if dnnErr == nil && !dnn.BF16() {
		dnnBF16Err = fmt.Errorf("oneDNN loads but its bf16 GEMM needs AVX-512 (%s)", dnn.Name())
	}
	gemms := []struct {
		name string
		be   func() (blas.Backend, error)
		bf16 func() (blas.BF16Gemmer, error)
	}{
		{"emulated-native", func() (blas.Backend, error) { return blas.Native{Workers: 2}, nil }, nil},
		{"emulated-onednn", func() (blas.Backend, error) { return dnn, dnnErr }, nil},
		{"native-bf16", func() (blas.Backend, error) { return blas.Native{Workers: 2}, nil }, func() (blas.BF16Gemmer, error) { return native, nativeErr }},
		{"onednn-bf16", func() (blas.Backend, error) { return dnn, dnnErr }, func() (blas.BF16Gemmer, error) { return dnn, dnnBF16Err }},
	}
	for _, kind := range []AttentionKernel{AttentionFull, AttentionTiled} {
		kname := map[AttentionKernel]string{AttentionFull: "full", AttentionTiled: "tiled"}[kind]
		for _, g := range gemms {
			b.Run(fmt.Sprintf("T%d/%s/%s", s.SeqLen, kname, g.name), func(b *testing.B) {
				be, err := g.be()
				if err != nil {
					b.Skip(err)
				}
				eng := &Engine{BLAS: be, Workers: 2}
				if g.bf16 != nil {
					if eng.BF16, err = g.bf16(); err != nil {
						b.Skip(err)
					}
					b.Logf("%s", eng.BF16.Name())
				}
				s := s
				s.Kernel = kind
				p := amp.DefaultPolicy(amp.BF16)
				benchAttention(b, eng, &p, s)
				// six products of T×T×HeadDim per head
				macs := 6 * float64(s.Batch*s.Heads) * float64(s.SeqLen) * float64(s.SeqLen) * float64(s.HeadDim)
				b.ReportMetric(2*macs*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkAttentionPassesBF16 times the full kernel's forward pass and
// backward pass alone (no graph around them) under the bf16 policy, on
// the native bf16 GEMM, 2 workers, at the bench and mid shapes of
// scripts/bench_vs_torch.sh: one layer's attention. It is skipped where
// the CPU has no bf16 units, with the reason.
//
//	go test ./nn -run '^$' -bench AttentionPassesBF16
func BenchmarkAttentionPassesBF16(b *testing.B) {
	native, err := blas.NewNativeBF16(cpufeat.Detect(), 2)
	if err != nil {
		b.Skip(err)
	}
	for _, sh := range []struct {
		name string
		s    AttentionShape
	}{
		{"bench", AttentionShape{Batch: 8, SeqLen: 128, Heads: 8, KVHeads: 8, HeadDim: 32, Kernel: AttentionFull}},
		{"mid", AttentionShape{Batch: 4, SeqLen: 256, Heads: 8, KVHeads: 8, HeadDim: 64, Kernel: AttentionFull}},
	} {
		s := sh.s
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
		b.Run(sh.name+"/forward", func(b *testing.B) {
			for b.Loop() {
				if _, err := o.Do(ts...); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(sh.name+"/backward", func(b *testing.B) {
			if _, err := o.Do(ts...); err != nil { // the probabilities it reads
				b.Fatal(err)
			}
			for b.Loop() {
				if err := o.backward([][]float32{q, k, v, g}, nil, [][]float32{dq, dk, dv}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
