package nn

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// widenPacker is widenGemmer with bf16Packer's entry point, which
// attention's products take on a GEMM that rounds float32 operands as it
// packs them (the native driver): it widens those operands to float32
// (rounded to bf16, as that GEMM reads them) and runs the fp32 backend's
// Sgemm, the emulation's bits by design. It counts the float32 values of
// op(B) that are not bf16 values: the path must carry only those there.
// op(A) may be the fp32 probabilities, which the values matmul and dV's
// leave to the GEMM to round, or dS, which dQ's and dK's leave to it (the
// same bits as rounding them first).
type widenPacker struct {
	*widenGemmer
	notBF16 int64
	mu      sync.Mutex
}

func (g *widenPacker) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, pb *blas.PackedBF16, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	if pb != nil {
		panic("widenPacker: attention packs no operand in advance")
	}
	g.calls.Add(1)
	widen := func(x blas.BF16Matrix, count bool) []float32 {
		if x.F32 == nil {
			w := make([]float32, len(x.Bits))
			amp.BF16.FromBits16Slice(w, x.Bits)
			return w
		}
		w := make([]float32, len(x.F32))
		var off int64
		for i, v := range x.F32 {
			w[i] = amp.BF16.Round(v)
			if w[i] != v && v == v {
				off++
			}
		}
		if count {
			g.mu.Lock()
			g.notBF16 += off
			g.mu.Unlock()
		}
		return w
	}
	g.be.Sgemm(transA, transB, m, n, k, alpha, widen(a, false), a.Ld, widen(b, true), b.Ld, beta, c, ldc)
	if done != nil && m > 0 && n > 0 {
		done(0, m, 0, n)
	}
}

func (g *widenPacker) PackB(*blas.PackedBF16, bool, int, int, blas.BF16Matrix) *blas.PackedBF16 {
	panic("widenPacker: attention packs no operand in advance")
}

// attnBF16Cases are the shapes attention's bf16 products are checked on:
// grouped-query attention over a length that is not a multiple of the
// tiled kernel's 64-row blocks, packed documents whose boundaries fall
// inside and across blocks, one head of SmolLM2's size (64), and sums
// over up to 300 keys with a sliding window.
var attnBF16Cases = []struct {
	name string
	s    AttentionShape
}{
	{"gqa ragged", AttentionShape{Batch: 1, SeqLen: 100, Heads: 4, KVHeads: 2, HeadDim: 24}},
	{"mqa packed documents", AttentionShape{Batch: 2, SeqLen: 130, Heads: 3, KVHeads: 1, HeadDim: 8, Positions: packed(2, 50, 45, 35)}},
	{"mha head of 64", AttentionShape{Batch: 1, SeqLen: 70, Heads: 2, KVHeads: 2, HeadDim: 64}},
	{"gqa 300 tokens and window", AttentionShape{Batch: 1, SeqLen: 300, Heads: 4, KVHeads: 2, HeadDim: 16, Window: 200}},
}

// attnBF16RaceCases replace attnBF16Cases in TestAttentionOnBF16Units
// under the race detector, which slows the Go models of the bf16 kernels
// and the float64 checks about 25 times (400 s for all the cases on 2
// cores): what it looks for, the workers and the GEMM's goroutines
// sharing the engine's buffers, a small shape with GQA and two blocks of
// the tiled kernel shows as well.
var attnBF16RaceCases = []struct {
	name string
	s    AttentionShape
}{
	{"gqa two blocks", AttentionShape{Batch: 1, SeqLen: 70, Heads: 4, KVHeads: 2, HeadDim: 8}},
}

