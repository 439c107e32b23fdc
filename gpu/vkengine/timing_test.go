package vkengine

import (
	"errors"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// TestTimedRunAttributes runs linearLoRA's forward and backward graph
// untimed, then timed: the values agree bit for bit (timing adds
// timestamp writes, never a dispatch), every timed command is labelled
// with the graph node that lowered it, and the GEMMs' flops per op kind
// are the closed form's. The graph's three products, x[6×24]·Wᵀ (W
// 10×24), x·Aᵀ (A 4×24) and (x·Aᵀ)[6×4]·Bᵀ (B 10×4), each run once
// forward (linear), once for their input's gradient (linear.dx) and once
// for their weight's (linear.dw), each a 2·M·N·K of the same three sizes:
// 2·6·(10·24 + 4·24 + 10·4) flops per kind.
func TestTimedRunAttributes(t *testing.T) {
	e := openEngine(t)
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	out, wrt, dy := buildCase(t, b, opCase{name: "linear+lora", build: linearLoRA})
	grads, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	read := func() [][]float32 {
		var vs [][]float32
		for _, n := range append(G.Nodes{out}, grads...) {
			v := make([]float32, max(1, prod(n.Shape())))
			if err := p.Read(n, v); err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		return vs
	}
	if err := p.Run(nn.Pass{Noise: 7}); err != nil {
		t.Fatal(err)
	}
	untimed := read()
	var batches []vulkan.BatchTime
	if err := e.Time(func(bt vulkan.BatchTime) { batches = append(batches, bt) }); err != nil {
		if errors.Is(err, vulkan.ErrNoTimestamps) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer e.Time(nil)
	if err := p.Run(nn.Pass{Noise: 7}); err != nil {
		t.Fatal(err)
	}
	for i, v := range read() {
		for j := range v {
			if math.Float32bits(v[j]) != math.Float32bits(untimed[i][j]) {
				t.Fatalf("value %d[%d]: %g timed, %g untimed", i, j, v[j], untimed[i][j])
			}
		}
	}
	if len(batches) != 1 {
		t.Fatalf("%d batches timed, want 1", len(batches))
	}
	ids := map[int]string{}
	for _, n := range b.G.AllNodes() {
		ids[int(n.ID())] = n.Name()
	}
	flops := map[string]float64{}
	for i, c := range batches[0].Commands {
		if c.Scope.Kind == "" || ids[c.Scope.NodeID] != c.Scope.Node {
			t.Errorf("command %d (%s): scope %+v is no node of the graph", i, c.Kernel, c.Scope)
		}
		if strings.HasPrefix(c.Kernel, "gemm") {
			flops[c.Scope.Kind] += c.Flops
		} else if c.Flops != 0 {
			t.Errorf("command %d (%s): %g flops; only GEMMs count theirs", i, c.Kernel, c.Flops)
		}
	}
	const want = 2 * 6 * (10*24 + 4*24 + 10*4)
	for _, kind := range []string{"linear", "linear.dx", "linear.dw"} {
		if flops[kind] != want {
			t.Errorf("%s: %g flops, want %d", kind, flops[kind], want)
		}
	}
	if len(flops) != 3 {
		t.Errorf("GEMMs in kinds %v, want linear, linear.dx, linear.dw", flops)
	}
}
