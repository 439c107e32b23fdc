package vkengine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/gpu/vulkan/vulkantest"
	"github.com/mixtune/mixtune/nn"
)

// openEngine opens the test device (vulkantest.Open: MIXTUNE_VK_DEVICE,
// else the first, lavapipe in CI) with its engine, or skips naming what
// is missing.
func openEngine(t testing.TB) *Engine {
	t.Helper()
	_, dev := vulkantest.Open(t)
	e, err := New(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// opCase is a small graph for comparing the engines: build adds it to b
// (float32 or float64) and returns its output and the nodes to
// differentiate it with respect to. The output's gradient is a fixed
// random input, so every backward op runs.
type opCase struct {
	name   string
	policy *amp.Policy // nil: fp32
	build  func(b *nn.Builder) (out *G.Node, wrt G.Nodes)
	// tol bounds |vulkan − float64| per value as a multiple of the
	// largest |float64| value of the same tensor; the case states why.
	tol float64
	// exact requires the Vulkan values to equal the CPU engine's bit for
	// bit (ops whose result does not depend on summation order).
	exact bool
	// pass is the run's Pass (nil: noise key 7, a training pass).
	pass *nn.Pass
}

// runPass is the Pass both engines run c with.
func (c opCase) runPass() nn.Pass {
	if c.pass != nil {
		return *c.pass
	}
	return nn.Pass{Noise: 7}
}

// ran is one engine's values of a case: the output, then each gradient.
type ran struct {
	names []string
	vals  [][]float64
}

// runCPU runs the case on the CPU engine (native BLAS) in dtype dt.
func runCPU(t *testing.T, c opCase, dt tensor.Dtype) ran {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, dt)
	if dt == tensor.Float32 {
		b.Policy = c.policy
	}
	out, wrt, dy := buildCase(t, b, c)
	grads, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := b.Eng.Run(vm, c.runPass()); err != nil {
		t.Fatal(err)
	}
	res := ran{}
	for i, n := range append(G.Nodes{out}, grads...) {
		res.names = append(res.names, name(i, wrt))
		res.vals = append(res.vals, float64s(n.Value().Data()))
	}
	return res
}

// runVulkan compiles the float32 graph of the case for e and runs it.
func runVulkan(t *testing.T, e *Engine, c opCase) ran {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	b.Policy = c.policy
	out, wrt, dy := buildCase(t, b, c)
	grads, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Run(c.runPass()); err != nil {
		t.Fatal(err)
	}
	res := ran{}
	for i, n := range append(G.Nodes{out}, grads...) {
		v := make([]float32, max(1, prod(n.Shape())))
		if err := p.Read(n, v); err != nil {
			t.Fatal(err)
		}
		res.names = append(res.names, name(i, wrt))
		res.vals = append(res.vals, float64s(v))
	}
	return res
}

// runGraph runs b's graph on the CPU engine (e nil) or compiles it for e
// (with opts) and runs it runs times, and returns outs' values.
func runGraph(t *testing.T, b *nn.Builder, e *Engine, pass nn.Pass, runs int, outs G.Nodes, opts ...CompileOption) [][]float64 {
	vals, _ := runGraphHeld(t, b, e, pass, runs, outs, opts...)
	return vals
}

// runGraphHeld is runGraph that also returns, on the device, the bytes
// the compiled program's buffers held.
func runGraphHeld(t *testing.T, b *nn.Builder, e *Engine, pass nn.Pass, runs int, outs G.Nodes, opts ...CompileOption) ([][]float64, uint64) {
	t.Helper()
	var vals [][]float64
	if e == nil {
		vm := G.NewTapeMachine(b.G)
		defer vm.Close()
		if err := b.Eng.Run(vm, pass); err != nil {
			t.Fatal(err)
		}
		for _, n := range outs {
			vals = append(vals, float64s(n.Value().Data()))
		}
		return vals, 0
	}
	before, _ := e.Device.MemoryUse()
	p, err := e.Compile(b.G, b.IsParam, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	held, _ := e.Device.MemoryUse()
	for range runs {
		if err := p.Run(pass); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range outs {
		v := make([]float32, max(1, prod(n.Shape())))
		if err := p.Read(n, v); err != nil {
			t.Fatal(err)
		}
		vals = append(vals, float64s(v))
	}
	return vals, held - before
}

func name(i int, wrt G.Nodes) string {
	if i == 0 {
		return "output"
	}
	return "d" + wrt[i-1].Name()
}

// buildCase builds the case and the seed of its output's gradient:
// values from a fixed stream, the same in every dtype.
func buildCase(t *testing.T, b *nn.Builder, c opCase) (out *G.Node, wrt G.Nodes, dy *G.Node) {
	t.Helper()
	out, wrt = c.build(b)
	shape := []int(out.Shape())
	if out.IsScalar() {
		dy = G.NewScalar(b.G, b.Dtype, G.WithName("dy"))
		var v any = float32(1)
		if b.Dtype == tensor.Float64 {
			v = 1.0
		}
		if err := G.Let(dy, v); err != nil {
			t.Fatal(err)
		}
		return out, wrt, dy
	}
	dy = b.Input("dy", shape...)
	vals := randoms(99, prod(shape), 1)
	if err := G.Let(dy, tensorOf(b.Dtype, shape, vals)); err != nil {
		t.Fatal(err)
	}
	return out, wrt, dy
}

// randoms are n normal values of standard deviation sd from a fixed seed.
func randoms(seed uint64, n int, sd float64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 5))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * sd)
	}
	return v
}