// attnBF16Policies are precision policies and which of attention's
// products each puts on the bf16 GEMM: those whose two operands both hold
// bf16 values.
var attnBF16Policies = []struct {
	name   string
	policy func() *amp.Policy
	on     attnPaths
}{
	{"fp32", func() *amp.Policy { return nil }, attnPaths{}},
	{"fp16", func() *amp.Policy { p := amp.DefaultPolicy(amp.FP16); return &p }, attnPaths{}},
	// Q, K, V, dO, P (rounded for the values matmul) and dS all in bf16
	{"bf16", func() *amp.Policy { p := amp.DefaultPolicy(amp.BF16); return &p }, attnPaths{true, true, true, true, true, true}},
	// the probabilities in bf16 from the softmax on
	{"bf16 softmax", func() *amp.Policy {
		p := amp.DefaultPolicy(amp.BF16)
		must(p.Move("softmax", amp.LowPrecision))
		return &p
	}, attnPaths{true, true, true, true, true, true}},
	// V, P and dO stay fp32: only Q·Kᵀ, dS·K and dSᵀ·Q are bf16 products
	{"bf16, fp32 values", func() *amp.Policy {
		p := amp.DefaultPolicy(amp.BF16)
		must(p.Move("attention_values", amp.FullPrecision))
		return &p
	}, attnPaths{scores: true, dQ: true, dK: true}},
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// attnProducts is how many products one forward and backward pass of
// attention (every input's gradient) runs on the bf16 GEMM: per head, the
// full kernel's six products once, the tiled kernel's once per block of
// query rows, with the scores computed again in the backward pass.
func attnProducts(s AttentionShape, kind AttentionKernel, on attnPaths) int64 {
	n := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	per := n(on.scores) + n(on.values) + n(on.dP) + n(on.dQ) + n(on.dK) + n(on.dV)
	heads := int64(s.Batch * s.Heads)
	if kind == AttentionFull {
		return heads * per
	}
	return heads * int64((s.SeqLen+attnTile-1)/attnTile) * (per + n(on.scores))
}

// attnKernels are the two kernels, by name.
var attnKernels = []struct {
	name string
	kind AttentionKernel
}{{"full", AttentionFull}, {"tiled", AttentionTiled}}

// TestAttentionBF16Path runs attention forward and backward with and
// without a bf16 GEMM on the engine, under several policies. The GEMMs
// here widen their bf16 operands and run the fp32 backend's Sgemm, the
// emulation's bits by design, through both of the path's entry points
// (bits, and float32 rounded as packed): so every product the policy puts
// on the bf16 GEMM must reach it, with the right operands, transposes,
// strides, α and β, and nothing else may change a bit. A product that
// should run there and does not fails the count; one that should not
// (fp32, fp16, or an fp32 operand) fails it too.
func TestAttentionBF16Path(t *testing.T) {
	for _, tc := range attnBF16Cases {
		for _, k := range attnKernels {
			for _, pc := range attnBF16Policies {
				t.Run(fmt.Sprintf("%s/%s/%s", tc.name, k.name, pc.name), func(t *testing.T) {
					eng := func(g blas.BF16Gemmer) *Engine {
						return &Engine{BLAS: blas.Native{Workers: 2}, BF16: g, Workers: 2}
					}
					emu := runAttentionPolicy(t, tc.s, k.kind, tensor.Float32, pc.policy(), eng(nil))
					bits := &widenGemmer{be: blas.Native{Workers: 2}}
					pack := &widenPacker{widenGemmer: &widenGemmer{be: blas.Native{Workers: 2}}}
					// a GEMM whose kernel rounds C as it stores it: the
					// output and, with one query head per key/value head, dQ,
					// dK and dV are left to it to round
					rounder := roundingPacker{&widenPacker{widenGemmer: &widenGemmer{be: blas.Native{Workers: 2}}}}
					want := attnProducts(tc.s, k.kind, pc.on)
					for _, g := range []struct {
						name  string
						g     blas.BF16Gemmer
						calls func() int64
					}{{"bits", bits, bits.calls.Load}, {"packer", pack, pack.calls.Load}, {"rounding packer", rounder, rounder.calls.Load}} {
						got := runAttentionPolicy(t, tc.s, k.kind, tensor.Float32, pc.policy(), eng(g.g))
						if n := g.calls(); n != want {
							t.Fatalf("%s: %d products on the bf16 GEMM, want %d", g.name, n, want)
						}
						sameAttnBits(t, g.name+" against the emulation", got, emu)
					}
					if pack.notBF16 != 0 {
						t.Fatalf("the bf16 GEMM was given %d float32 operand values that are not bf16 values", pack.notBF16)
					}
				})
			}
		}
	}
}

// sameAttnBits fails unless a and b's outputs and gradients are the same bits.
func sameAttnBits(t *testing.T, what string, a, b attnResult) {
	t.Helper()
	for _, c := range []struct {
		name string
		a, b []float64
	}{{"out", a.out, b.out}, {"dq", a.dq, b.dq}, {"dk", a.dk, b.dk}, {"dv", a.dv, b.dv}} {
		for i := range c.b {
			if math.Float32bits(float32(c.a[i])) != math.Float32bits(float32(c.b[i])) {
				t.Fatalf("%s: %s[%d] = %v, want %v", what, c.name, i, c.a[i], c.b[i])
			}
		}
	}
}

// boundCheck checks every product a bf16 GEMM computes against float64
// on the operands it was given: |C − (α·Σ a·b + β·C₀)| within
//
//	γ_(k+2)·(|α|·Σ|a||b| + |β|·|C₀|) + k·2⁻⁵²·|α|·Σ|a||b|
//	    + 2⁻¹²⁶·((2k+6) + |α|·Σ(|a|+|b|))
//
// Products of two bf16 values are exact in fp32; any order of fp32 sums
// rounds each of them at most k−1 times, α's product and β's sum add one
// rounding each (two for a term where α scales an operand first), so
// γ_(k+2) (γ_n = nu/(1−nu), u = 2⁻²⁴) bounds the fp32 arithmetic. The
// second term is the float64 reference's own error. The third covers
// denormals, which the bf16 units read as zero (a product off by less than
// 2⁻¹²⁶ times its other factor) and flush to zero (each of at most k+3
// operations on an element off by less than 2⁻¹²⁶, doubled for the
// factors that follow it). It records the largest error over its bound.
type boundCheck struct {
	mu    sync.Mutex
	worst float64 // the largest |error| / bound
	calls int
	fail  string // the first product outside its bound
}

// bf16At is op(X)[i][j] of a bf16 operand (transposed when trans) as the
// GEMM reads it, a float32 rounded to bf16 (nearest even), and whether
// it held a bf16 value already.
func bf16At(x blas.BF16Matrix, trans bool, i, j int) (float64, bool) {
	if trans {
		i, j = j, i
	}
	if x.F32 != nil {
		v := x.F32[i*x.Ld+j]
		return float64(amp.BF16.Round(v)), amp.BF16.Round(v) == v || v != v
	}
	return float64(amp.BF16.FromBits16(x.Bits[i*x.Ld+j])), true
}

// check runs gemm, which computes C = alpha·op(A)·op(B) + beta·C, and
// checks C against float64.
func (bc *boundCheck) check(transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, beta float32, c []float32, ldc int, gemm func()) {
	var c0 []float32
	if beta != 0 {
		c0 = make([]float32, m*n)
		for i := 0; i < m; i++ {
			copy(c0[i*n:(i+1)*n], c[i*ldc:i*ldc+n])
		}
	}
	gemm()
	u := func(n int) float64 { return float64(n) * 0x1p-24 / (1 - float64(n)*0x1p-24) }
	al, be := math.Abs(float64(alpha)), math.Abs(float64(beta))
	var worst float64
	fail := ""
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var dot, abs, sum float64
			for p := 0; p < k; p++ {
				// op(A) may be the fp32 probabilities, which the values
				// matmul and dV's leave to the GEMM to round; every other
				// operand holds bf16 values already
				x, _ := bf16At(a, transA, i, p)
				y, okB := bf16At(b, transB, p, j)
				if !okB {
					fail = fmt.Sprintf("an operand value of element [%d,%d] is not a bf16 value", i, j)
				}
				dot += x * y
				abs += math.Abs(x * y)
				sum += math.Abs(x) + math.Abs(y)
			}
			ref, c0abs := float64(alpha)*dot, 0.0
			if c0 != nil {
				ref += float64(beta) * float64(c0[i*n+j])
				c0abs = math.Abs(float64(c0[i*n+j]))
			}
			bound := u(k+2)*(al*abs+be*c0abs) + float64(k)*0x1p-52*al*abs + 0x1p-126*(float64(2*k+6)+al*sum)
			d := math.Abs(float64(c[i*ldc+j]) - ref)
			if d > bound && fail == "" {
				fail = fmt.Sprintf("%d×%d×%d product (trans %v, %v; α %v, β %v): C[%d,%d] = %v, float64 %v: %.3g apart, bound %.3g",
					m, n, k, transA, transB, alpha, beta, i, j, c[i*ldc+j], ref, d, bound)
			}
			if d > 0 {
				worst = max(worst, d/bound)
			}
		}
	}
	bc.mu.Lock()
	defer bc.mu.Unlock()
	bc.calls++
	bc.worst = max(bc.worst, worst)
	if bc.fail == "" {
		bc.fail = fail
	}
}

