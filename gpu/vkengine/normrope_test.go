package vkengine

import (
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/nn"
)

// bf16Tol bounds a case computed under amp.DefaultPolicy(amp.BF16)
// against float64 with no rounding at all: values are rounded to bf16
// (relative 2^-9) at the linear layers' outputs and gradients, and two
// engines whose fp32 sums differ in the last bit can round to
// neighbouring bf16 values: a few bf16 ulps of the largest value.
const bf16Tol = 4 * 0x1p-8

// TestRMSNorm compares RMSNorm's forward, dx and dw on the Vulkan engine
// with the float64 graph, for plain rows, Qwen3's per-head variant, rows
// wider than a workgroup (300 > 256), and enough rows (70) that dw sums
// several chunks; and with only dx or only dw wanted.
//
// The bound (fp32): with k = ⌈d/256⌉ and u = 2^-24, rstd is within
// δ = ½γ_{k+10} + 4u of exact (shaders/rmsnorm.comp), y within δ + 3u.
// dx = rstd·(h − x·c), h = g⊙w, c = (Σ h·x)·rstd²/d: the sum is within
// γ_{k+10}·Σ|h·x|, so c is off by (γ_{k+13} + 2δ)·rstd²·Σ|h·x|/d ≤
// (γ_{k+13} + 2δ)·rstd·max|h| (mean |x̂| ≤ 1), and |Δdx_j| ≤ (δ+2u)·|dx_j|
// + rstd·max|h|·(u + γ_2·|x̂_j|·|c|/rstd + |x̂_j|·(γ_{k+13} + 2δ)). With
// k ≤ 2, |x̂_j| ≤ 4 and rstd·max|h| ≤ 2·max|dx| for these normal inputs
// that is under 300u = 1.8e-5 of max|dx|. dw_j = Σ_r g·x̂ over ≤ 70 rows
// in sequential chunk sums of depth ≤ 26 (gpu/vulkan's rmsDWChunks): within
// (γ_26 + δ + 2u)·Σ_r|g·x̂| ≤ 40u·Σ|g·x̂|, and Σ|g·x̂| stays under 4× max|dw|
// here. 2e-5 of each tensor's largest value holds for any correct fp32
// implementation.
func TestRMSNorm(t *testing.T) {
	e := openEngine(t)
	rms := func(n, heads, d int, wantX, wantW bool) func(b *nn.Builder) (*G.Node, G.Nodes) {
		return func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, wantX, n, heads*d)
			w := param(b, "w", 2, 1, wantW, d)
			var wrt G.Nodes
			if wantX {
				wrt = append(wrt, x)
			}
			if wantW {
				wrt = append(wrt, w)
			}
			return b.RMSNormHeads(x, w, heads, 1e-6), wrt
		}
	}
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, c := range []opCase{
		{name: "rows", build: rms(6, 1, 40, true, true), tol: 2e-5},
		{name: "heads", build: rms(5, 4, 16, true, true), tol: 2e-5},
		{name: "wide rows", build: rms(3, 1, 300, true, true), tol: 2e-5},
		{name: "many rows", build: rms(70, 1, 24, true, true), tol: 2e-5},
		{name: "heads many rows", build: rms(9, 8, 8, true, true), tol: 2e-5},
		{name: "dx only", build: rms(6, 2, 12, true, false), tol: 2e-5},
		{name: "dw only", build: rms(6, 2, 12, false, true), tol: 2e-5},
		// A bf16 linear feeds the norm: rmsnorm computes in fp32 and its
		// dx is rounded to the linear output's bf16.
		{name: "after bf16 linear", policy: &bf16, tol: bf16Tol, build: func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, true, 6, 32)
			wl := param(b, "wl", 3, 0.2, true, 4*16, 32)
			w := param(b, "w", 2, 1, true, 16)
			return b.RMSNormHeads(b.Linear(x, wl), w, 4, 1e-6), G.Nodes{x, wl, w}
		}},
	} {
		t.Run(c.name, func(t *testing.T) { checkCase(t, e, c) })
	}
}
