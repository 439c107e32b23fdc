package nn

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// attentionOutput runs one attention op on q, k, v ([rows, width] each) in a
// float32 graph and returns its output.
func attentionOutput(t *testing.T, e *Engine, policy *amp.Policy, s AttentionShape, q, k, v []float32) []float64 {
	t.Helper()
	b := NewBuilder(e, tensor.Float32)
	b.Policy = policy
	n := len(q) / (s.Heads * s.HeadDim)
	out := b.Attention(b.Param("q", []int{n, s.Heads * s.HeadDim}, q, false),
		b.Param("k", []int{n, s.KVHeads * s.HeadDim}, k, false), b.Param("v", []int{n, s.KVHeads * s.HeadDim}, v, false), s)
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	var r []float64
	for _, x := range out.Value().Data().([]float32) {
		r = append(r, float64(x))
	}
	return r
}

// Attention through a KVCache is the training op's computation: two
// sequences fed in runs that mix them (a prefix of each, then a token of
// each at a time, then the rest together), each run's output rows are
// the training op's rows at those positions. GQA, MQA and a sliding
// window, past the native backend's k-blocking (256 keys).
//
// On the native backend, whose every element of a product is summed in
// an order that depends on k alone, and where the keys training weights
// by 0 beyond a row's position add exact zeros, the rows are the training
// op's bits, in fp32 and under the bf16 policy, and so are they with
// attention's bf16 products on the native bf16 GEMM. On another backend
// (gonum, OpenBLAS where it loads) the products may sum in other orders;
// in fp32 the bound follows from the standard one for a sum of k
// products, |error| ≤ γ_k·Σ|a·b| with γ_k = k·u/(1−k·u), u = 2⁻²⁴, for
// each of the two runs:
//
//   - a score (hd products and the scale) differs by at most
//     Δs = 2·γ_{hd+1}·scale·hd·max|q|·max|k|, which moves each
//     probability by a factor within e^{±2Δs};
//   - each softmax is within ρ = (2·max|s| + 6)·u + γ_T of exact
//     relatively (the max subtracted, exp to 4 ulps, the sum, the
//     reciprocal and the product), each weighted sum of values within
//     γ_T·Σp|v|;
//
// so an output differs by at most (e^{2Δs} − 1 + 2ρ + 2γ_T)·max|v|, with
// 1% for second-order terms. Under a 16-bit policy another sum order may
// round to the neighbouring 16-bit value, as TestTiledAttentionMatchesFull
// describes; there the native bits are the check.
func TestCachedAttentionMatchesAttention(t *testing.T) {
	bf16 := amp.DefaultPolicy(amp.BF16)
	cases := []struct {
		name string
		s    AttentionShape
	}{
		{"mha", AttentionShape{Batch: 2, SeqLen: 9, Heads: 2, KVHeads: 2, HeadDim: 4}},
		{"gqa window", AttentionShape{Batch: 2, SeqLen: 40, Heads: 4, KVHeads: 2, HeadDim: 8, Window: 7}},
		{"mqa long", AttentionShape{Batch: 2, SeqLen: 300, Heads: 3, KVHeads: 1, HeadDim: 16}},
	}
	// The engines and the policies each runs: the native backend in fp32
	// and bf16, the others in fp32 (see above), and the native backend
	// with each native bf16 GEMM that runs here (real or the Go models of
	// its kernels, whose sums' order also depends on k alone) in bf16,
	// where attention's products run on that GEMM.
	type engine struct {
		be       blas.Backend
		bf16     blas.BF16Gemmer
		policies []*amp.Policy
	}
	engines := []engine{{blas.Native{Workers: 2}, nil, []*amp.Policy{nil, &bf16}}, {blas.Gonum{}, nil, []*amp.Policy{nil}}}
	if ob, err := blas.OpenOpenBLAS(1); err == nil {
		engines = append(engines, engine{ob, nil, []*amp.Policy{nil}})
	} else {
		t.Logf("OpenBLAS not checked: %v", err)
	}
	for _, g := range realBF16Gemmers(t, 2) {
		if nb, ok := g.(*blas.NativeBF16); ok {
			engines = append(engines, engine{blas.Native{Workers: 2}, &productCounter{NativeBF16: nb}, []*amp.Policy{&bf16}})
		}
	}
	const u = 0x1p-24
	gamma := func(k int) float64 { return float64(k) * u / (1 - float64(k)*u) }
	for _, tc := range cases {
		for _, en := range engines {
			be := en.be
			_, native := be.(blas.Native)
			eng := func() *Engine { return &Engine{BLAS: be, BF16: en.bf16, Workers: 2} }
			for _, policy := range en.policies {
				name := tc.name + "/" + be.Name() + "/fp32"
				if policy != nil {
					name = tc.name + "/" + be.Name() + "/bf16"
				}
				if en.bf16 != nil {
					name = tc.name + "/" + en.bf16.Name() + "/bf16"
				}
				t.Run(name, func(t *testing.T) {
					s, T := tc.s, tc.s.SeqLen
					qw, kw := s.Heads*s.HeadDim, s.KVHeads*s.HeadDim
					rng := rand.New(rand.NewPCG(3, uint64(T)))
					rnd := func(n int) []float32 {
						x := make([]float32, n)
						for i := range x {
							x[i] = rng.Float32()*4 - 2 // within ±maxAbs
						}
						return x
					}
					q, k, v := rnd(2*T*qw), rnd(2*T*kw), rnd(2*T*kw)
					want := attentionOutput(t, eng(), policy, s, q, k, v)
					const maxAbs = 2 // of every q, k and v
					scale := 1 / math.Sqrt(float64(s.HeadDim))
					maxS := scale * float64(s.HeadDim) * maxAbs * maxAbs
					ds := 2 * gamma(s.HeadDim+1) * maxS
					rho := (2*maxS+6)*u + gamma(T)
					bound := 1.01 * (math.Expm1(2*ds) + 2*rho + 2*gamma(T)) * maxAbs

					c := NewKVCache(1, kw, RopeInvFreq(s.HeadDim, 10000))
					c.Add()
					c.Add()
					// runs of (sequence, tokens) pairs
					runs := [][][2]int{{{0, 3}, {1, 5}}}
					for range 4 {
						runs = append(runs, [][2]int{{1, 1}, {0, 1}})
					}
					runs = append(runs, [][2]int{{0, T - 7}, {1, T - 9}})
					var worst float64
					for ri, run := range runs {
						var seqs, src []int // src: each row's row in the training batch
						next := []int{c.Len(0), c.Len(1)}
						for _, sn := range run {
							for range sn[1] {
								seqs, src = append(seqs, sn[0]), append(src, sn[0]*T+next[sn[0]])
								next[sn[0]]++
							}
						}
						if err := c.SetRows(seqs); err != nil {
							t.Fatal(err)
						}
						n := len(seqs)
						pick := func(x []float32, w int) []float32 {
							var r []float32
							for _, i := range src {
								r = append(r, x[i*w:(i+1)*w]...)
							}
							return r
						}
						cs := s
						cs.Batch, cs.SeqLen, cs.Cache = n, 1, c
						var before int64
						if pc, ok := en.bf16.(*productCounter); ok {
							before = pc.calls.Load()
						}
						got := attentionOutput(t, eng(), policy, cs, pick(q, qw), pick(k, kw), pick(v, kw))
						if pc, ok := en.bf16.(*productCounter); ok && pc.calls.Load() == before {
							t.Fatalf("run %d: no product of the cached attention ran on %s", ri, pc.Name())
						}
						for r, i := range src {
							for j := 0; j < qw; j++ {
								g, w := got[r*qw+j], want[i*qw+j]
								worst = max(worst, math.Abs(g-w))
								if native && g != w || math.Abs(g-w) > bound {
									t.Fatalf("run %d, row %d (sequence %d, position %d), element %d: %v, training op %v (bound %.3g)",
										ri, r, seqs[r], i%T, j, g, w, bound)
								}
							}
						}
					}
					t.Logf("largest difference %.2g, bound %.2g", worst, bound)
				})
			}
		}
	}
}

