package nn

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/cpufeat"
)

// widenGemmer is a bf16 GEMM that widens its operands to float32 and runs
// the fp32 backend's Sgemm: the bits of the emulation by design, so a
// linear layer on the bf16 path must give exactly the emulation's values.
// It counts its calls and checks that they see bf16 bits.
type widenGemmer struct {
	be    blas.Backend
	calls atomic.Int64
}

func (g *widenGemmer) Name() string { return "widen " + g.be.Name() }

func (g *widenGemmer) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	g.calls.Add(1)
	af, bf := make([]float32, len(a)), make([]float32, len(b))
	amp.BF16.FromBits16Slice(af, a)
	amp.BF16.FromBits16Slice(bf, b)
	g.be.Sgemm(transA, transB, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc)
}

// linearInputs draws x [n, in] and W [out, in] in [-1, 1), and W's bits
// rounded to bf16.
func linearInputs(rng *rand.Rand, n, in, out int) (xs, ws []float32, wbits []uint16) {
	xs, ws = make([]float32, n*in), make([]float32, out*in)
	wbits = make([]uint16, out*in)
	for i := range xs {
		xs[i] = rng.Float32()*2 - 1
	}
	for i := range ws {
		ws[i] = rng.Float32()*2 - 1
		wbits[i] = amp.BF16.Bits16(ws[i])
	}
	return xs, ws, wbits
}

// TestLinearBF16Path runs a linear layer's forward, dx and dW with and
// without a bf16 GEMM on the engine: where the policy puts both operands
// in bf16 (f = BF16) every product goes to it, with the operands as bf16
// bits, and the results, their rounding and the gradient counts are the
// emulation's; in fp16 none does.
func TestLinearBF16Path(t *testing.T) {
	const n, in, out = 7, 37, 19
	rng := rand.New(rand.NewPCG(5, 6))
	xs, ws, wbits := linearInputs(rng, n, in, out)
	for _, tc := range []struct {
		name      string
		f         amp.Format
		sixteen   bool // W is a frozen bf16 Param16
		wantCalls int64
	}{
		{"bf16, fp32 weight", amp.BF16, false, 3}, // y, dx, dW
		{"bf16, bf16 weight", amp.BF16, true, 2},  // y, dx
		{"fp16", amp.FP16, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := func(g blas.BF16Gemmer) (outs [][]float32, rounded, under int64) {
				b := NewBuilder(&Engine{BLAS: blas.Native{Workers: 2}, BF16: g, Workers: 2}, tensor.Float32)
				p := amp.DefaultPolicy(tc.f)
				b.Policy = &p
				x := b.Param("x", []int{n, in}, append([]float32(nil), xs...), true)
				var w *G.Node
				wrt := []*G.Node{x}
				if tc.sixteen {
					w = b.Param16("w", []int{out, in}, wbits, amp.BF16)
				} else {
					w = b.Param("w", []int{out, in}, append([]float32(nil), ws...), true)
					wrt = append(wrt, w)
				}
				y := b.Linear(x, w)
				grads, err := G.Grad(G.Must(G.Sum(G.Must(G.Square(y)))), wrt...)
				if err != nil {
					t.Fatal(err)
				}
				runGraph(t, b)
				outs = append(outs, append([]float32(nil), f32(y)...))
				for _, g := range grads {
					outs = append(outs, append([]float32(nil), f32(g)...))
				}
				rounded, under = b.Eng.Grads.Take()
				return outs, rounded, under
			}
			emu, r0, u0 := run(nil)
			g := &widenGemmer{be: blas.Native{Workers: 2}}
			hw, r1, u1 := run(g)
			if got := g.calls.Load(); got != tc.wantCalls {
				t.Fatalf("the bf16 GEMM ran %d products, want %d", got, tc.wantCalls)
			}
			if r0 != r1 || u0 != u1 {
				t.Errorf("gradient counts: emulated %d rounded, %d underflowed; bf16 path %d, %d", r0, u0, r1, u1)
			}
			for i := range emu {
				for j := range emu[i] {
					if math.Float32bits(emu[i][j]) != math.Float32bits(hw[i][j]) {
						t.Fatalf("output %d [%d]: emulated %v, bf16 path %v", i, j, emu[i][j], hw[i][j])
					}
				}
			}
		})
	}
}

