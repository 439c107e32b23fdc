package nn

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn/nntest"
)

// refNorms is ‖W + s·B·A‖₂ per row, written independently of the op: the
// update matrix first, then the norms.
func refNorms(w, a, bm []float64, out, in, r int, s float64) []float64 {
	n := make([]float64, out)
	for o := 0; o < out; o++ {
		var acc float64
		for j := 0; j < in; j++ {
			var ba float64
			for k := 0; k < r; k++ {
				ba += bm[o*r+k] * a[k*in+j]
			}
			v := w[o*in+j] + s*ba
			acc += v * v
		}
		n[o] = math.Sqrt(acc)
	}
	return n
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

func runGraph(t *testing.T, b *Builder) {
	t.Helper()
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
}

func TestDoRANormValueAndCache(t *testing.T) {
	const out, in, r, s = 7, 9, 3, 0.75
	rng := rand.New(rand.NewPCG(2, 9))
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 3}, tensor.Float32)
	w, a, bm := randParam(b, rng, "w", 1, out, in), randParam(b, rng, "a", 1, r, in), randParam(b, rng, "b", 1, out, r)
	n := b.DoRANorm(w, a, bm, s, "layer.q_proj")
	if b.NeedsGrad(n) {
		t.Fatal("the norm must be detached")
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	get := func() []float32 {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		return slices.Clone(f32(n))
	}
	got := get()
	want := refNorms(to64(f32(w)), to64(f32(a)), to64(f32(bm)), out, in, r, s)
	for o := range want {
		if float32(want[o]) != got[o] { // float64 sums rounded once: the nearest float32
			t.Errorf("norm[%d] = %v, want %v", o, got[o], float32(want[o]))
		}
	}
	// A changes only at an optimizer step, which calls WeightsChanged
	f32(a)[0] += 0.5
	if !slices.Equal(get(), got) {
		t.Fatal("the norm was recomputed within a step")
	}
	b.Eng.WeightsChanged()
	if slices.Equal(get(), got) {
		t.Fatal("the norm was not recomputed after the weights changed")
	}
}

func TestDoRANormOf16BitWeightsIsTheNormOfTheirValues(t *testing.T) {
	const out, in, r = 5, 33, 2
	for _, f := range []amp.Format{amp.BF16, amp.FP16} {
		rng := rand.New(rand.NewPCG(4, 1))
		b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float32)
		bits := make([]uint16, out*in)
		for i := range bits {
			bits[i] = f.Bits16(float32(rng.NormFloat64() * 0.1))
		}
		w := b.Param16("w", []int{out, in}, bits, f)
		a := randParam(b, rng, "a", 1, r, in)
		bm := b.Param("b", []int{out, r}, make([]float32, out*r), true) // B = 0, as at initialization
		n := b.DoRANorm(w, a, bm, 2, "m")
		runGraph(t, b)
		init := make([]float32, out)
		if z := DoRARowNorms(init, nil, bits, f, f32(a), f32(bm), in, r, 2); z != 0 {
			t.Fatalf("%d rows at the floor", z)
		}
		for o := 0; o < out; o++ {
			var acc float64
			for _, v := range bits[o*in : (o+1)*in] {
				x := float64(f.FromBits16(v))
				acc += x * x
			}
			want := float32(math.Sqrt(acc))
			if f32(n)[o] != want || init[o] != want {
				t.Errorf("%v row %d: op %v, init %v, want %v", f, o, f32(n)[o], init[o], want)
			}
		}
	}
}

// A row of norm 0 is divided by DoRANormFloor, in the op and in the
// initialization alike, instead of giving Inf or NaN.
func TestDoRANormFloorsZeroRows(t *testing.T) {
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 1}, tensor.Float32)
	w := b.Param("w", []int{3, 2}, []float32{1, 2, 0, 0, 3, 4}, false)
	a := b.Param("a", []int{1, 2}, []float32{1, 1}, true)
	bm := b.Param("b", []int{3, 1}, []float32{0, 0, 0}, true)
	n := b.DoRANorm(w, a, bm, 1, "model.layers.1.mlp.up_proj")
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	want := []float32{float32(math.Sqrt(5)), DoRANormFloor, 5}
	init := make([]float32, 3)
	floored := DoRARowNorms(init, []float32{1, 2, 0, 0, 3, 4}, nil, amp.FP32, []float32{1, 1}, []float32{0, 0, 0}, 2, 1, 1)
	for o := range want {
		if f32(n)[o] != want[o] || init[o] != want[o] {
			t.Fatalf("norms %v, init %v, want %v", f32(n), init, want)
		}
	}
	if floored != 1 {
		t.Fatalf("%d rows at the floor, want 1", floored)
	}
}

// The join's gradients with respect to both branches and the magnitude, in
// both of PEFT's forms, with the norm a constant.
func TestDoRAGradients(t *testing.T) {
	for _, dropout := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(8, 8))
		b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
		base, lora := randParam(b, rng, "base", 1, 6, 5), randParam(b, rng, "lora", 1, 6, 5)
		m := randParam(b, rng, "m", 1, 5)
		norm := make([]float32, 5)
		for i := range norm {
			norm[i] = 0.5 + rng.Float32()
		}
		nn := b.Param("norm", []int{5}, norm, false)
		params := []*G.Node{base, lora, m}
		var baseD *G.Node
		if dropout {
			baseD = randParam(b, rng, "baseD", 1, 6, 5)
			params = append(params, baseD)
		}
		y := b.DoRA(base, baseD, lora, m, nn, 1.7)
		worst := nntest.GradCheck(t, b.G, weightedSum(t, b, y, rng), params, checkTol)
		t.Logf("dropout %v: worst relative error %.2g", dropout, worst)
	}
}

