package nn

import (
	"math/rand/v2"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn/nntest"
)

// dropoutRun builds y = dropout(x) and d(Σ w·y)/dx with fixed weights w,
// runs it under noise key key, and returns x, y and dx.
func dropoutRun(t *testing.T, workers int, key uint64, p float64, rows, cols int) (x, y, dx []float32) {
	t.Helper()
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: workers}, tensor.Float32)
	rng := rand.New(rand.NewPCG(3, 3))
	xn := randParam(b, rng, "x", 1, rows, cols)
	yn := b.Dropout(xn, p)
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(i%7) - 3
	}
	wn := b.Param("w", []int{rows, cols}, w, false)
	cost := G.Must(G.Sum(G.Must(G.HadamardProd(yn, wn))))
	grads, err := G.Grad(cost, xn)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := b.Eng.Run(vm, Pass{Noise: key}); err != nil {
		t.Fatal(err)
	}
	return f32(xn), slices.Clone(f32(yn)), slices.Clone(f32(grads[0]))
}

// A pass's noise key holds for that run only: the next run of the same
// graph without one is an evaluation, and passes x through.
func TestRunScopesThePass(t *testing.T) {
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float32)
	x := randParam(b, rand.New(rand.NewPCG(1, 2)), "x", 1, 16, 16)
	y := b.Dropout(x, 0.5)
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := b.Eng.Run(vm, Pass{Noise: 3}); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(f32(x), f32(y)) {
		t.Fatal("a training pass dropped nothing")
	}
	vm.Reset()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f32(x), f32(y)) {
		t.Fatal("a run after a training pass still dropped values: the pass outlived its run")
	}
}

func TestDropoutForwardAndBackwardShareTheMask(t *testing.T) {
	const p, rows, cols = 0.3, 64, 50
	x, y, dx := dropoutRun(t, 2, 12345, p, rows, cols)
	kept := 0
	scale := float32(1 / (1 - p))
	for i := range x {
		w := float32(i%7) - 3
		switch y[i] {
		case 0:
			if dx[i] != 0 {
				t.Fatalf("element %d dropped in the forward pass but dx = %v", i, dx[i])
			}
		case x[i] * scale:
			kept++
			if dx[i] != w*scale {
				t.Fatalf("element %d kept: dx = %v, want %v·%v", i, dx[i], w, scale)
			}
		default:
			t.Fatalf("y[%d] = %v is neither 0 nor x/(1-p) = %v", i, y[i], x[i]*scale)
		}
	}
	// 3200 Bernoulli(0.7) draws: mean 2240, sd 26; 6 sd either side
	if kept < 2240-156 || kept > 2240+156 {
		t.Errorf("kept %d of %d elements, want about %d", kept, len(x), 2240)
	}
}

func TestDropoutMaskIsAFunctionOfKeyAndOp(t *testing.T) {
	_, y1, _ := dropoutRun(t, 1, 99, 0.5, 40, 30)
	_, y3, _ := dropoutRun(t, 3, 99, 0.5, 40, 30) // a "resumed run" on other threads
	if !slices.Equal(y1, y3) {
		t.Fatal("the same noise key and op gave different masks")
	}
	_, y2, _ := dropoutRun(t, 1, 100, 0.5, 40, 30)
	if slices.Equal(y1, y2) {
		t.Fatal("a different noise key gave the same mask")
	}
	x, y0, dx0 := dropoutRun(t, 2, 0, 0.5, 40, 30)
	if !slices.Equal(x, y0) {
		t.Fatal("noise key 0 (evaluation) must pass x through")
	}
	for i, v := range dx0 {
		if want := float32(i%7) - 3; v != want {
			t.Fatalf("evaluation dx[%d] = %v, want %v", i, v, want)
		}
	}
}

func TestDropoutGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2, pass: Pass{Noise: 777}}, tensor.Float64)
	x := randParam(b, rng, "x", 1, 6, 5)
	worst := nntest.GradCheck(t, b.G, weightedSum(t, b, b.Dropout(x, 0.4), rng), []*G.Node{x}, checkTol)
	t.Logf("worst relative error %.2g", worst)
}

func TestDropoutKeepsTheInputFormat(t *testing.T) {
	b := lowBuilder(amp.BF16)
	b.Eng.pass = Pass{Noise: 5} // as Run sets it, for the direct RunAll below
	rng := rand.New(rand.NewPCG(1, 1))
	x := b.Cast(randParam(b, rng, "x", 1, 8, 9), amp.BF16)
	y := b.Dropout(x, 0.1)
	if b.Format(y) != amp.BF16 {
		t.Fatalf("dropout of a bf16 tensor is %v", b.Format(y))
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	representable(t, "y", amp.BF16, f32(y))
	if b.Dropout(x, 0) != x {
		t.Fatal("dropout with p = 0 must add no op")
	}
}
