package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
)

// TestSumEngineAdd holds sumEngine's Add, split over 3 workers, to x + y
// in float32 element by element (the reference: one rounding per
// element, nothing else), into each destination tensor.Add can name: a
// new tensor, the reused one and, unsafe, a itself; and checks that the
// cases it leaves to the standard engine still add.
func TestSumEngineAdd(t *testing.T) {
	e := NewEngine(blas.Native{Workers: 3})
	e.Workers = 3
	s := sumEngine{eng: e}
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 3*(1<<14) + 77 // several chunks and a ragged end
	newT := func() (*tensor.Dense, []float32) {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64())
		}
		return tensor.New(tensor.WithShape(n), tensor.WithBacking(d), tensor.WithEngine(s)), d
	}
	check := func(name string, got tensor.Tensor, x, y []float32) {
		t.Helper()
		g := got.Data().([]float32)
		for i := range g {
			if want := x[i] + y[i]; math.Float32bits(g[i]) != math.Float32bits(want) {
				t.Fatalf("%s: element %d = %v, want %v + %v = %v", name, i, g[i], x[i], y[i], want)
			}
		}
	}
	a, x := newT()
	b, y := newT()
	got, err := tensor.Add(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got == tensor.Tensor(a) || got == tensor.Tensor(b) {
		t.Fatal("a safe add wrote into an operand")
	}
	check("new tensor", got, x, y)

	reuse, _ := newT()
	if got, err = tensor.Add(a, b, tensor.WithReuse(reuse)); err != nil || got != tensor.Tensor(reuse) {
		t.Fatalf("add with reuse returned %p (err %v), want the reused tensor %p", got, err, reuse)
	}
	check("reused", got, x, y)

	xs := append([]float32(nil), x...)
	if got, err = tensor.Add(a, b, tensor.UseUnsafe()); err != nil || got != tensor.Tensor(a) {
		t.Fatalf("unsafe add returned %p (err %v), want a %p", got, err, a)
	}
	check("in place", got, xs, y)

	// left to the standard engine: an increment, c += a2 + b
	c, z := newT()
	zs := append([]float32(nil), z...)
	a2, x2 := newT()
	if _, err = tensor.Add(a2, b, tensor.WithIncr(c)); err != nil {
		t.Fatal(err)
	}
	for i, v := range c.Data().([]float32) {
		if w := zs[i] + (x2[i] + y[i]); math.Float32bits(v) != math.Float32bits(w) {
			t.Fatalf("increment: element %d = %v, want %v", i, v, w)
		}
	}
}

// TestTapeMachineUsesSumEngine checks that a graph run by NewTapeMachine
// hands gorgonia's gradient sums to sumEngine: x read by two ops gets the
// sum of their gradients, and the values the machine holds carry the
// engine.
func TestTapeMachineUsesSumEngine(t *testing.T) {
	e := NewEngine(blas.Native{Workers: 2})
	e.Workers = 2
	g := G.NewGraph()
	const n = 1 << 16
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(i%97) / 7
	}
	x := G.NewTensor(g, tensor.Float32, 1, G.WithShape(n), G.WithName("x"), G.WithValue(tensor.New(tensor.WithShape(n), tensor.WithBacking(xs))))
	y := G.Must(G.Add(G.Must(G.HadamardProd(x, x)), G.Must(G.Mul(x, G.NewConstant(float32(3))))))
	cost := G.Must(G.Sum(y))
	if _, err := G.Grad(cost, x); err != nil {
		t.Fatal(err)
	}
	vm := NewTapeMachine(e, g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	gv, err := x.Grad()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := gv.(tensor.Tensor).Engine().(sumEngine); !ok {
		t.Fatalf("x's gradient is on %T, want sumEngine", gv.(tensor.Tensor).Engine())
	}
	for i, v := range gv.Data().([]float32) {
		// x + x + 3 in float32 against 2x + 3: a few roundings apart
		if want := 2*float64(xs[i]) + 3; math.Abs(float64(v)-want) > 1e-6*want {
			t.Fatalf("dcost/dx[%d] = %v, want %v", i, v, want)
		}
	}
}
