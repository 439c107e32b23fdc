package vulkan

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSplitKChoice: Gemm splits K for the LoRA adapters' thin products at
// TinyLlama's shape (2048 tokens, width 2048, rank 8) and for nothing
// with many tiles of C or a short K; GemmArgs.Splits and
// KernelOptions.NoSplitK override the choice.
func TestSplitKChoice(t *testing.T) {
	auto, off := &Kernels{}, &Kernels{noSplitK: true}
	for _, tc := range []struct {
		name          string
		ks            *Kernels
		g             GemmArgs
		chunks, chunk int
	}{
		{"x·Aᵀ", auto, GemmArgs{M: 2048, N: 8, K: 2048, TransB: true}, 16, 128},
		{"dY·B", auto, GemmArgs{M: 2048, N: 8, K: 2048}, 16, 128},
		{"dA = (dY·B)ᵀ·x", auto, GemmArgs{M: 8, N: 2048, K: 2048, TransA: true}, 16, 128},
		{"dB = dYᵀ·u", auto, GemmArgs{M: 2048, N: 8, K: 2048, TransA: true}, 16, 128},
		{"u·Bᵀ: K = rank", auto, GemmArgs{M: 2048, N: 2048, K: 8, TransB: true}, 1, 8},
		{"dx += du·A: K = rank", auto, GemmArgs{M: 2048, N: 2048, K: 8}, 1, 8},
		{"base product: 1024 tiles", auto, GemmArgs{M: 2048, N: 2048, K: 2048}, 1, 2048},
		{"129 tiles", auto, GemmArgs{M: 129 * 64, N: 64, K: 4096}, 1, 4096},
		{"128 tiles", auto, GemmArgs{M: 128 * 64, N: 64, K: 4096}, 4, 1024},
		{"K below two chunks", auto, GemmArgs{M: 64, N: 64, K: 255}, 1, 255},
		{"K of two chunks", auto, GemmArgs{M: 64, N: 64, K: 256}, 2, 128},
		{"ragged K", auto, GemmArgs{M: 9, N: 130, K: 1000}, 7, 144},
		{"4-bit B", auto, GemmArgs{M: 2048, N: 8, K: 2048, Q4: &Q4Weight{}}, 1, 2048},
		{"one pass asked for", auto, GemmArgs{M: 2048, N: 8, K: 2048, Splits: 1}, 1, 2048},
		{"NoSplitK", off, GemmArgs{M: 2048, N: 8, K: 2048}, 1, 2048},
		{"Splits over NoSplitK", off, GemmArgs{M: 2048, N: 8, K: 2048, Splits: 4}, 4, 512},
		{"Splits, ragged", auto, GemmArgs{M: 3, N: 5, K: 7, Splits: 4}, 4, 2},
		{"Splits 3 of 10 values", auto, GemmArgs{M: 3, N: 5, K: 10, Splits: 3}, 3, 4},
		{"Splits 4 of 9 values: 3 chunks", auto, GemmArgs{M: 3, N: 5, K: 9, Splits: 4}, 3, 3},
		{"Splits beyond K", auto, GemmArgs{M: 3, N: 5, K: 3, Splits: 8}, 3, 1},
		{"K = 1", auto, GemmArgs{M: 3, N: 5, K: 1, Splits: 8}, 1, 1},
	} {
		chunks, chunk := tc.ks.SplitK(tc.g)
		if chunks != tc.chunks || chunk != tc.chunk {
			t.Errorf("%s: %d chunks of %d, want %d of %d", tc.name, chunks, chunk, tc.chunks, tc.chunk)
		}
		if chunks > 1 && ((chunks-1)*chunk >= tc.g.K || chunks*chunk < tc.g.K || chunk+chunks-1 > tc.g.K) {
			t.Errorf("%s: %d chunks of %d do not cover K = %d with every chunk non-empty, or exceed one pass's error bound", tc.name, chunks, chunk, tc.g.K)
		}
	}
}

