package vkengine

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// doraModule is the adapted module of the DoRA tests: W [out, in] with
// row zeroRow all zeros (its norm is DoRANormFloor, as a real
// checkpoint's zero rows are).
const (
	doraOut, doraIn, doraRank = 10, 24, 4
	doraZeroRow               = 3
)

// doraAdapter is a one-module DoRA adapter initialized by peft.New from
// W's values (the 16-bit ones with stored set), then moved off its
// initialization so that every term counts: B random (but zero in the zero
// row, which so stays at the floor) and each magnitude scaled by its own
// factor, so g = m/norm is neither 1 nor the same in every row.
func doraAdapter(t *testing.T, w []float32, stored amp.Format) *peft.Adapter {
	t.Helper()
	wt := &model.Tensor{Shape: []int{doraOut, doraIn}, Data: w}
	if stored != amp.FP32 {
		wt = &model.Tensor{Shape: wt.Shape, Bits: make([]uint16, len(w)), Format: stored}
		for i, v := range w {
			wt.Bits[i] = stored.Bits16(v)
		}
	}
	c := peft.Config{R: doraRank, Alpha: 8, UseDoRA: true, TargetModules: []string{"proj"}}
	l, err := peft.New(c, []peft.Target{{Path: "proj", Out: doraOut, In: doraIn}}, 11, map[string]*model.Tensor{"proj.weight": wt})
	if err != nil {
		t.Fatal(err)
	}
	m := l.Module("proj")
	copy(m.B, randoms(12, len(m.B), 0.3))
	clear(m.B[doraZeroRow*doraRank : (doraZeroRow+1)*doraRank])
	for o := range m.M {
		m.M[o] *= float32(0.7 + 0.06*float64(o))
	}
	return l
}

// doraWeight is W's values for out features: sd 0.2, one zero row.
func doraWeight(out int) []float32 {
	w := randoms(2, out*doraIn, 0.2)
	clear(w[doraZeroRow*doraIn : (doraZeroRow+1)*doraIn])
	return w
}

// TestDoRAPEFT: a DoRA'd linear module built by peft's own graph function
// (Adapter.Linear, without dropout), under the fp32 and bf16 policies,
// with an fp32 base weight and with a frozen bf16 one: output, dx, dA, dB
// and the magnitude's gradient.
//
// Bounds. The output and every gradient are sums of K ≤ 24 products
// (the linears; dm sums N = 6 rows) chained through a few ops, with
// Σ|a||b| within about 8× the largest value here, so each fp32 result is
// within γ_24·8 ≈ 1.2e-5 of the largest value in any order; the norm
// adds at most (2r + 10)·u ≈ 1e-6 relative (lower_dora.go): 2e-5 holds
// for any correct fp32 implementation. With the bf16 policy the linears'
// inputs, outputs and the gradients of base and lora are rounded to bf16
// (relative 2^-8 each): a few ulps, 4·2^-8 off float64 (the float64
// graph has no policy: it is the fp32 computation); against the CPU's
// float32, which rounds the same values, the fp32 sums differ by at most
// 2.5e-5 of the largest value, which moves a result across at most one
// bf16 rounding boundary: 2^-7 of it. A 16-bit base's float64 weight
// holds the widened values exactly, so the same bounds apply.
func TestDoRAPEFT(t *testing.T) {
	e := openEngine(t)
	bf16 := amp.DefaultPolicy(amp.BF16)
	cases := []struct {
		name   string
		policy *amp.Policy
		stored amp.Format // the base weight's format
		tol    float64
	}{
		{"fp32", nil, amp.FP32, 2e-5},
		{"fp32, bf16 base", nil, amp.BF16, 2e-5},
		{"fp32, fp16 base", nil, amp.FP16, 2e-5},
		{"bf16", &bf16, amp.FP32, 4 * 0x1p-8},
		{"bf16, bf16 base", &bf16, amp.BF16, 4 * 0x1p-8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wv := doraWeight(doraOut)
			l := doraAdapter(t, wv, tc.stored)
			build := func(b *nn.Builder) (*G.Node, G.Nodes) {
				x := param(b, "x", 1, 1, true, 6, doraIn)
				var w *G.Node
				if tc.stored == amp.FP32 {
					w = b.Param("proj.weight", []int{doraOut, doraIn}, wv, false)
				} else {
					w = weight16(b, "proj.weight", wv, tc.stored, amp.FP32, doraOut, doraIn)
				}
				nodes := map[string]*G.Node{}
				y := l.Linear(nodes)(b, "proj", x, w, nil)
				return y, G.Nodes{x, nodes[peft.KeyA("proj")], nodes[peft.KeyB("proj")], nodes[peft.KeyM("proj")]}
			}
			c := opCase{name: "dora " + tc.name, policy: tc.policy, build: build, tol: tc.tol}
			checkCase(t, e, c)
			cpuTol := 2.5e-5
			if tc.policy != nil {
				cpuTol += 0x1p-7
			}
			checkAgainstCPU32(t, e, c, cpuTol)
			if tc.policy != nil {
				t.Logf("%d values rounded to 16 bits on the device", checkRoundedFormats(t, e, c))
			}
		})
	}
}

