package peft_test

import (
	"math"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/nn/nntest"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/peft"
)

// Gradients of every A, B and magnitude through the whole model match
// float64 central differences, with and without dropout. The norm
// ‖W + s·B·A‖ is detached in the forward pass, and the check holds it
// fixed the same way: the DoRANorm op computes it again only after
// Engine.WeightsChanged, never called while the differences move A and B.
func TestDoRAGradients(t *testing.T) {
	for _, c := range []peft.Config{
		{R: 2, Alpha: 3, UseDoRA: true, TargetModules: allModules},
		{R: 2, Alpha: 3, UseDoRA: true, Dropout: 0.3, UseRSLoRA: true, TargetModules: allModules},
	} {
		m := tinyModel(t)
		ts, _ := peft.Targets(linearTargets(m), allModules)
		l, err := peft.New(c, ts, 1, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		perturb(l)
		bt := build(t, m, l, tensor.Float64)
		bt.pass = nn.Pass{Noise: 4242}
		params := adapterNodes(l, bt.nodes)
		worst := nntest.GradCheck(t, bt.b.G, bt.g.Loss, params, 1e-8, nntest.RunWith(bt.run))
		t.Logf("%s: %d adapter tensors (A, B, m), worst relative error %.2g", c, len(params), worst)
	}
}

// Three AdamW steps through the graph change every adapter tensor and no
// base weight, bit for bit: LoRA, DoRA with dropout, PiSSA, and DoRA on a
// bf16 base under a bf16 policy.
func TestTrainingChangesOnlyTheAdapter(t *testing.T) {
	for _, tc := range []struct {
		c    peft.Config
		base amp.Format
	}{
		{peft.Config{R: 2, Alpha: 4}, amp.FP32},
		{peft.Config{R: 2, Alpha: 4, UseDoRA: true, Dropout: 0.2}, amp.FP32},
		{peft.Config{R: 2, Alpha: 4, Init: peft.InitPiSSA}, amp.FP32},
		{peft.Config{R: 2, Alpha: 4, UseDoRA: true, Init: peft.InitPiSSA}, amp.BF16},
	} {
		tc.c.TargetModules = allModules
		m := tinyModel(t)
		if tc.base != amp.FP32 {
			m.Compact(tc.base, func(string) bool { return true })
		}
		ts, _ := peft.Targets(linearTargets(m), allModules)
		l, err := peft.New(tc.c, ts, 1, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		before := cloneWeights(m) // after PiSSA's residual: the frozen base
		params := l.Params()
		start := make([][]float32, len(params))
		for i, p := range params {
			start[i] = slices.Clone(p.Value)
		}
		p := amp.DefaultPolicy(tc.base)
		bt := buildPolicy(t, m, l, &p)
		wrt := adapterNodes(l, bt.nodes)
		grads, err := G.Grad(bt.g.Loss, wrt...)
		if err != nil {
			t.Fatal(err)
		}
		vm := G.NewTapeMachine(bt.b.G)
		opt, _ := optim.NewAdamW(optim.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
		for step := 1; step <= 3; step++ {
			if err := bt.b.Eng.Run(vm, nn.Pass{Noise: uint64(step)}); err != nil {
				t.Fatal(err)
			}
			for i, g := range grads {
				copy(params[i].Grad, g.Value().Data().([]float32))
			}
			if err := opt.Step(params, 1e-2); err != nil {
				t.Fatal(err)
			}
			bt.b.Eng.WeightsChanged()
		}
		vm.Close()
		for name, w := range m.Weights {
			if !slices.Equal(w.Data, before[name].Data) || !slices.Equal(w.Bits, before[name].Bits) {
				t.Errorf("%s: base weight %s changed in training", tc.c, name)
			}
		}
		for i, p := range params {
			if slices.Equal(p.Value, start[i]) {
				t.Errorf("%s: adapter tensor %s did not change", tc.c, p.Name)
			}
		}
	}
}

// A DoRA magnitude gradient in closed form: for one module and a cost
// Σ y, dm[o] = Σ_rows (W·x + s·B·A·x)[o] / ‖W + s·B·A‖[o].
func TestDoRAMagnitudeGradientClosedForm(t *testing.T) {
	tg := peft.Target{Path: "p", Out: 3, In: 4}
	w := []float32{1, 2, 0, -1, 0.5, 0.5, 0.5, 0.5, -2, 1, 1, 3}
	weights := map[string]*model.Tensor{"p.weight": {Shape: []int{3, 4}, Data: w}}
	l, err := peft.New(peft.Config{R: 2, Alpha: 2, UseDoRA: true, TargetModules: []string{"p"}}, []peft.Target{tg}, 5, weights)
	if err != nil {
		t.Fatal(err)
	}
	perturb(l)
	mod := l.Modules[0]
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 1}, tensor.Float64)
	x := []float32{1, -1, 2, 0.5, 0, 1, -1, 1}
	xn, wn := b.Param("x", []int{2, 4}, x, false), b.Param("w", []int{3, 4}, w, false)
	nodes := map[string]*G.Node{}
	y := l.Linear(nodes)(b, "p", xn, wn, nil)
	grads, err := G.Grad(G.Must(G.Sum(y)), nodes[peft.KeyM("p")])
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	for o := 0; o < 3; o++ {
		var norm2, sum float64
		for j := 0; j < 4; j++ {
			v := float64(w[o*4+j])
			for k := 0; k < 2; k++ {
				v += float64(mod.B[o*2+k]) * float64(mod.A[k*4+j])
			}
			norm2 += v * v
			for i := 0; i < 2; i++ {
				sum += v * float64(x[i*4+j])
			}
		}
		got := grads[0].Value().Data().([]float64)[o]
		if want := sum / math.Sqrt(norm2); math.Abs(got-want) > 1e-12*math.Max(1, math.Abs(want)) {
			t.Errorf("dm[%d] = %v, want %v", o, got, want)
		}
	}
}