// TestGemmSplitK checks split-K products against the float64 reference
// within γ_{c+S+1}·(|α|Σ|a||b| + |βc|) (gemmCase.run): every transpose,
// ragged M, N and K (chunks of K not multiples of the kernel's K step,
// a short last chunk), α and β ≠ 0 with strides and offsets, fp32,
// bf16 and fp16 B, chunks asked for and chosen by Gemm; without -short
// also the LoRA adapters' thin products at TinyLlama's shape.
func TestGemmSplitK(t *testing.T) {
	e, ks := openKernels(t)
	type shape struct{ m, n, k, splits int }
	shapes := []shape{
		{3, 5, 7, 4},      // below one tile: chunks of 2, 2, 2 and 1
		{65, 63, 100, 3},  // ragged in M and N, chunks of 34
		{130, 9, 257, 0},  // chosen: 2 chunks of 144 and 113
		{9, 130, 1000, 0}, // chosen: 7 chunks of 144, the last 136
	}
	rng := rand.New(rand.NewPCG(31, 37))
	worst := 0.0
	for _, s := range shapes {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, b := range []struct {
				b16  bool
				half Half
			}{{false, BF16}, {true, BF16}, {true, FP16}} {
				c := gemmCase{m: s.m, n: s.n, k: s.k, transA: tr[0], transB: tr[1], alpha: 1, splits: s.splits, b16: b.b16, half: b.half}
				if s.m%2 == 1 {
					c.alpha, c.beta, c.pad, c.off = 1.5, -0.75, 3, 5
				}
				if chunks, _ := ks.SplitK(GemmArgs{M: c.m, N: c.n, K: c.k, Splits: c.splits}); chunks < 2 {
					t.Fatalf("%v: not split", c)
				}
				t.Run(c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
			}
		}
	}
	if !testing.Short() {
		for _, c := range []gemmCase{
			{m: 2048, n: 8, k: 2048, transB: true, alpha: 1},             // x·Aᵀ
			{m: 2048, n: 8, k: 2048, alpha: 1},                           // dY·B
			{m: 8, n: 2048, k: 2048, transA: true, alpha: 1, beta: 1},    // dA, accumulated
			{m: 2048, n: 8, k: 2048, transA: true, alpha: 1, beta: -0.5}, // dB
		} {
			t.Run(c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
		}
	}
	t.Logf("split-K on %s: worst error %.3f of the bound γ_{c+S+1}·(|α|Σ|a||b| + |βc|)", e.dev.Physical.Name, worst)
}

// splitKProduct is a thin product's operands on the device, for the
// tests that run it more than once.
type splitKProduct struct {
	g    GemmArgs
	want []float32 // C as the first run left it (nil before)
}

func newSplitKProduct(t *testing.T, d *Device, rng *rand.Rand, m, n, k int) *splitKProduct {
	t.Helper()
	buf := func(xs []float32) *Buffer {
		b, err := d.NewBuffer(4 * len(xs))
		must(t, err)
		t.Cleanup(b.Free)
		must(t, b.WriteFloat32(0, xs))
		return b
	}
	normal := func(n int) []float32 {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
		return xs
	}
	return &splitKProduct{g: GemmArgs{M: m, N: n, K: k, Alpha: 1, A: buf(normal(m * k)), B: buf(normal(k * n)), C: buf(make([]float32, m*n)),
		Lda: k, Ldb: n, Ldc: n}}
}

func (p *splitKProduct) read(t *testing.T) []float32 {
	t.Helper()
	got := make([]float32, p.g.M*p.g.N)
	must(t, p.g.C.ReadFloat32(0, got))
	return got
}

// TestGemmSplitKDeterministic: a split product gives the same bits run
// after run, alone or in a batch with others that make the recorder's
// scratch grow under it (the buffer it replaced lives until the batch is
// done), and on another recorder.
func TestGemmSplitKDeterministic(t *testing.T) {
	e, ks := openKernels(t)
	rng := rand.New(rand.NewPCG(41, 43))
	small := newSplitKProduct(t, e.dev, rng, 300, 8, 1500) // 11 chunks of 144: 103 KiB of partials
	big := newSplitKProduct(t, e.dev, rng, 8, 1000, 2000)  // 14 chunks of 144: 438 KiB
	other := newSplitKProduct(t, e.dev, rng, 70, 3, 900)   // 7 chunks of 144
	r, err := e.dev.NewRecorder()
	must(t, err)
	defer r.Close()
	for _, p := range []*splitKProduct{small, big, other} {
		if chunks, _ := ks.SplitK(p.g); chunks < 2 {
			t.Fatalf("%d×%d×%d is not split", p.g.M, p.g.N, p.g.K)
		}
		must(t, ks.Gemm(r, p.g))
		if r.Len() != 2 {
			t.Fatalf("%d×%d×%d recorded %d commands, want 2 (the chunks, their sum)", p.g.M, p.g.N, p.g.K, r.Len())
		}
		must(t, r.Submit())
		p.want = p.read(t)
	}
	same := func(when string, p *splitKProduct) {
		t.Helper()
		got := p.read(t)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(p.want[i]) {
				t.Fatalf("%s: %d×%d×%d C[%d] = %g, was %g", when, p.g.M, p.g.N, p.g.K, i, got[i], p.want[i])
			}
		}
	}
	for range 2 {
		must(t, ks.Gemm(r, small.g))
		must(t, r.Submit())
		same("run again", small)
	}
	// One batch: small's partials in the first scratch, big's in a larger
	// one, then small's and other's there too.
	r2, err := e.dev.NewRecorder()
	must(t, err)
	defer r2.Close()
	for _, p := range []*splitKProduct{small, big, small, other} {
		must(t, ks.Gemm(r2, p.g))
	}
	if len(r2.retired) != 1 {
		t.Errorf("the batch retired %d scratch buffers, want 1", len(r2.retired))
	}
	must(t, r2.Submit())
	if len(r2.retired) != 0 {
		t.Errorf("%d retired scratch buffers outlive their batch", len(r2.retired))
	}
	for _, p := range []*splitKProduct{small, big, other} {
		same("in one batch", p)
	}
}