// TestDoRAOps: nn.DoRA with its dropout form (base = W·x, baseD = W·x_d,
// lora = B·A·x_d, x_d standing for dropout(x)) and a trainable W, so
// every gradient the op gives is taken: base, baseD, lora and m; with 10
// output features and with 300 (more than one 256-wide workgroup of
// columns for the magnitude's sums). Bounds as TestDoRAPEFT's, with
// K = max(24, out) products per sum (dx and dx_d sum over the features):
// γ_K·8 of the largest value, 2e-5 for 10 features and 1.43e-4 for 300
// (γ_300 = 300u/(1 − 300u)), twice that between two fp32 engines.
func TestDoRAOps(t *testing.T) {
	e := openEngine(t)
	bf16 := amp.DefaultPolicy(amp.BF16)
	const s = 1.5
	for _, out := range []int{doraOut, 300} {
		tol := max(2e-5, 8*float64(out)*u/(1-float64(out)*u)) // max(2e-5, 8·γ_out)
		build := func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, true, 6, doraIn)
			xd := param(b, "xd", 5, 1, true, 6, doraIn)
			w := b.Param("w", []int{out, doraIn}, doraWeight(out), true)
			a := param(b, "a", 3, 0.2, true, doraRank, doraIn)
			bb := param(b, "b", 4, 0.3, true, out, doraRank)
			m := param(b, "m", 6, 1, true, out)
			lora := b.Linear(b.Linear(xd, a), bb)
			y := b.DoRA(b.Linear(x, w), b.Linear(xd, w), lora, m, b.DoRANorm(w, a, bb, s, "proj"), s)
			return y, G.Nodes{x, xd, w, a, bb, m}
		}
		name := fmt.Sprintf("dora dropout, %d features", out)
		checkCase(t, e, opCase{name: name + ", fp32", build: build, tol: tol})
		c := opCase{name: name + ", bf16", policy: &bf16, build: build, tol: 4 * 0x1p-8}
		checkCase(t, e, c)
		checkAgainstCPU32(t, e, c, 0x1p-7+2*tol)
		t.Logf("%d values rounded to 16 bits on the device", checkRoundedFormats(t, e, c))
	}
}

// runNorms runs a graph of DoRANorm alone (it has no gradient) in dtype
// dt on the CPU, or on e when e is set, and returns the norms.
func runNorms(t *testing.T, e *Engine, dt tensor.Dtype, build func(b *nn.Builder) *G.Node) []float64 {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, dt)
	out := build(b)
	if e == nil {
		vm := G.NewTapeMachine(b.G)
		defer vm.Close()
		if err := b.Eng.Run(vm, nn.Pass{}); err != nil {
			t.Fatal(err)
		}
		return float64s(out.Value().Data())
	}
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Run(nn.Pass{}); err != nil {
		t.Fatal(err)
	}
	v := make([]float32, prod(out.Shape()))
	if err := p.Read(out, v); err != nil {
		t.Fatal(err)
	}
	return float64s(v)
}

// normBound is twice the bound TestDoRANorm derives for row o's norm,
// whose float64 value is ref: (2r + 10)·u·‖|W| + |s·B|·|A|‖ + 3u·ref.
func normBound(w, a, b []float32, o, in, r int, s, ref float64) float64 {
	var mag float64 // ‖|W| + |s·B|·|A|‖ of the row
	for j := range in {
		v := math.Abs(float64(w[o*in+j]))
		for k := range r {
			v += math.Abs(s*float64(b[o*r+k])) * math.Abs(float64(a[k*in+j]))
		}
		mag += v * v
	}
	return 2 * (float64(2*r+10)*u*math.Sqrt(mag) + 3*u*ref)
}