// checkedGemmer is a bf16 GEMM whose every product boundCheck checks.
type checkedGemmer struct {
	blas.BF16Gemmer
	*boundCheck
}

func (g checkedGemmer) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	g.check(transA, transB, m, n, k, alpha, blas.BF16Matrix{Bits: a, Ld: lda}, blas.BF16Matrix{Bits: b, Ld: ldb}, beta, c, ldc, func() {
		g.BF16Gemmer.GemmBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	})
}

// checkedPacker is checkedGemmer for a GEMM that also takes float32
// operands (bf16Packer), the entry point attention's products use there.
// A product given op(B) packed in advance (a weight's, Engine.gemmBF16)
// is checked on b, the operand the packing was made from, which the
// caller passes beside it: a stale packing fails the check.
type checkedPacker struct {
	checkedGemmer
	p bf16Packer
}

func (g checkedPacker) Gemm(transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, pb *blas.PackedBF16, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	g.check(transA, transB, m, n, k, alpha, a, b, beta, c, ldc, func() {
		g.p.Gemm(transA, transB, m, n, k, alpha, a, b, pb, beta, c, ldc, done)
	})
}

func (g checkedPacker) PackB(into *blas.PackedBF16, transB bool, k, n int, b blas.BF16Matrix) *blas.PackedBF16 {
	return g.p.PackB(into, transB, k, n, b)
}