// TestGemmSplitKPicked: Gemm splits a thin product with long K by
// itself, 16-bit operands included (they leave the tensor-core variant:
// a split product runs on the scalar kernel); NoSplitK keeps one pass;
// bad Splits are refused.
func TestGemmSplitKPicked(t *testing.T) {
	e, ks := openKernels(t)
	rng := rand.New(rand.NewPCG(47, 53))
	p := newSplitKProduct(t, e.dev, rng, 256, 8, 1024)
	r, err := e.dev.NewRecorder()
	must(t, err)
	defer r.Close()
	plain, err := NewKernelsWith(e.dev, KernelOptions{NoSplitK: true})
	must(t, err)
	defer plain.Close()
	if got := plain.GemmNames(); !strings.HasSuffix(got, ", split-K off") {
		t.Errorf("GemmNames() with NoSplitK = %q, want it to end \", split-K off\"", got)
	}
	for _, tc := range []struct {
		name     string
		ks       *Kernels
		operands Rounding
		splits   int
		commands int
	}{
		{"fp32 operands", ks, NoRounding, 0, 2},
		{"bf16 operands", ks, RoundBF16, 0, 2},
		{"fp16 operands", ks, RoundFP16, 0, 2},
		{"one pass", ks, NoRounding, 1, 1},
		{"NoSplitK", plain, NoRounding, 0, 1},
		{"NoSplitK, bf16 operands", plain, RoundBF16, 0, 1},
		{"NoSplitK, splits asked for", plain, NoRounding, 3, 2},
	} {
		g := p.g
		g.Operands, g.Splits = tc.operands, tc.splits
		must(t, tc.ks.Gemm(r, g))
		if r.Len() != tc.commands {
			t.Errorf("%s: %d commands recorded, want %d", tc.name, r.Len(), tc.commands)
		}
		must(t, r.Submit())
	}
	for _, tc := range []struct {
		splits int
		q4     *Q4Weight
	}{{-1, nil}, {2, &Q4Weight{}}} {
		g := p.g
		g.Splits, g.Q4 = tc.splits, tc.q4
		err := ks.Gemm(r, g)
		if err == nil || !strings.Contains(err.Error(), "splits of K") {
			t.Errorf("Splits %d, 4-bit B %v: %v, want a refusal", tc.splits, tc.q4 != nil, err)
		}
	}
	if r.Len() != 0 {
		t.Errorf("refused products recorded %d commands", r.Len())
	}
}

// BenchmarkGemmSplitK times the LoRA adapters' thin products at
// TinyLlama's shape (2048 tokens, width 2048, rank 8) split as Gemm
// splits them and in one pass.
func BenchmarkGemmSplitK(b *testing.B) {
	e, ks := openKernels(b)
	d := e.dev
	for _, s := range []struct {
		name           string
		m, n, k        int
		transA, transB bool
	}{
		{"xAt_2048x8x2048", 2048, 8, 2048, false, true},
		{"dA_8x2048x2048", 8, 2048, 2048, true, false},
		{"dB_2048x8x2048", 2048, 8, 2048, true, false},
	} {
		for _, splits := range []int{0, 1} {
			name := s.name + "/split"
			if splits == 1 {
				name = s.name + "/one_pass"
			}
			b.Run(name, func(b *testing.B) {
				var bufs []*Buffer
				for _, n := range []int{s.m * s.k, s.k * s.n, s.m * s.n} {
					buf, err := d.NewBuffer(4 * n)
					must(b, err)
					defer buf.Free()
					bufs = append(bufs, buf)
				}
				lda, ldb := s.k, s.n
				if s.transA {
					lda = s.m
				}
				if s.transB {
					ldb = s.k
				}
				r, err := d.NewRecorder()
				must(b, err)
				defer r.Close()
				benchGemm(b, ks, r, GemmArgs{M: s.m, N: s.n, K: s.k, TransA: s.transA, TransB: s.transB, Alpha: 1,
					A: bufs[0], B: bufs[1], C: bufs[2], Lda: lda, Ldb: ldb, Ldc: s.n, Splits: splits})
			})
		}
	}
}