// productCounter is a native bf16 GEMM counting its products.
type productCounter struct {
	*blas.NativeBF16
	calls atomic.Int64
}

func (c *productCounter) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, pb *blas.PackedBF16, beta float32, cm []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	c.calls.Add(1)
	c.NativeBF16.Gemm(transA, transB, m, n, k, alpha, a, b, pb, beta, cm, ldc, done)
}

func (c *productCounter) GemmRound(transA, transB bool, m, n, k int, a, b blas.BF16Matrix, pb *blas.PackedBF16, cm []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	c.calls.Add(1)
	c.NativeBF16.GemmRound(transA, transB, m, n, k, a, b, pb, cm, ldc, done)
}

func TestKVCacheRows(t *testing.T) {
	c := NewKVCache(2, 4, RopeInvFreq(4, 10000))
	a, b := c.Add(), c.Add()
	if err := c.SetRows([]int{a, a, b}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetRows([]int{b, a}); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 2}; c.pos[0] != want[0] || c.pos[1] != want[1] || c.Len(a) != 3 || c.Len(b) != 2 {
		t.Fatalf("positions %v, lengths %d %d; want %v, 3 and 2", c.pos, c.Len(a), c.Len(b), want)
	}
	if len(c.rope.Cos) < 3*2 {
		t.Fatalf("rotary table of %d angles for 3 positions of 2 frequencies", len(c.rope.Cos))
	}
	if err := c.SetRows([]int{a, b, a}); err == nil {
		t.Fatal("rows of a sequence that are not adjacent were accepted")
	}
	if err := c.SetRows([]int{2}); err == nil {
		t.Fatal("a row of a sequence that was never added was accepted")
	}
}
