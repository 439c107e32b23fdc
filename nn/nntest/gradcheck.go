// Package nntest checks gradients of gorgonia graphs against float64
// central differences, for the tests of nn and of the packages built on it.
package nntest

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
)

// GradCheck compares the gradients of cost with respect to params, taken
// by the graph, with float64 fourth-order central differences,
//
//	f'(x) ≈ (8·(f(x+h) − f(x−h)) − (f(x+2h) − f(x−2h))) / 12h,  h = 3e-4·max(1, |x|),
//
// whose truncation error is O(h⁴) and rounding error O(ε/h): 1e-9 or less
// on the graphs of nn, model and peft (second-order differences with
// h = 1e-6 left up to 1.3e-8). It fails when, for some param, either
//
//   - the relative error ‖analytic − numeric‖ / max(‖analytic‖, ‖numeric‖), or
//   - some element's |analytic − numeric| / max(s, 1e-3), with s the
//     param's largest |numeric| element,
//
// exceeds tol, and returns the worst of both measures over all params.
func GradCheck(t testing.TB, g *G.ExprGraph, cost *G.Node, params []*G.Node, tol float64, opts ...Option) float64 {
	t.Helper()
	grads, err := G.Grad(cost, params...)
	if err != nil {
		t.Fatalf("Grad: %v", err)
	}
	return compare(t, g, cost, grads, 1, params, tol, opts)
}

// Option changes how a gradient check runs the graph.
type Option func(*checkConfig)

type checkConfig struct {
	run func(G.VM) error
}

// RunWith runs the graph with run, which starts vm from the beginning,
// instead of vm.RunAll: for graphs whose ops read a per-run state, such as
// the noise key of dropout (nn.Engine.Run).
func RunWith(run func(vm G.VM) error) Option {
	return func(c *checkConfig) { c.run = run }
}

// GradCheckSeeded is GradCheck for gradients taken as a training loop takes
// them, by G.Backpropagate from seed, a scalar input node whose value the
// caller has set: they are compared with seed's value times the central
// differences of cost. Ops that treat their output's gradient node
// specially (nn.LMHeadLoss) are checked this way.
func GradCheckSeeded(t testing.TB, g *G.ExprGraph, cost, seed *G.Node, params []*G.Node, tol float64) float64 {
	t.Helper()
	grads, err := G.Backpropagate(G.Nodes{cost}, G.Nodes{seed}, params)
	if err != nil {
		t.Fatalf("Backpropagate: %v", err)
	}
	return compare(t, g, cost, grads, scalar(seed.Value()), params, tol, nil)
}

// compare runs the graph, reads the gradient nodes and checks them
// against seed times the central differences of cost.
func compare(t testing.TB, g *G.ExprGraph, cost *G.Node, grads G.Nodes, seed float64, params []*G.Node, tol float64, opts []Option) float64 {
	t.Helper()
	cfg := checkConfig{run: func(vm G.VM) error {
		vm.Reset()
		return vm.RunAll()
	}}
	for _, o := range opts {
		o(&cfg)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	eval := func() float64 {
		if err := cfg.run(m); err != nil {
			t.Fatalf("run: %v", err)
		}
		return scalar(cost.Value())
	}
	eval()
	analytic := make([][]float64, len(params))
	for i, g := range grads {
		analytic[i] = append([]float64(nil), g.Value().Data().([]float64)...)
	}
	worst := 0.0
	for i, p := range params {
		x := p.Value().Data().([]float64)
		numeric := make([]float64, len(x))
		for j := range x {
			orig := x[j]
			h := 3e-4 * max(1, math.Abs(orig))
			at := func(d float64) float64 {
				x[j] = orig + d
				return eval()
			}
			f1, fm1, f2, fm2 := at(h), at(-h), at(2*h), at(-2*h)
			x[j] = orig
			numeric[j] = seed * (8*(f1-fm1) - (f2 - fm2)) / (12 * h)
		}
		var diff, na, nu, scale float64
		for j := range x {
			d := analytic[i][j] - numeric[j]
			diff += d * d
			na += analytic[i][j] * analytic[i][j]
			nu += numeric[j] * numeric[j]
			scale = max(scale, math.Abs(numeric[j]))
		}
		rel := math.Sqrt(diff) / max(math.Sqrt(na), math.Sqrt(nu), 1e-300)
		if na == 0 && nu == 0 {
			rel = 0
		}
		if rel > tol {
			t.Errorf("%s: relative gradient error %.3g > %g", p.Name(), rel, tol)
		}
		elem := 0.0
		for j := range x {
			e := math.Abs(analytic[i][j]-numeric[j]) / max(scale, 1e-3)
			if e > tol && elem <= tol {
				t.Errorf("%s[%d]: analytic %.15g, numeric %.15g (error %.3g of the largest element)", p.Name(), j, analytic[i][j], numeric[j], e)
			}
			elem = max(elem, e)
		}
		worst = max(worst, rel, elem)
	}
	return worst
}

// scalar reads a float scalar value.
func scalar(v G.Value) float64 {
	switch x := v.Data().(type) {
	case float64:
		return x
	case float32:
		return float64(x)
	}
	panic(fmt.Sprintf("nntest: cost is not a float scalar: %T", v.Data()))
}
