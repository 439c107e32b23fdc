package vkengine

import (
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/nn"
)

// u is the fp32 unit roundoff.
const u = 0x1p-24

// TestLinearAddSum: a linear layer with a LoRA-style scaled branch and an
// input read by two ops (autodiff sums its gradients with gorgonia's +).
// Each value is a sum of k ≤ 24 products of values below about 4 in
// magnitude (|x|, |W|·√k, ...), so an fp32 sum in any order is within
// γ_k·Σ|a||b| ≤ 1.5e-6·Σ|a||b| of exact, and Σ|a||b| stays within about
// 8× the largest output here: a bound of 2e-5 of the largest value holds
// for any correct fp32 implementation, with the chained ops' errors added.
func TestLinearAddSum(t *testing.T) {
	e := openEngine(t)
	build := linearLoRA
	checkCase(t, e, opCase{name: "linear+lora fp32", build: build, tol: 2e-5})
	p := amp.DefaultPolicy(amp.BF16)
	// bf16: values are rounded to bf16 (relative 2^-8) at each op's
	// output, so two engines whose fp32 sums differ in the last bit can
	// round to neighbouring bf16 values: the bound is a few bf16 ulps.
	checkCase(t, e, opCase{name: "linear+lora bf16", build: build, policy: &p, tol: 4 * 0x1p-8})
}

// linearLoRA builds y = x·Wᵀ + 2·(x·Aᵀ)·Bᵀ over a 6×24 input: a linear
// layer with a LoRA-style scaled branch, x read by two ops.
func linearLoRA(b *nn.Builder) (*G.Node, G.Nodes) {
	x := param(b, "x", 1, 1, true, 6, 24)
	w := param(b, "w", 2, 0.2, true, 10, 24)
	a := param(b, "a", 3, 0.2, true, 4, 24)
	bb := param(b, "b", 4, 0.2, true, 10, 4)
	y := b.Linear(x, w)
	lora := b.Linear(b.Linear(x, a), bb)
	return b.AddScaled(y, lora, 2), G.Nodes{x, w, a, bb}
}
