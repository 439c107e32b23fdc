package vkengine

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
)

// weight16 adds a frozen weight of values vals stored in format stored
// (Builder.Param16). A float64 graph cannot hold 16-bit weights; it gets
// a float64 weight of the values the 16-bit one stands for: the stored
// values widened, and rounded to compute when a matmul computes in the
// other 16-bit format (nn's weights16 does so). Those values are exact in
// float64, so the float64 graph stays an exact reference.
func weight16(b *nn.Builder, name string, vals []float32, stored, compute amp.Format, shape ...int) *G.Node {
	bits := make([]uint16, len(vals))
	for i, v := range vals {
		bits[i] = stored.Bits16(v)
	}
	if b.Dtype == tensor.Float32 {
		return b.Param16(name, shape, bits, stored)
	}
	wide := make([]float32, len(bits))
	for i, h := range bits {
		wide[i] = stored.FromBits16(h)
		if compute != amp.FP32 && compute != stored {
			wide[i] = compute.Round(wide[i])
		}
	}
	return b.Param(name, shape, wide, false)
}

// exactSumValues are n values k/16 for integers |k| ≤ 16 (xs) or, with
// weights set, values of magnitude in [1/16, 1.5625): see
// TestWeights16Linear's exact-sum cases.
func exactSumValues(seed uint64, n int, weights bool) []float32 {
	v := randoms(seed, n, 1)
	for i, x := range v {
		if weights {
			v[i] = float32(math.Copysign(0.0625+math.Mod(math.Abs(float64(x)), 1.5), float64(x)))
		} else {
			v[i] = float32(max(-16, min(16, math.Round(float64(x)*8))) / 16)
		}
	}
	return v
}

// checkAgainstCPU32 runs c on the CPU engine in float32 and on e and
// requires every value within tol of the tensor's largest |CPU value|:
// for graphs whose float64 counterpart computes something else (16-bit
// roundings), the CPU float32 engine is the reference. It returns the
// worst relative difference.
func checkAgainstCPU32(t *testing.T, e *Engine, c opCase, tol float64) float64 {
	t.Helper()
	cpu := runCPU(t, c, tensor.Float32)
	vk := runVulkan(t, e, c)
	worstAll := 0.0
	for i := range cpu.vals {
		scale, worst := 0.0, 0.0
		for j, v := range cpu.vals[i] {
			scale = max(scale, math.Abs(v))
			worst = max(worst, math.Abs(vk.vals[i][j]-v))
		}
		if !(worst <= tol*scale) {
			t.Errorf("%s %s: Vulkan off the CPU's float32 by %.3g of the largest value %.3g (bound %.3g)",
				c.name, cpu.names[i], worst/scale, scale, tol)
		}
		worstAll = max(worstAll, worst/scale)
		t.Logf("%s %s: Vulkan %.3g of the largest |value| off the CPU's float32 (bound %.3g)", c.name, cpu.names[i], worst/scale, tol)
	}
	return worstAll
}

// TestWeights16Linear: a linear layer with a frozen 16-bit weight
// (Builder.Param16), forward and dx (a frozen weight gets no dW), for
// each policy and storage format the lowering distinguishes: fp32
// compute (the GEMM widens the bits exactly), compute in the stored
// format (the same), and compute in the other 16-bit format (the weight
// widened and rounded to it first, Kernels.Widen16).
//
// Bounds. Against float64, whose weight holds exactly the values the
// 16-bit weight stands for: with the fp32 policy each value is a sum of
// K ≤ 24 products, within γ_24·Σ|x||W| ≤ 1.5e-6·Σ|x||W| of exact in any
// order, with Σ|x||W| within about 8× the largest value here: 2e-5, as
// TestLinearAddSum. With a 16-bit policy x, the output's gradient and
// the results are rounded to 16 bits (relative 2^-8 for bf16, 2^-11
// for fp16): a few ulps, 4·2^-8, as TestLinearAddSum's bf16 case.
// Against the CPU's float32, which rounds the same inputs to the same
// formats, the engines' fp32 sums differ by at most 2·γ_24·Σ|x||W| ≤
// 2.5e-5 of the largest value, which can move a result across one
// rounding boundary: one ulp of the format, at most 2^-7 of the value
// for bf16 (2^-10 for fp16), plus the fp32 difference.
func TestWeights16Linear(t *testing.T) {
	e := openEngine(t)
	bf16, fp16 := amp.DefaultPolicy(amp.BF16), amp.DefaultPolicy(amp.FP16)
	const sumBound = 2.5e-5
	cases := []struct {
		name    string
		policy  *amp.Policy
		stored  amp.Format
		tol     float64 // against float64
		cpuTol  float64 // against the CPU's float32
		compute amp.Format
	}{
		{"fp32 policy, bf16 weight", nil, amp.BF16, 2e-5, sumBound, amp.FP32},
		{"fp32 policy, fp16 weight", nil, amp.FP16, 2e-5, sumBound, amp.FP32},
		{"bf16 policy, bf16 weight", &bf16, amp.BF16, 4 * 0x1p-8, 0x1p-7 + sumBound, amp.BF16},
		{"bf16 policy, fp16 weight", &bf16, amp.FP16, 4 * 0x1p-8, 0x1p-7 + sumBound, amp.BF16},
		{"fp16 policy, bf16 weight", &fp16, amp.BF16, 4 * 0x1p-11, 0x1p-10 + sumBound, amp.FP16},
	}
	for _, tc := range cases {
		for _, exact := range []bool{false, true} {
			name := tc.name
			if exact {
				name += ", exact sums"
			}
			t.Run(name, func(t *testing.T) {
				build := func(b *nn.Builder) (*G.Node, G.Nodes) {
					// (one node per name: gorgonia's graph merges nodes whose
					// name, type and shape are the same)
					xv, wv := randoms(1, 6*24, 1), randoms(2, 10*24, 0.2)
					if exact {
						xv, wv = exactSumValues(1, 6*24, false), exactSumValues(2, 10*24, true)
					}
					x := b.Param("x", []int{6, 24}, xv, true)
					w := weight16(b, "w", wv, tc.stored, tc.compute, 10, 24)
					return b.Linear(x, w), G.Nodes{x}
				}
				c := opCase{name: name, policy: tc.policy, build: build, tol: tc.tol}
				checkCase(t, e, c)
				checkAgainstCPU32(t, e, c, tc.cpuTol)
				if tc.policy != nil && checkRoundedFormats(t, e, c) == 0 {
					t.Error("no 16-bit values checked")
				}
				if exact {
					cpu, vk := runCPU(t, c, tensor.Float32), runVulkan(t, e, c)
					for j, v := range cpu.vals[0] {
						if vk.vals[0][j] != v {
							t.Fatalf("%s output[%d]: Vulkan %v, CPU %v: exact sums must agree bit for bit", name, j, vk.vals[0][j], v)
						}
					}
				}
			})
		}
	}
}