// realBF16Gemmers are the bf16 GEMMs that run on this machine, each
// sharing a product among workers goroutines: oneDNN's where it loads
// with its bf16 GEMM, the AMX kernel where the CPU has AMX-BF16 and the
// OS grants it, the VDPBF16PS kernel where the CPU has AVX512_BF16; then
// the native driver on the Go models of both kernels, which run anywhere.
func realBF16Gemmers(t *testing.T, workers int) []blas.BF16Gemmer {
	var gs []blas.BF16Gemmer
	var why []string
	if d, err := blas.OpenOneDNN(workers); err != nil {
		why = append(why, err.Error())
	} else if !d.BF16() {
		why = append(why, "oneDNN's bf16 GEMM needs AVX-512")
	} else {
		gs = append(gs, d)
	}
	f := cpufeat.Detect()
	if nb, err := blas.NewNativeBF16(f, workers); err != nil {
		why = append(why, err.Error())
	} else {
		gs = append(gs, nb)
	}
	if f.AMX() && f.AVX512BF16 { // the VDPBF16PS kernel too, which AMX displaces
		f.AMXPermitted = false
		if nb, err := blas.NewNativeBF16(f, workers); err == nil {
			gs = append(gs, nb)
		}
	}
	if len(gs) == 0 {
		t.Logf("no bf16 GEMM runs here (%s): the native driver is checked on its Go models of VDPBF16PS and TDPBF16PS only", strings.Join(why, "; "))
	}
	// the native driver (packing float32 operands, a packed weight, the
	// rounding epilogue) on the Go models of its kernels, on every CPU
	return append(gs, blas.NewNativeBF16Go(workers), blas.NewNativeAMXGo(workers))
}

// TestLinearOnBF16Units runs a linear layer's forward and dx on each real
// bf16 GEMM against the emulation; both must come out rounded to bf16
// (by the kernel, on the native driver). Both sum the same exact products in
// fp32, k roundings each, in different orders: before the output's bf16
// rounding they differ by at most 2·γ_k·Σ|x||w| (each within γ_k of the
// exact sum), and that rounding adds at most one bf16 ulp of the larger.
func TestLinearOnBF16Units(t *testing.T) {
	const n, in, out = 33, 300, 70
	rng := rand.New(rand.NewPCG(7, 8))
	xs := make([]float32, n*in)
	wbits := make([]uint16, out*in)
	for i := range xs {
		xs[i] = amp.BF16.Round(rng.Float32()*2 - 1)
	}
	for i := range wbits {
		wbits[i] = amp.BF16.Bits16(rng.Float32()*2 - 1)
	}
	gamma := func(k int) float64 { ku := float64(k) * 0x1p-24; return ku / (1 - ku) }
	run := func(g blas.BF16Gemmer) (y, dx []float32) {
		b := NewBuilder(&Engine{BLAS: blas.Native{Workers: 2}, BF16: g, Workers: 2}, tensor.Float32)
		p := amp.DefaultPolicy(amp.BF16)
		b.Policy = &p
		x := b.Param("x", []int{n, in}, append([]float32(nil), xs...), true)
		yn := b.Linear(x, b.Param16("w", []int{out, in}, wbits, amp.BF16))
		grads, err := G.Grad(G.Must(G.Sum(yn)), x)
		if err != nil {
			t.Fatal(err)
		}
		runGraph(t, b)
		return append([]float32(nil), f32(yn)...), append([]float32(nil), f32(grads[0])...)
	}
	wf := make([]float64, out*in)
	for i, h := range wbits {
		wf[i] = math.Abs(float64(amp.BF16.FromBits16(h)))
	}
	yEmu, dxEmu := run(nil)
	for _, g := range realBF16Gemmers(t, 2) {
		y, dx := run(g)
		for i, v := range append(append([]float32(nil), y...), dx...) {
			if amp.BF16.Round(v) != v {
				t.Fatalf("%s: value %d of y and dx, %v, is not rounded to bf16", g.Name(), i, v)
			}
		}
		for i := 0; i < n; i++ {
			for o := 0; o < out; o++ {
				var abs float64
				for k := 0; k < in; k++ {
					abs += math.Abs(float64(xs[i*in+k])) * wf[o*in+k]
				}
				got, want := float64(y[i*out+o]), float64(yEmu[i*out+o])
				tol := 2*gamma(in)*abs + ulp(amp.BF16, math.Max(math.Abs(got), math.Abs(want)))
				if math.Abs(got-want) > tol {
					t.Fatalf("%s: y[%d,%d] = %v, emulated %v: differ by more than %.3g", g.Name(), i, o, got, want, tol)
				}
			}
		}
		// dx = g·W with g = 1 (the gradient of a sum, exact in bf16)
		for i := 0; i < n; i++ {
			for k := 0; k < in; k++ {
				var abs float64
				for o := 0; o < out; o++ {
					abs += wf[o*in+k]
				}
				got, want := float64(dx[i*in+k]), float64(dxEmu[i*in+k])
				tol := 2*gamma(out)*abs + ulp(amp.BF16, math.Max(math.Abs(got), math.Abs(want)))
				if math.Abs(got-want) > tol {
					t.Fatalf("%s: dx[%d,%d] = %v, emulated %v: differ by more than %.3g", g.Name(), i, k, got, want, tol)
				}
			}
		}
		t.Logf("%s: y and dx within 2γ_k·Σ|a||b| + 1 bf16 ulp of the emulation", g.Name())
	}
}

// countingPacker is the native driver on its Go kernel, counting how
// often a weight is packed.
type countingPacker struct {
	*blas.NativeBF16
	packs atomic.Int64
}

