package vkengine

import (
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/gpu/vulkan/vulkantest"
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

// TestLinearLoRASplitK: linearLoRA at a shape whose adapter products
// (and the base's, over 64 outputs) the engine splits K of: x·Aᵀ and
// x·Wᵀ over K = 320 in 2 chunks, dA, dB and dW over the 384 rows in 3,
// many in one recorded batch sharing the recorder's scratch; and the
// same graph on an engine with split-K off. Each value is a chain of at
// most three products of k ≤ 384 terms (γ_386 ≤ 2.3e-5 of Σ|a||b| each,
// in any summation order) whose Σ|a||b| stays within 8× the largest
// output, as in TestLinearAddSum: 3·8·γ_386 ≈ 5.5e-4 of the largest
// value holds for any correct fp32 implementation.
func TestLinearLoRASplitK(t *testing.T) {
	e := openEngine(t)
	for _, g := range []vulkan.GemmArgs{{M: 384, N: 8, K: 320}, {M: 384, N: 64, K: 320}, {M: 8, N: 320, K: 384}, {M: 64, N: 8, K: 384}, {M: 64, N: 320, K: 384}} {
		if chunks, _ := e.Kernels.SplitK(g); chunks < 2 {
			t.Fatalf("%d×%d×%d is not split: the test would not cover split-K", g.M, g.N, g.K)
		}
	}
	build := func(b *nn.Builder) (*G.Node, G.Nodes) {
		x := param(b, "x", 1, 1, true, 384, 320)
		w := param(b, "w", 2, 0.05, true, 64, 320)
		a := param(b, "a", 3, 0.05, true, 8, 320)
		bb := param(b, "b", 4, 0.2, true, 64, 8)
		return b.AddScaled(b.Linear(x, w), b.Linear(b.Linear(x, a), bb), 2), G.Nodes{x, w, a, bb}
	}
	tol := 3 * 8 * gamma(386)
	checkCase(t, e, opCase{name: "split-K", build: build, tol: tol})
	_, dev := vulkantest.Open(t)
	off, err := NewWith(dev, vulkan.KernelOptions{NoSplitK: true})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	checkCase(t, off, opCase{name: "one pass", build: build, tol: tol})
	p := amp.DefaultPolicy(amp.BF16)
	// bf16: as TestLinearAddSum, a few bf16 ulps.
	checkCase(t, e, opCase{name: "split-K bf16", build: build, policy: &p, tol: 4 * 0x1p-8})
}