func tensorOf(dt tensor.Dtype, shape []int, v []float32) *tensor.Dense {
	if dt == tensor.Float64 {
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(float64s(v)))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float32(nil), v...)))
}

func float64s(d any) []float64 {
	switch x := d.(type) {
	case []float32:
		o := make([]float64, len(x))
		for i, v := range x {
			o[i] = float64(v)
		}
		return o
	case float32:
		return []float64{float64(x)}
	case []float64:
		return append([]float64(nil), x...)
	case float64:
		return []float64{x}
	}
	panic(fmt.Sprintf("values of type %T", d))
}

// input adds a float input with values from seed (sd 1).
func input(b *nn.Builder, name string, seed uint64, shape ...int) *G.Node {
	n := b.Input(name, shape...)
	if err := G.Let(n, tensorOf(b.Dtype, shape, randoms(seed, prod(shape), 1))); err != nil {
		panic(err)
	}
	return n
}

// param adds a weight with values from seed and standard deviation sd.
func param(b *nn.Builder, name string, seed uint64, sd float64, trainable bool, shape ...int) *G.Node {
	return b.Param(name, shape, randoms(seed, prod(shape), sd), trainable)
}

// checkCase runs c on the CPU in float32 and float64 and on e, and
// compares: Vulkan against float64 within c.tol of each tensor's largest
// value (and bit for bit against the CPU's float32 with c.exact).
func checkCase(t *testing.T, e *Engine, c opCase) {
	t.Helper()
	ref := runCPU(t, c, tensor.Float64)
	cpu := runCPU(t, c, tensor.Float32)
	vk := runVulkan(t, e, c)
	for i := range ref.vals {
		scale := 0.0
		for _, v := range ref.vals[i] {
			scale = max(scale, math.Abs(v))
		}
		worst, cpuWorst := 0.0, 0.0
		for j, r := range ref.vals[i] {
			worst = max(worst, math.Abs(vk.vals[i][j]-r))
			cpuWorst = max(cpuWorst, math.Abs(cpu.vals[i][j]-r))
			if c.exact && math.Float32bits(float32(vk.vals[i][j])) != math.Float32bits(float32(cpu.vals[i][j])) {
				t.Fatalf("%s %s[%d]: Vulkan %v, CPU %v (want bit for bit)", c.name, ref.names[i], j, vk.vals[i][j], cpu.vals[i][j])
			}
		}
		if !(worst <= c.tol*scale) {
			t.Errorf("%s %s: Vulkan off float64 by %.3g of the largest value %.3g (bound %.3g; CPU float32 %.3g)",
				c.name, ref.names[i], worst/scale, scale, c.tol, cpuWorst/scale)
		}
		t.Logf("%s %s: Vulkan %.3g, CPU %.3g of the largest |value| off float64 (bound %.3g)", c.name, ref.names[i], worst/scale, cpuWorst/scale, c.tol)
	}
}

// gamma is Higham's γ_k = k·u/(1 − k·u), the relative bound of a sum of
// k fp32 terms in any order (u the fp32 unit roundoff).
func gamma(k int) float64 { return float64(k) * u / (1 - float64(k)*u) }