// doraModule builds a whole DoRA linear module on x as PEFT computes it,
// with the norm from the DoRANorm op or, when constNorm is given, that
// constant.
func doraModule(b *Builder, x, w, a, bm, m *G.Node, s, p float64, constNorm []float32) *G.Node {
	base := b.Linear(x, w)
	xd := b.Dropout(x, p)
	lora := b.Linear(b.Linear(xd, a), bm)
	var norm *G.Node
	if constNorm != nil {
		norm = b.Param("norm", []int{len(constNorm)}, constNorm, false)
	} else {
		norm = b.DoRANorm(w, a, bm, s, "mod")
	}
	var baseD *G.Node
	if p > 0 {
		baseD = b.Linear(xd, w)
	}
	return b.DoRA(base, baseD, lora, m, norm, s)
}

// Gradients of A, B, m and x through a whole module match float64 central
// differences of the same module with the norm held fixed: the detachment
// the forward pass applies. The graph with the norm op gives the same
// analytic gradients.
func TestDoRAModuleGradientsWithDetachedNorm(t *testing.T) {
	const out, in, r, s = 4, 6, 2, 1.5
	for _, p := range []float64{0, 0.3} {
		// build makes the module with the norm op, or with the norm it
		// computes at the start held as a constant
		build := func(constant bool) (*Builder, *G.Node, []*G.Node) {
			b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2, pass: Pass{Noise: 31}}, tensor.Float64)
			rng := rand.New(rand.NewPCG(6, 6))
			x := randParam(b, rng, "x", 1, 5, in)
			wd, ad, bd := randData(rng, 1, out*in), randData(rng, 0.5, r*in), randData(rng, 0.5, out*r)
			w := b.Param("w", []int{out, in}, wd, false)
			a, bm := b.Param("a", []int{r, in}, ad, true), b.Param("b", []int{out, r}, bd, true)
			m := randParam(b, rng, "m", 1, out)
			var norm []float32
			if constant {
				norm = make([]float32, out)
				DoRARowNorms(norm, wd, nil, amp.FP32, ad, bd, in, r, s)
			}
			y := doraModule(b, x, w, a, bm, m, s, p, norm)
			return b, weightedSum(t, b, y, rng), []*G.Node{x, a, bm, m}
		}
		b, cost, params := build(true)
		worst := nntest.GradCheck(t, b.G, cost, params, checkTol)
		t.Logf("dropout %g: worst relative error %.2g", p, worst)

		b1, c1, p1 := build(true)
		b2, c2, p2 := build(false)
		g1, g2 := analytic(t, b1, c1, p1), analytic(t, b2, c2, p2)
		for i := range g1 {
			for j := range g1[i] {
				if d := math.Abs(g1[i][j] - g2[i][j]); d > 1e-6*math.Max(1e-3, math.Abs(g1[i][j])) {
					t.Fatalf("dropout %g, %s[%d]: with the norm op %v, with the constant norm %v", p, p1[i].Name(), j, g2[i][j], g1[i][j])
				}
			}
		}
	}
}

func randData(rng *rand.Rand, scale float32, n int) []float32 {
	d := make([]float32, n)
	for i := range d {
		d[i] = (rng.Float32()*2 - 1) * scale
	}
	return d
}

func f32of64(n *G.Node) []float32 {
	v := n.Value().Data().([]float64)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

func analytic(t *testing.T, b *Builder, cost *G.Node, params []*G.Node) [][]float64 {
	t.Helper()
	grads, err := G.Grad(cost, params...)
	if err != nil {
		t.Fatal(err)
	}
	runGraph(t, b)
	out := make([][]float64, len(grads))
	for i, g := range grads {
		out[i] = slices.Clone(g.Value().Data().([]float64))
	}
	return out
}

// In a bf16 policy the join still computes in fp32, and the gradient of the
// bf16 base output is rounded to bf16.
func TestDoRAComputesInFP32UnderLowPrecision(t *testing.T) {
	b := lowBuilder(amp.BF16)
	rng := rand.New(rand.NewPCG(3, 1))
	x := randParam(b, rng, "x", 1, 4, 6)
	w := randParam(b, rng, "w", 1, 3, 6)
	a, bm := randParam(b, rng, "a", 1, 2, 6), randParam(b, rng, "b", 1, 3, 2)
	m := randParam(b, rng, "m", 1, 3)
	base := b.Linear(x, w)
	y := b.DoRA(base, nil, b.Linear(b.Linear(x, a), bm), m, b.DoRANorm(w, a, bm, 2, "mod"), 2)
	if b.Format(base) != amp.BF16 || b.Format(y) != amp.FP32 {
		t.Fatalf("formats: base %v, dora %v; want bf16, fp32", b.Format(base), b.Format(y))
	}
	grads, err := G.Grad(G.Must(G.Sum(y)), m, x)
	if err != nil {
		t.Fatal(err)
	}
	runGraph(t, b)
	if slices.ContainsFunc(f32(grads[0]), func(v float32) bool { return v == 0 || v != v }) {
		t.Fatalf("magnitude gradient %v", f32(grads[0]))
	}
}