func (c *countingPacker) PackB(into *blas.PackedBF16, transB bool, k, n int, b blas.BF16Matrix) *blas.PackedBF16 {
	c.packs.Add(1)
	return c.NativeBF16.PackB(into, transB, k, n, b)
}

// TestLinearPackedWeightCache: a weight is packed for the bf16 GEMM once
// and kept, for the forward product and for dx, a float32 one and a
// bf16 one alike: a frozen one for good, a trainable one until
// Engine.WeightsChanged, after which the products read the new values
// (negating W negates y exactly, a stale packing would not).
func TestLinearPackedWeightCache(t *testing.T) {
	const n, in, out = 9, 40, 35
	rng := rand.New(rand.NewPCG(9, 10))
	xs, ws, wbits := linearInputs(rng, n, in, out)
	for _, tc := range []struct {
		name      string
		trainable bool
	}{{"frozen bf16 weight", false}, {"trainable fp32 weight", true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := &countingPacker{NativeBF16: blas.NewNativeBF16Go(2)}
			b := NewBuilder(&Engine{BLAS: blas.Native{Workers: 2}, BF16: g, Workers: 2}, tensor.Float32)
			p := amp.DefaultPolicy(amp.BF16)
			b.Policy = &p
			x := b.Param("x", []int{n, in}, append([]float32(nil), xs...), true)
			var w *G.Node
			wdata := append([]float32(nil), ws...)
			if tc.trainable {
				w = b.Param("w", []int{out, in}, wdata, true)
			} else {
				w = b.Param16("w", []int{out, in}, wbits, amp.BF16)
			}
			y := b.Linear(x, w)
			if _, err := G.Grad(G.Must(G.Sum(G.Must(G.Square(y)))), x); err != nil {
				t.Fatal(err)
			}
			// the forward's and dx's packings, kept
			const kept = 2
			runGraph(t, b)
			if got := g.packs.Load(); got != kept {
				t.Fatalf("first run packed the weight %d times, want %d", got, kept)
			}
			y1 := append([]float32(nil), f32(y)...)
			runGraph(t, b)
			if got := g.packs.Load(); got != kept {
				t.Fatalf("second run packed again: %d packings, want %d", got, kept)
			}
			if !tc.trainable {
				return
			}
			for i := range wdata { // an optimizer step
				wdata[i] = -wdata[i]
			}
			b.Eng.WeightsChanged()
			runGraph(t, b)
			if got := g.packs.Load(); got != 4 {
				t.Fatalf("after WeightsChanged: %d packings, want 4", got)
			}
			for i, v := range f32(y) { // y = x·Wᵀ: negating W negates y exactly
				if v != -y1[i] {
					t.Fatalf("y[%d] = %v after W = -W, want %v: a stale packing", i, v, -y1[i])
				}
			}
		})
	}
}

// TestLinearFrozenFP32WeightRoundsInPack: a frozen fp32 weight on a bf16
// GEMM that packs float32 operands gets no bf16 copy in the graph, and
// the layer computes the bits it computes on the same weight stored in
// bf16 (both pack the same rounded values).
func TestLinearFrozenFP32WeightRoundsInPack(t *testing.T) {
	const n, in, out = 9, 40, 35
	rng := rand.New(rand.NewPCG(11, 12))
	xs, ws, wbits := linearInputs(rng, n, in, out)
	run := func(sixteen bool) (y, dx []float32, casts int) {
		b := NewBuilder(&Engine{BLAS: blas.Native{Workers: 2}, BF16: blas.NewNativeBF16Go(2), Workers: 2}, tensor.Float32)
		p := amp.DefaultPolicy(amp.BF16)
		b.Policy = &p
		b.PackFrozenWeights = true
		x := b.Param("x", []int{n, in}, append([]float32(nil), xs...), true)
		var w *G.Node
		if sixteen {
			w = b.Param16("w", []int{out, in}, wbits, amp.BF16)
		} else {
			w = b.Param("w", []int{out, in}, append([]float32(nil), ws...), false)
		}
		yn := b.Linear(x, w)
		grads, err := G.Grad(G.Must(G.Sum(G.Must(G.Square(yn)))), x)
		if err != nil {
			t.Fatal(err)
		}
		runGraph(t, b)
		for k := range b.casts {
			if k.n == w {
				casts++
			}
		}
		return append([]float32(nil), f32(yn)...), append([]float32(nil), f32(grads[0])...), casts
	}
	y16, dx16, _ := run(true)
	y32, dx32, casts := run(false)
	if casts != 0 {
		t.Fatalf("the frozen fp32 weight has %d bf16 copies in the graph, want none", casts)
	}
	for i := range y16 {
		if math.Float32bits(y16[i]) != math.Float32bits(y32[i]) {
			t.Fatalf("y[%d] = %v from the fp32 weight, %v from its bf16 bits", i, y32[i], y16[i])
		}
	}
	for i := range dx16 {
		if math.Float32bits(dx16[i]) != math.Float32bits(dx32[i]) {
			t.Fatalf("dx[%d] = %v from the fp32 weight, %v from its bf16 bits", i, dx32[i], dx16[i])
		}
	}
}
