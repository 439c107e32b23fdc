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

// TestLinearBF16Path runs a linear layer's forward, dx and dW with and
// without a bf16 GEMM on the engine: where the policy puts both operands
// in bf16 (f = BF16) every product goes to it, with the operands as bf16
// bits, and the results, their rounding and the gradient counts are the
// emulation's; in fp16 none does.
func TestLinearBF16Path(t *testing.T) {
	const n, in, out = 7, 37, 19
	rng := rand.New(rand.NewPCG(5, 6))
	xs, ws := make([]float32, n*in), make([]float32, out*in)
	wbits := make([]uint16, out*in)
	for i := range xs {
		xs[i] = rng.Float32()*2 - 1
	}
	for i := range ws {
		ws[i] = rng.Float32()*2 - 1
		wbits[i] = amp.BF16.Bits16(ws[i])
	}
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
