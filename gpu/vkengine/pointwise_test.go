package vkengine

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/nn"
)

// bf16Values are n values of standard deviation sd from seed, rounded to
// bf16: inputs that every engine and the float64 reference hold exactly,
// so that a bf16 case's only roundings are the ones its ops make.
func bf16Values(seed uint64, n int, sd float64) []float32 {
	v := randoms(seed, n, sd)
	amp.BF16.RoundSlice(v)
	return v
}

// values adds a weight holding a copy of v.
func values(b *nn.Builder, name string, v []float32, trainable bool, shape ...int) *G.Node {
	return b.Param(name, shape, append([]float32(nil), v...), trainable)
}

// identity is a frozen d×d identity weight: Linear(x, identity) is x
// rounded to the linear's format, exactly (one nonzero product per sum),
// and its dx is the gradient, exactly: the way to give an op bf16 inputs
// in a float64 graph too (Cast needs a float32 graph).
func identity(b *nn.Builder, d int) *G.Node {
	v := make([]float32, d*d)
	for i := range d {
		v[i*d+i] = 1
	}
	return values(b, "identity", v, false, d, d)
}

// sigmoid64 is σ(x) in float64.
func sigmoid64(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// swigluGateRatio is max_i |g_i·u_i|·σ(a_i)·(1 + |a_i|) over the largest
// |d gate|: the per-value error bound of d gate (see TestSwiGLU) as a
// multiple of u, in the harness's measure.
func swigluGateRatio(a, up, g []float32) float64 {
	bound, largest := 0.0, 0.0
	for i := range a {
		x, s := float64(a[i]), sigmoid64(float64(a[i]))
		gu := float64(g[i]) * float64(up[i])
		bound = max(bound, math.Abs(gu)*s*(1+math.Abs(x)))
		largest = max(largest, math.Abs(gu*s*(1+x*(1-s))))
	}
	return bound / largest
}

// TestSwiGLU compares SwiGLU's output and both gradients with the float64
// graph. The bounds, with u = 2^-24 and first order in u:
//
//   - σ: e^x is nn's expf (within 2 ulp: 4u relative), 1 + e adds u·(1+e)
//     (≤ 3u relative after expf's part is damped by e/(1+e)), and Vulkan's
//     division is within 2.5 ulp (5u): σ is within 12u for x < 0
//     (e/(1+e)) and 8u for x ≥ 0 (1/(1+e)).
//   - y = (a·σ)·u and d up = (g·a)·σ: 12u + 2 roundings, within 14u of
//     each value, so 15u of the largest.
//   - d gate = ((g·u)·σ)·(1 + a·(1 − σ)): the error of 1 − σ is 12u·σ +
//     u(1 − σ), times |a| and rounded, plus the sum's and three products'
//     roundings and σ's 12u on the whole: within 18u·|g·u|·σ(a)·(1 + |a|)
//     of each value (the value itself can be 0: silu' vanishes near a =
//     −1.28). The harness measures against the largest |d gate|, so the
//     bound is 20u·swigluGateRatio (computed from the inputs).
//
// The float64 graph is exact to 1e-15; no value here is small enough for
// expf's subnormal path (|a| < 87), where a device may flush to zero.
// bf16: gate and up are bf16 values (exact in every engine), the output
// is fp32 (the policy computes silu in fp32) and the gradients are the
// fp32 values rounded to bf16, within a half ulp, 2^-8 relative (bf16
// has 8 significant bits): the bound adds 2^-8 of the largest value. Then the gradients must hold bf16
// values, which only the rounding the engine adds gives them.
func TestSwiGLU(t *testing.T) {
	e := openEngine(t)
	const n, d = 6, 40
	gate, up := bf16Values(21, n*d, 3), bf16Values(22, n*d, 1)
	dy := randoms(99, n*d, 1) // the harness's output gradient
	build := func(b *nn.Builder) (*G.Node, G.Nodes) {
		xg, xu := values(b, "gate", gate, true, n, d), values(b, "up", up, true, n, d)
		eye := identity(b, d)
		g, u := b.Linear(xg, eye), b.Linear(xu, eye)
		return b.SwiGLU(g, u), G.Nodes{g, u}
	}
	tol := max(15, 20*swigluGateRatio(gate, up, dy)) * u
	t.Logf("d gate's bound: %.3g of the largest value (%.2f·u·20)", tol, tol/u/20)
	checkCase(t, e, opCase{name: "swiglu fp32", build: build, tol: tol})
	p := amp.DefaultPolicy(amp.BF16)
	c := opCase{name: "swiglu bf16", build: build, policy: &p, tol: tol + 0x1p-8}
	checkCase(t, e, c)
	requireBF16(t, e, c, 1, 2) // the gradients
}

// requireBF16 runs c on e and requires the values of the tensors at
// indices which (0: the output, i: the gradient of wrt[i−1]) to be bf16
// values: the roundings a lowering adds, which a comparison with float64
// within a bf16 bound cannot see (an unrounded value is closer).
func requireBF16(t *testing.T, e *Engine, c opCase, which ...int) {
	t.Helper()
	vk := runVulkan(t, e, c)
	for _, i := range which {
		for j, v := range vk.vals[i] {
			if f := float32(v); amp.BF16.Round(f) != f {
				t.Fatalf("%s %s[%d] = %v is not a bf16 value", c.name, vk.names[i], j, v)
			}
		}
	}
}

// TestDropout requires the Vulkan engine's dropout, forward and backward,
// to be the CPU's bit for bit: the mask is a pure function of the noise
// key, the op's id and the row (with the engine's NoiseRowOffset), drawn
// by the same PCG, and the rest is one correctly rounded product per
// value (then a rounding to the format, itself exact). Against float64,
// whose scales 1/(1−p) are not rounded to fp32: each op's fp32 scale and
// product are within 2u, so two chained ops within 4u (5u with room for
// second-order terms). Key 0 leaves the values as they are (in bf16 the
// output gradient is rounded to bf16 on its way in: 2^-8).
// A second dropout op in the same graph must draw another mask (its id
// differs), a 3-d input draws per leading index, and key 0 is the
// identity.
func TestDropout(t *testing.T) {
	e := openEngine(t)
	chain := func(rowOffset int, shape ...int) func(b *nn.Builder) (*G.Node, G.Nodes) {
		return func(b *nn.Builder) (*G.Node, G.Nodes) {
			b.Eng.NoiseRowOffset = rowOffset
			x := param(b, "x", 31, 1, true, shape...)
			return b.Dropout(b.Dropout(x, 0.3), 0.5), G.Nodes{x}
		}
	}
	const n, d = 5, 70 // rows of 70: three mask words, the last partial
	xb := bf16Values(32, n*d, 1)
	bf16 := func(b *nn.Builder) (*G.Node, G.Nodes) {
		x := b.Linear(values(b, "x", xb, true, n, d), identity(b, d)) // xb in bf16
		return b.Dropout(x, 0.25), G.Nodes{x}
	}
	p := amp.DefaultPolicy(amp.BF16)
	eval := &nn.Pass{}
	for _, c := range []opCase{
		{name: "dropout fp32", build: chain(3, n, d), exact: true, tol: 5 * u},
		{name: "dropout fp32 3-d", build: chain(0, 2, 3, 20), exact: true, tol: 5 * u},
		{name: "dropout evaluation", build: chain(3, n, d), exact: true, pass: eval},
		{name: "dropout bf16 evaluation", build: bf16, policy: &p, exact: true, tol: 0x1p-8, pass: eval},
	} {
		checkCase(t, e, c)
	}

	checkDropoutBF16(t, e, opCase{name: "dropout bf16", build: bf16, policy: &p}, xb, 0.25)

	// The exact comparison must be able to fail: the masks drop about the
	// fraction asked for, and another key or row offset gives others.
	base := opCase{name: "dropout fp32", build: chain(3, n, d)}
	cpu := runCPU(t, base, tensor.Float32)
	zeros := 0
	for _, v := range cpu.vals[0] {
		if v == 0 {
			zeros++
		}
	}
	// kept with probability 0.7·0.5 = 0.35: 350 values, 227.5 zeros
	// expected, standard deviation 8.9
	if zeros < 180 || zeros > 275 {
		t.Errorf("the CPU's two masks zero %d of %d values; 227.5 expected", zeros, n*d)
	}
	for _, other := range []opCase{
		{name: "key 8", build: chain(3, n, d), pass: &nn.Pass{Noise: 8}},
		{name: "row offset 0", build: chain(0, n, d)},
	} {
		vk := runVulkan(t, e, other)
		same := 0
		for j, v := range vk.vals[0] {
			if v == cpu.vals[0][j] {
				same++
			}
		}
		if same == len(vk.vals[0]) {
			t.Errorf("dropout with %s gives the output of key 7 with row offset 3", other.name)
		}
	}
}

// checkDropoutBF16 checks a case whose output is Dropout(x', p) of a bf16
// x' = x (x holds bf16 values, so the rounding is exact) against the CPU's float32
// graph bit for bit. The policy's casts take op ids, so the float64
// graph's dropout has another id and draws another mask; instead each
// value is checked against its two possibilities: 0, or x'·scale in fp32
// rounded to bf16, and the gradient dx where kept is the output gradient
// rounded to bf16 on its way in, times scale, rounded to bf16 on its way
// out (0 where dropped).
func checkDropoutBF16(t *testing.T, e *Engine, c opCase, x []float32, p float64) {
	t.Helper()
	cpu := runCPU(t, c, tensor.Float32)
	vk := runVulkan(t, e, c)
	dy := randoms(99, len(x), 1)
	scale := float32(1 / (1 - p))
	dropped := 0
	for i := range vk.vals {
		for j, v := range vk.vals[i] {
			if math.Float32bits(float32(v)) != math.Float32bits(float32(cpu.vals[i][j])) {
				t.Fatalf("%s %s[%d]: Vulkan %v, CPU %v (want bit for bit)", c.name, vk.names[i], j, v, cpu.vals[i][j])
			}
		}
	}
	for j, v := range vk.vals[0] {
		kept, gj := amp.BF16.Round(x[j]*scale), amp.BF16.Round(amp.BF16.Round(dy[j])*scale)
		switch {
		case v == 0 && vk.vals[1][j] == 0:
			dropped++
		case float32(v) != kept || float32(vk.vals[1][j]) != gj:
			t.Fatalf("%s [%d]: output %v and dx %v; want 0 and 0, or %v and %v", c.name, j, v, vk.vals[1][j], kept, gj)
		}
	}
	// binomial: mean p·n, standard deviation √(p(1−p)n); 5 of those
	n := float64(len(x))
	if sd := math.Sqrt(p * (1 - p) * n); math.Abs(float64(dropped)-p*n) > 5*sd {
		t.Errorf("%s drops %d of %.0f values; %.1f ± %.1f expected", c.name, dropped, n, p*n, sd)
	}
	t.Logf("%s: bit for bit the CPU's; %d of %.0f dropped", c.name, dropped, n)
}

// absRatio is max_ij Σ_k |a_ik|·|b_kj| over max_ij |Σ_k a_ik·b_kj| for
// a [m, k] and b [k, n] row-major: how much larger than the largest
// value the error bound γ_k·Σ|a||b| of a sum of k products can be.
func absRatio(a, b []float64, m, k, n int) float64 {
	bound, largest := 0.0, 0.0
	for i := range m {
		for j := range n {
			s, sa := 0.0, 0.0
			for l := range k {
				s += a[i*k+l] * b[l*n+j]
				sa += math.Abs(a[i*k+l] * b[l*n+j])
			}
			bound, largest = max(bound, sa), max(largest, math.Abs(s))
		}
	}
	return bound / largest
}

func f64(v []float32) []float64 { return float64s(v) }

// transpose is a [rows, cols] transposed.
func transpose(a []float64, rows, cols int) []float64 {
	t := make([]float64, len(a))
	for i := range rows {
		for j := range cols {
			t[j*rows+i] = a[i*cols+j]
		}
	}
	return t
}

func ones(n int) []float64 {
	o := make([]float64, n)
	for i := range o {
		o[i] = 1
	}
	return o
}

// TestBias: AddBias is the CPU's bit for bit (one rounded sum per value
// forward; the bias gradient sums each column in the CPU's order: blocks
// of 32 rows, then the blocks, here 40 rows so both levels run), and
// against float64 within γ_{N−1}·Σ_r|g_rj| of each column sum (any order)
// and u of each output. LinearBias: every value is a sum of at most K+1
// products (y = [x 1]·[Wᵀ; b], dx = g·W, dW = gᵀ·x, db = 1ᵀ·g), within
// γ_{K+1}·Σ|a||b|, measured against the largest value with absRatio. In
// bf16 (bf16 inputs: the casts are exact) the output gradient is rounded
// to bf16 first (2^-8 of each |g|, carried through the same sums), and
// y and db are rounded to bf16 last (2^-8 of the largest).
func TestBias(t *testing.T) {
	e := openEngine(t)
	const n, in, out = 40, 24, 10
	dy := randoms(99, n*out, 1)
	g := f64(dy)
	addBias := func(b *nn.Builder) (*G.Node, G.Nodes) {
		y := param(b, "y", 41, 1, true, n, out)
		bias := param(b, "bias", 42, 1, true, out)
		return b.AddBias(y, bias), G.Nodes{y, bias}
	}
	colSums := absRatio(transpose(g, n, out), ones(n), out, n, 1)
	checkCase(t, e, opCase{name: "addbias fp32", build: addBias, exact: true, tol: max(u, gamma(n-1)*colSums)})

	xs, ws, bs := bf16Values(43, n*in, 1), bf16Values(44, out*in, 0.2), bf16Values(45, out, 1)
	linearBias := func(b *nn.Builder) (*G.Node, G.Nodes) {
		x := values(b, "x", xs, true, n, in)
		w := values(b, "w", ws, true, out, in)
		bias := values(b, "bias", bs, true, out)
		return b.LinearBias(x, w, bias), G.Nodes{x, w, bias}
	}
	x1 := make([]float64, 0, n*(in+1)) // [x 1]
	for i := range n {
		x1 = append(append(x1, f64(xs[i*in:(i+1)*in])...), 1)
	}
	wb := append(transpose(f64(ws), out, in), f64(bs)...) // [Wᵀ; b]
	ratio := max(
		absRatio(x1, wb, n, in+1, out),                      // y
		absRatio(g, f64(ws), n, out, in),                    // dx
		absRatio(transpose(g, n, out), f64(xs), out, n, in), // dW
		absRatio(transpose(g, n, out), ones(n), out, n, 1),  // db
	)
	k := max(in+1, n)
	tol := gamma(k) * ratio
	t.Logf("linear+bias: Σ|a||b| is up to %.2f× the largest value; sums of up to %d products", ratio, k)
	checkCase(t, e, opCase{name: "linearbias fp32", build: linearBias, tol: tol})
	p := amp.DefaultPolicy(amp.BF16)
	c := opCase{name: "linearbias bf16", build: linearBias, policy: &p,
		tol: (0x1p-8+gamma(k))*ratio*(1+0x1p-7) + 0x1p-8}
	checkCase(t, e, c)
	requireBF16(t, e, c, 0, 3) // y, and db (rounded to the bias's bf16 copy's format)
}
