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
// by the graph, with float64 central differences. It returns the worst
// relative error, measured per param as ‖analytic − numeric‖ / max(‖analytic‖, ‖numeric‖),
// and fails on any single element whose error exceeds tol relative to the
// param's gradient scale.
func GradCheck(t testing.TB, g *G.ExprGraph, cost *G.Node, params []*G.Node, tol float64) float64 {
	t.Helper()
	grads, err := G.Grad(cost, params...)
	if err != nil {
		t.Fatalf("Grad: %v", err)
	}
	m := G.NewTapeMachine(g)
	defer m.Close()
	eval := func() float64 {
		m.Reset()
		if err := m.RunAll(); err != nil {
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
			h := 1e-6 * max(1, math.Abs(orig))
			x[j] = orig + h
			fp := eval()
			x[j] = orig - h
			fm := eval()
			x[j] = orig
			numeric[j] = (fp - fm) / (2 * h)
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
		worst = max(worst, rel)
		if rel > tol {
			t.Errorf("%s: relative gradient error %.3g > %g", p.Name(), rel, tol)
		}
		for j := range x {
			if d := math.Abs(analytic[i][j] - numeric[j]); d > tol*max(scale, 1e-3) {
				t.Errorf("%s[%d]: analytic %.10g, numeric %.10g", p.Name(), j, analytic[i][j], numeric[j])
				break
			}
		}
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