// checkRoundedFormats compiles c's float32 graph (with c's policy) for e,
// runs it, and requires every value an op rounds to a 16-bit format
// (its nn.OpSpec's Out: casts, low-precision matmuls, gradients of 16-bit
// values, picks of such gradients) to be a value of that format on the
// device too. Summation order cannot change this, so unlike a tolerance
// it catches a rounding the device leaves out. It returns how many
// values it checked.
func checkRoundedFormats(t *testing.T, e *Engine, c opCase) int {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	b.Policy = c.policy
	out, wrt, dy := buildCase(t, b, c)
	if _, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt); err != nil {
		t.Fatal(err)
	}
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Run(nn.Pass{Noise: 7}); err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, n := range b.G.AllNodes() {
		if n.Op() == nil || n.Dtype() != tensor.Float32 || n.IsScalar() || p.Buffer(n) == nil {
			continue
		}
		spec, err := nn.Spec(n)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Out != amp.BF16 && spec.Out != amp.FP16 {
			continue
		}
		v := make([]float32, prod(n.Shape()))
		if err := p.Read(n, v); err != nil {
			t.Fatal(err)
		}
		for i, x := range v {
			if spec.Out.Round(x) != x {
				t.Fatalf("%s: %s (%s)[%d] = %v is not a %v value", c.name, n.Name(), spec.Kind, i, x, spec.Out)
			}
		}
		checked += len(v)
	}
	return checked
}

// TestProductOperandFormats: every linear product (forward, dx, dW) says
// which formats its operands have (nn.LinearAttrs.Operands), and the GEMM
// sends a product whose operands share a 16-bit format to that format's
// tensor cores, which narrow them to 16 bits. So the values the device
// holds for those operands must be values of that format, or the tensor
// cores would multiply other numbers than the CPU: this reads them back
// after a run and checks each one. Under the fp16 and bf16 policies every
// linear product qualifies; under fp32, none.
func TestProductOperandFormats(t *testing.T) {
	e := openEngine(t)
	for _, low := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
		pol := amp.DefaultPolicy(low)
		b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
		b.Policy = &pol
		out, wrt, dy := buildCase(t, b, opCase{name: low.String(), build: linearLoRA})
		if _, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt); err != nil {
			t.Fatal(err)
		}
		p, err := e.Compile(b.G, b.IsParam)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(nn.Pass{Noise: 7}); err != nil {
			t.Fatal(err)
		}
		products, checked := map[string]int{}, 0
		for _, n := range b.G.AllNodes() {
			if n.Op() == nil {
				continue
			}
			spec, err := nn.Spec(n)
			if err != nil {
				t.Fatal(err)
			}
			a, ok := spec.Attrs.(nn.LinearAttrs)
			if !ok || (spec.Kind != "linear" && spec.Kind != "linear.dx" && spec.Kind != "linear.dw") {
				continue
			}
			products[spec.Kind]++
			if a.Operands[0] != low || a.Operands[1] != low {
				t.Errorf("%s policy: %s %s has operands %v, want both %v", low, spec.Kind, n.Name(), a.Operands, low)
			}
			for i, c := range nn.Inputs(n) {
				v := make([]float32, prod(c.Shape()))
				if err := p.Read(c, v); err != nil {
					t.Fatalf("%s: %s's operand %d: %v", low, n.Name(), i, err)
				}
				for j, x := range v {
					if a.Operands[i].Round(x) != x {
						t.Fatalf("%s policy: %s (%s) operand %d [%d] = %v is not a %v value", low, n.Name(), spec.Kind, i, j, x, a.Operands[i])
					}
				}
				checked += len(v)
			}
		}
		p.Close()
		if products["linear"] != 3 || products["linear.dx"] == 0 || products["linear.dw"] != 3 {
			t.Errorf("%s policy: products %v; want 3 linear, some linear.dx, 3 linear.dw", low, products)
		}
		t.Logf("%s: %v products, %d operand values checked", low, products, checked)
	}
}