// checked wraps g in boundCheck bc, keeping its entry points.
func checked(g blas.BF16Gemmer, bc *boundCheck) blas.BF16Gemmer {
	cg := checkedGemmer{BF16Gemmer: g, boundCheck: bc}
	if p, ok := g.(bf16Packer); ok {
		return checkedPacker{checkedGemmer: cg, p: p}
	}
	return cg
}

// TestAttentionOnBF16Units runs attention's forward pass and its three
// input gradients, both kernels, under the bf16 policy, on each bf16 GEMM
// that runs here (oneDNN's and the native AMX and VDPBF16PS kernels where
// the CPU has them; the native driver on its Go models of both kernels
// everywhere):
//
//   - every product is checked on its actual operands against float64,
//     within boundCheck's γ_(k+2) bound: this isolates the GEMM;
//   - the outputs and gradients against the emulated full kernel within
//     attnBound, which bounds any two correct computations of attention
//     whose fp32 sums take different orders, propagated through the
//     softmax and each rounding to bf16 from float64 intermediates (the
//     bf16 units sum the same exact products in fp32);
//   - the same bits with 1 and with 3 workers, in the engine and in the
//     GEMM: one unit of work is one (batch row, key/value head) pair, and
//     each bf16 GEMM's sums do not depend on its thread count.
func TestAttentionOnBF16Units(t *testing.T) {
	p := amp.DefaultPolicy(amp.BF16)
	ones, threes := realBF16Gemmers(t, 1), realBF16Gemmers(t, 3)
	cases := attnBF16Cases
	if raceEnabled {
		cases = attnBF16RaceCases
	}
	for _, tc := range cases {
		emu := runAttentionPolicy(t, tc.s, AttentionFull, tensor.Float32, &p, &Engine{BLAS: blas.Native{Workers: 2}, Workers: 2})
		bound := attnBound(tc.s, amp.BF16, emu)
		for gi, one := range ones {
			for _, k := range attnKernels {
				t.Run(fmt.Sprintf("%s/%s/%s", tc.name, one.Name(), k.name), func(t *testing.T) {
					var bc boundCheck
					run := func(g blas.BF16Gemmer, workers int) attnResult {
						return runAttentionPolicy(t, tc.s, k.kind, tensor.Float32, &p, &Engine{BLAS: blas.Native{Workers: workers}, BF16: checked(g, &bc), Workers: workers})
					}
					r1 := run(one, 1)
					r3 := run(threes[gi], 3)
					if bc.fail != "" {
						t.Fatalf("%d products checked: %s", bc.calls, bc.fail)
					}
					if want := 2 * attnProducts(tc.s, k.kind, attnPaths{true, true, true, true, true, true}); int64(bc.calls) != want {
						t.Fatalf("%d products on the bf16 GEMM, want %d", bc.calls, want)
					}
					sameAttnBits(t, "3 workers against 1", r3, r1)
					group := tc.s.Heads / tc.s.KVHeads
					msg := fmt.Sprintf("%s, %s, %s kernel: %d products (runs on 1 and 3 workers), worst %.3g of the γ_(k+2) bound; against the emulation, of attnBound:",
						one.Name(), tc.name, k.name, bc.calls, bc.worst)
					for _, c := range []struct {
						name             string
						got, want, bound []float64
					}{{"out", r1.out, emu.out, bound.out}, {"dq", r1.dq, emu.dq, bound.dq}, {"dk", r1.dk, emu.dk, bound.dk}, {"dv", r1.dv, emu.dv, bound.dv}} {
						i, worst := withinBound(c.got, c.want, c.bound)
						if i >= 0 {
							t.Errorf("%s[%d] = %v, emulated %v: more than %.3g apart (attnBound, group %d)", c.name, i, c.got[i], c.want[i], c.bound[i], group)
						}
						msg += fmt.Sprintf(" %s %.3g", c.name, worst)
					}
					t.Log(msg)
				})
			}
		}
	}
}