// TestDoRANorm: the row norms against float64, row by row, for wide rows
// (in = 600 > 256 columns: the strided columns and the whole reduction
// tree), rows of zeros (at the floor), a row whose update cancels most of
// W, and fp32, bf16 and fp16 weights.
//
// Bound: with v = W[o] + s·B[o]·A, each fp32 v_j is within
// γ_{2r+1}·(|W_j| + Σ|s·B_k||A_kj|) of exact, the sum of squares within
// (2u + 8u)·Σv² (compensated sum, 8-level tree) and sqrt a few ulps, so
// |norm − exact| ≤ (2r + 10)·u·‖|W| + |s·B|·|A|‖ + 3u·norm. The test
// computes ‖|W| + |s·B|·|A|‖ per row and allows 2× that bound (the float64
// reference rounds once: half an ulp more).
func TestDoRANorm(t *testing.T) {
	e := openEngine(t)
	const out, in, r, s = 7, 600, 4, 0.75
	for _, stored := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
		t.Run(stored.String(), func(t *testing.T) {
			wv := randoms(21, out*in, 0.1)
			av := randoms(22, r*in, 0.2)
			bv := randoms(23, out*r, 0.5)
			clear(wv[1*in : 2*in]) // a zero row with a zero update: the floor
			clear(bv[1*r : 2*r])
			clear(wv[4*in : 5*in]) // a zero row with an update
			wide := make([]float32, len(wv))
			for i, v := range wv {
				wide[i] = v
				if stored != amp.FP32 {
					wide[i] = stored.FromBits16(stored.Bits16(v))
				}
			}
			// row 5 is mostly cancelled: W[5] = −s·B[5]·A (in fp32) + small
			for j := range in {
				var upd float64
				for k := range r {
					upd += s * float64(bv[5*r+k]) * float64(av[k*in+j])
				}
				wide[5*in+j] = float32(-upd) + 1e-3*wide[5*in+j]
				if stored != amp.FP32 {
					wide[5*in+j] = stored.FromBits16(stored.Bits16(wide[5*in+j]))
				}
			}
			build := func(b *nn.Builder) *G.Node {
				var w *G.Node
				if stored == amp.FP32 || b.Dtype == tensor.Float64 {
					w = b.Param("w", []int{out, in}, wide, false)
				} else {
					w = weight16(b, "w", wide, stored, amp.FP32, out, in)
				}
				return b.DoRANorm(w, b.Param("a", []int{r, in}, av, true), b.Param("b", []int{out, r}, bv, true), s, "proj")
			}
			ref := runNorms(t, nil, tensor.Float64, build)
			cpu := runNorms(t, nil, tensor.Float32, build)
			vk := runNorms(t, e, tensor.Float32, build)
			for o := range out {
				bound := normBound(wide, av, bv, o, in, r, s, ref[o])
				d := math.Abs(vk[o] - ref[o])
				if !(d <= bound) {
					t.Errorf("%s row %d: Vulkan norm %v, float64 %v: off by %.3g, bound %.3g", stored, o, vk[o], ref[o], d, bound)
				}
				t.Logf("%s row %d: norm %.6g, Vulkan off float64 by %.3g fp32 ulps relative (CPU float32 %.3g), bound %.3g",
					stored, o, ref[o], d/ref[o]/u, math.Abs(cpu[o]-ref[o])/ref[o]/u, bound/ref[o]/u)
			}
			if vk[1] != float64(float32(nn.DoRANormFloor)) {
				t.Errorf("%s: the zero row's norm is %v, want the floor %v", stored, vk[1], float32(nn.DoRANormFloor))
			}
		})
	}
}

// TestDoRANormFollowsWeights: the CPU caches the norms until the weights
// change; the device recomputes them at every run. Two runs give the same
// bits (a fixed summation order), and after B changes on the host and is
// synced the norms are those of the new weights (against float64, within
// TestDoRANorm's bound).
func TestDoRANormFollowsWeights(t *testing.T) {
	e := openEngine(t)
	const out, in, r, s = 5, 40, 3, 2.0
	wv, av, bv := randoms(31, out*in, 0.1), randoms(32, r*in, 0.2), randoms(33, out*r, 0.5)
	build := func(b *nn.Builder) (norm, bNode *G.Node) {
		bNode = b.Param("b", []int{out, r}, bv, true)
		w, a := b.Param("w", []int{out, in}, wv, false), b.Param("a", []int{r, in}, av, true)
		return b.DoRANorm(w, a, bNode, s, "proj"), bNode
	}
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	norm, bNode := build(b)
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	run := func() []float32 {
		if err := p.Run(nn.Pass{}); err != nil {
			t.Fatal(err)
		}
		v := make([]float32, out)
		if err := p.Read(norm, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	first, again := run(), run()
	for o := range first {
		if math.Float32bits(first[o]) != math.Float32bits(again[o]) {
			t.Fatalf("row %d: runs give %v and %v", o, first[o], again[o])
		}
	}
	for i := range bv { // bNode's value shares bv
		bv[i] = -2 * bv[i]
	}
	if err := p.SyncParams(bNode); err != nil {
		t.Fatal(err)
	}
	got := run()
	ref := runNorms(t, nil, tensor.Float64, func(b *nn.Builder) *G.Node { n, _ := build(b); return n })
	for o := range got {
		bound := normBound(wv, av, bv, o, in, r, s, ref[o])
		if d := math.Abs(float64(got[o]) - ref[o]); !(d <= bound) || got[o] == first[o] {
			t.Errorf("row %d after B changed: Vulkan %v (before %v), float64 %v, bound %.3g", o, got[o], first[o], ref[o], bound)
		}
	}
}
