package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// TestAddLinearFused: AddLinear under FuseAdapterAdd on a bf16 GEMM that
// hands finished blocks to an epilogue (the native driver on its Go model
// of VDPBF16PS) defers the linear op and forms base + s·(x·Wᵀ) as the
// GEMM's epilogue, with AddScaled's bits for the output and for the
// gradients of base, x and W; with a scale of 1 and not, a product wide
// enough for tiles and a thin one (which runs transposed), and base in
// bf16 and in fp32. Without a GEMM that takes an epilogue (the
// emulation), nothing is deferred.
func TestAddLinearFused(t *testing.T) {
	for _, c := range []struct {
		n, in, out int
		s          float64
		base32     bool
	}{{40, 8, 70, 2, false}, {40, 8, 70, 1, true}, {60, 16, 5, 0.5, false}} {
		t.Run(fmt.Sprintf("%dx%dx%d/s%v/fp32base%v", c.n, c.out, c.in, c.s, c.base32), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(c.n), uint64(c.out)))
			vals := func(k int) []float32 {
				v := make([]float32, k)
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
				return v
			}
			xs, ws, bs := vals(c.n*c.in), vals(c.out*c.in), vals(c.n*c.out)
			run := func(g blas.BF16Gemmer, fuse bool) (out []float32, grads [][]float32, deferred bool) {
				b := NewBuilder(&Engine{BLAS: blas.Native{Workers: 2}, BF16: g, Workers: 2}, tensor.Float32)
				p := amp.DefaultPolicy(amp.BF16)
				b.Policy = &p
				b.FuseAdapterAdd = fuse
				x := b.Param("x", []int{c.n, c.in}, append([]float32(nil), xs...), true)
				w := b.Param("w", []int{c.out, c.in}, append([]float32(nil), ws...), true)
				base := b.Param("base", []int{c.n, c.out}, append([]float32(nil), bs...), true)
				bin := base
				if !c.base32 {
					bin = b.lower(base, amp.BF16)
				}
				y := b.Linear(x, w)
				sum := b.AddLinear(bin, y, c.s)
				lin := y.Op().(*linearOp[float32])
				gn, err := G.Grad(G.Must(G.Sum(G.Must(G.Square(sum)))), base, x, w)
				if err != nil {
					t.Fatal(err)
				}
				runGraph(t, b)
				for _, n := range gn {
					grads = append(grads, append([]float32(nil), f32(n)...))
				}
				return append([]float32(nil), f32(sum)...), grads, lin.deferred
			}
			model := blas.NewNativeBF16Go(2)
			want, wantG, _ := run(model, false)
			got, gotG, deferred := run(model, true)
			if !deferred {
				t.Fatal("the linear op was not deferred")
			}
			if _, _, d := run(nil, true); d {
				t.Fatal("deferred on the emulation, which has no epilogue")
			}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("sum[%d] = %v fused, %v apart", i, got[i], want[i])
				}
			}
			for k := range wantG {
				for i := range wantG[k] {
					if math.Float32bits(gotG[k][i]) != math.Float32bits(wantG[k][i]) {
						t.Fatalf("gradient %d[%d] = %v fused, %v apart", k, i, gotG[k][i], wantG[k][i])
					}
				}
			}
		})
	}
}

// TestAddPassesGradient: an add hands its output's gradient on as the
// gradient of an input with coefficient 1 whose format that gradient is
// already in (a residual's fp32 stream here; the base output of an
// adapted layer, in bf16, in TestAddLinearFused), with no op and no copy;
// the scaled input's gradient is still computed, s·g rounded to its
// format.
func TestAddPassesGradient(t *testing.T) {
	const n, d, s = 6, 10, 0.25
	rng := rand.New(rand.NewPCG(3, 9))
	vals := func() []float32 {
		v := make([]float32, n*d)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	b := NewBuilder(&Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	p := amp.DefaultPolicy(amp.BF16)
	b.Policy = &p
	x := b.Param("x", []int{n, d}, vals(), true)
	y := b.Param("y", []int{n, d}, vals(), true)
	sum := b.AddScaled(x, y, s) // fp32 + s·fp32: out fp32
	w := b.Param("w", []int{n, d}, vals(), false)
	gn, err := G.Grad(G.Must(G.Sum(G.Must(G.HadamardProd(sum, w)))), x, y)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gn[0].Op().(*pickOp[float32]); ok {
		t.Fatalf("x's gradient is a pick of the add's backward (%v), want the output's gradient", gn[0].Op())
	}
	if _, ok := gn[1].Op().(*pickOp[float32]); !ok {
		t.Fatalf("y's gradient is %v, want a pick of the add's backward", gn[1].Op())
	}
	runGraph(t, b)
	for i, wv := range f32(w) { // d loss / d sum = w
		if got := f32(gn[0])[i]; got != wv {
			t.Fatalf("d/dx[%d] = %v, want %v", i, got, wv)
		}
		if got, want := f32(gn[1])[i], s*wv; got != want {
			t.Fatalf("d/dy[%d] = %v, want %v", i, got, want)
		}
	}
}

// TestAddLinearPlannedMemory: in a graph with no backward pass, where the
// memory plan frees a value after its last reader, the deferred linear
// op's inputs stay live until the add runs its product (inputsReadLater):
// an adapter branch's output, planned and poisoned, against the same
// graph unfused and unplanned.
func TestAddLinearPlannedMemory(t *testing.T) {
	const n, in, r, out, s = 40, 16, 4, 48, 2
	rng := rand.New(rand.NewPCG(21, 22))
	vals := func(k int) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	xs, as, bs, ws := vals(n*in), vals(r*in), vals(out*r), vals(out*in)
	run := func(fuse, plan bool) []float32 {
		b := NewBuilder(&Engine{BLAS: blas.Native{Workers: 2}, BF16: blas.NewNativeBF16Go(2), Workers: 2}, tensor.Float32)
		p := amp.DefaultPolicy(amp.BF16)
		b.Policy = &p
		b.FuseAdapterAdd = fuse
		x := b.Param("x", []int{n, in}, xs, false)
		a := b.Param("a", []int{r, in}, as, false)
		bw := b.Param("b", []int{out, r}, bs, false)
		w := b.Param("w", []int{out, in}, ws, false)
		lora := b.Linear(b.Linear(x, a), bw)
		y := b.AddLinear(b.Linear(x, w), lora, s)
		sum := b.Add(y, b.Linear(x, w))
		if plan {
			if _, err := b.PlanMemory(G.Nodes{sum}, PoisonBlocks()); err != nil {
				t.Fatal(err)
			}
		}
		runGraph(t, b)
		return append([]float32(nil), f32(sum)...)
	}
	want := run(false, false)
	got := run(true, true)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("sum[%d] = %v fused and planned, %v apart and unplanned", i, got[i], want[i])
		}
	}
}
