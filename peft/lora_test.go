package peft_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/nn/nntest"
	"github.com/mixtune/mixtune/peft"
)

func tinyModel(t *testing.T) *model.Model {
	t.Helper()
	m, err := model.New(model.Config{
		VocabSize: 13, HiddenSize: 8, IntermediateSize: 12, NumHiddenLayers: 2,
		NumAttentionHeads: 2, NumKeyValueHeads: 1, MaxPositionEmbeddings: 8,
		RMSNormEps: 1e-5, RopeTheta: 10000, InitializerRange: 0.4, BOSTokenID: 0, EOSTokenID: 1, PadTokenID: 2,
	}, 5)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// linearTargets lists the model's linear modules as adapter targets.
func linearTargets(m *model.Model) []peft.Target { return peft.ModelTargets(m) }

type built struct {
	b     *nn.Builder
	g     *model.Graph
	nodes map[string]*G.Node
	pass  nn.Pass // how run runs the graph: a nonzero noise key turns dropout on
}

// run runs the graph from the start as bt.pass.
func (bt built) run(vm G.VM) error { return bt.b.Eng.Run(vm, bt.pass) }

func build(t *testing.T, m *model.Model, l *peft.Adapter, dt tensor.Dtype) built {
	t.Helper()
	return buildWith(t, m, l, dt, nil)
}

// buildPolicy builds a float32 graph computing as policy p says.
func buildPolicy(t *testing.T, m *model.Model, l *peft.Adapter, p *amp.Policy) built {
	t.Helper()
	return buildWith(t, m, l, tensor.Float32, p)
}

func buildWith(t *testing.T, m *model.Model, l *peft.Adapter, dt tensor.Dtype, p *amp.Policy) built {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, dt)
	if p != nil && p.Low != amp.FP32 {
		b.Policy = p
	}
	return buildOn(t, b, m, l)
}

// buildOn builds the model (and adapter l, when not nil) into b, with the
// test batch of 2 rows of 4 tokens bound to its inputs.
func buildOn(t *testing.T, b *nn.Builder, m *model.Model, l *peft.Adapter) built {
	t.Helper()
	nodes := map[string]*G.Node{}
	gc := model.GraphConfig{Batch: 2, SeqLen: 4}
	if l != nil {
		gc.Linear = l.Linear(nodes)
	}
	g, err := m.Build(b, gc)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []struct {
		n *G.Node
		v []int
	}{{g.IDs, []int{0, 4, 7, 12, 0, 3, 3, 9}}, {g.Targets, []int{4, 7, 12, 1, 3, 3, 9, nn.IgnoreIndex}}} {
		if err := G.Let(in.n, tensor.New(tensor.WithShape(8), tensor.WithBacking(in.v))); err != nil {
			t.Fatal(err)
		}
	}
	return built{b: b, g: g, nodes: nodes}
}

func logits(t *testing.T, bt built) []float32 {
	t.Helper()
	vm := G.NewTapeMachine(bt.b.G)
	defer vm.Close()
	if err := bt.run(vm); err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), bt.g.Logits.Value().Data().([]float32)...)
}

func TestLoRAStartsAsTheBaseModel(t *testing.T) {
	m := tinyModel(t)
	ts, err := peft.Targets(linearTargets(m), []string{"q_proj", "v_proj", "down_proj"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := peft.New(peft.Config{R: 4, Alpha: 8, TargetModules: []string{"q_proj", "v_proj", "down_proj"}}, ts, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Modules) != 6 || l.NumParams() != 2*(4*8+8*4)+2*(4*8+4*4)+2*(4*12+8*4) {
		t.Fatalf("%d modules, %d params", len(l.Modules), l.NumParams())
	}
	base, adapted := logits(t, build(t, m, nil, tensor.Float32)), logits(t, build(t, m, l, tensor.Float32))
	for i := range base {
		if base[i] != adapted[i] {
			t.Fatalf("logit %d: base %v, adapted at init %v", i, base[i], adapted[i])
		}
	}
	// A is kaiming-uniform: within ±1/√in, not all zero; B is zero.
	for _, mod := range l.Modules {
		bound := float32(1 / math.Sqrt(float64(mod.In)))
		nonzero := false
		for _, a := range mod.A {
			if a < -bound || a > bound {
				t.Fatalf("%s: A value %v outside ±%v", mod.Path, a, bound)
			}
			nonzero = nonzero || a != 0
		}
		if !nonzero || slices.ContainsFunc(mod.B, func(v float32) bool { return v != 0 }) {
			t.Fatalf("%s: A all zero or B not zero", mod.Path)
		}
	}
}

// allModules is every linear module name of a decoder layer.
var allModules = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// perturb gives every adapter tensor values away from its initialization:
// B = 0 would make every A gradient zero, and g = 1 would hide mistakes in
// DoRA's magnitude terms.
func perturb(l *peft.Adapter) {
	for i, mod := range l.Modules {
		for j := range mod.B {
			mod.B[j] = float32(math.Sin(float64(7*i+j))) * 0.3
		}
		for j := range mod.M {
			mod.M[j] *= 1 + 0.2*float32(math.Cos(float64(3*i+j)))
		}
	}
}

// adapterNodes lists the graph nodes of every adapter tensor.
func adapterNodes(l *peft.Adapter, nodes map[string]*G.Node) []*G.Node {
	var params []*G.Node
	for _, mod := range l.Modules {
		params = append(params, nodes[peft.KeyA(mod.Path)], nodes[peft.KeyB(mod.Path)])
		if mod.M != nil {
			params = append(params, nodes[peft.KeyM(mod.Path)])
		}
	}
	return params
}

// Gradients of every A and B through the whole model match float64 central
// differences: plain LoRA, and rsLoRA with dropout on the adapter branch
// (a fixed noise key keeps the masks fixed across the evaluations).
func TestLoRAGradients(t *testing.T) {
	for _, c := range []peft.Config{
		{R: 2, Alpha: 3, TargetModules: allModules},
		{R: 2, Alpha: 3, TargetModules: allModules, UseRSLoRA: true, Dropout: 0.3},
	} {
		m := tinyModel(t)
		ts, _ := peft.Targets(linearTargets(m), allModules)
		l, err := peft.New(c, ts, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		perturb(l)
		bt := build(t, m, l, tensor.Float64)
		bt.pass = nn.Pass{Noise: 4242}
		params := adapterNodes(l, bt.nodes)
		worst := nntest.GradCheck(t, bt.b.G, bt.g.Loss, params, 1e-8, nntest.RunWith(bt.run))
		t.Logf("%s: %d adapter tensors, worst relative error %.2g", c, len(params), worst)
	}
}

// With rsLoRA the branch is scaled by α/√r: one module's output against
// W·x + s·B·A·x computed by hand.
func TestLoRAForwardClosedForm(t *testing.T) {
	for _, c := range []peft.Config{{R: 4, Alpha: 8, TargetModules: []string{"q_proj"}}, {R: 4, Alpha: 8, UseRSLoRA: true, TargetModules: []string{"q_proj"}}} {
		want := 2.0
		if c.UseRSLoRA {
			want = 4
		}
		if c.Scaling() != want {
			t.Fatalf("%s: scaling %g, want %g", c, c.Scaling(), want)
		}
		tg := peft.Target{Path: "q_proj", Out: 3, In: 5}
		l, _ := peft.New(c, []peft.Target{tg}, 2, nil)
		perturb(l)
		b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 1}, tensor.Float64)
		xd := []float32{0.5, -1, 2, 0.25, 1.5, -0.75, 1, 0, 3, -2}
		wd := make([]float32, 15)
		for i := range wd {
			wd[i] = float32(i%4) - 1.5
		}
		x, w := b.Param("x", []int{2, 5}, xd, false), b.Param("w", []int{3, 5}, wd, false)
		y := l.Linear(map[string]*G.Node{})(b, "q_proj", x, w, nil)
		vm := G.NewTapeMachine(b.G)
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		vm.Close()
		mod := l.Modules[0]
		for i := 0; i < 2; i++ {
			for o := 0; o < 3; o++ {
				var wx, bax float64
				for j := 0; j < 5; j++ {
					wx += float64(wd[o*5+j]) * float64(xd[i*5+j])
					var ba float64
					for k := 0; k < 4; k++ {
						ba += float64(mod.B[o*4+k]) * float64(mod.A[k*5+j])
					}
					bax += ba * float64(xd[i*5+j])
				}
				got := y.Value().Data().([]float64)[i*3+o]
				if ref := wx + want*bax; math.Abs(got-ref) > 1e-12*math.Max(1, math.Abs(ref)) {
					t.Errorf("%s: y[%d,%d] = %v, want %v", c, i, o, got, ref)
				}
			}
		}
	}
}

func TestSaveLoadPEFTFormat(t *testing.T) {
	m := tinyModel(t)
	ts, _ := peft.Targets(linearTargets(m), []string{"q_proj", "v_proj"})
	l, _ := peft.New(peft.Config{R: 4, Alpha: 16, TargetModules: []string{"q_proj", "v_proj"}}, ts, 9, nil)
	for _, mod := range l.Modules {
		for j := range mod.B {
			mod.B[j] = float32(j) * 0.01
		}
	}
	dir := t.TempDir()
	if err := l.Save(dir, "models/tiny"); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	raw, _ := os.ReadFile(filepath.Join(dir, peft.ConfigFile))
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4.0, "lora_alpha": 16.0, "bias": "none", "base_model_name_or_path": "models/tiny", "use_dora": false} {
		if cfg[k] != want {
			t.Errorf("adapter_config.json %s = %v, want %v", k, cfg[k], want)
		}
	}
	l2, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(l2.Modules) != len(l.Modules) || l2.Config.R != 4 || l2.Config.Alpha != 16 {
		t.Fatalf("reloaded %d modules, config %+v", len(l2.Modules), l2.Config)
	}
	for i := range l.Modules {
		a, b := l.Modules[i], l2.Modules[i]
		if a.Path != b.Path || !slices.Equal(a.A, b.A) || !slices.Equal(a.B, b.B) {
			t.Fatalf("module %s changed in the round trip", a.Path)
		}
	}
	// A model without the adapted modules is refused, naming the module.
	small := linearTargets(m)[:2]
	if _, err := peft.Load(dir, peft.Base{Targets: small}); err == nil {
		t.Fatal("an adapter for missing modules loaded")
	}
}

func TestTargetsAndConfigErrors(t *testing.T) {
	m := tinyModel(t)
	all := linearTargets(m)
	if _, err := peft.Targets(all, []string{"q_proj", "qproj"}); err == nil || err.Error() != `target module "qproj" matches no linear module of the model` {
		t.Fatalf("typo: %v", err)
	}
	paths := func(ts []peft.Target) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.Path)
		}
		return out
	}
	for _, tc := range []struct {
		c    peft.Config
		want []string
	}{
		// a name matches the path's end, as in PEFT: "mlp.up_proj" too
		{peft.Config{TargetModules: []string{"mlp.up_proj", "q_proj"}}, []string{
			"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj", "model.layers.1.self_attn.q_proj", "model.layers.1.mlp.up_proj"}},
		{peft.Config{TargetModules: []string{"v_proj", "down_proj"}, LayersToTransform: []int{1}}, []string{
			"model.layers.1.self_attn.v_proj", "model.layers.1.mlp.down_proj"}},
		// a regex must match the whole path
		{peft.Config{TargetRegex: `.*\.1\..*_proj`}, paths(all[7:])},
		{peft.Config{TargetRegex: `model\.layers\.0\.self_attn\.(q|k)_proj`}, []string{
			"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj"}},
		{peft.Config{TargetRegex: peft.AllLinear}, paths(all)},
	} {
		ts, err := peft.Select(all, tc.c)
		if err != nil || !slices.Equal(paths(ts), tc.want) {
			t.Errorf("%+v selected %v (%v), want %v", tc.c, paths(ts), err, tc.want)
		}
	}
	for _, tc := range []struct {
		c    peft.Config
		want string
	}{
		{peft.Config{TargetRegex: `q_proj`}, `target_modules regex "q_proj" matches no linear module of the model (paths look like "model.layers.0.self_attn.q_proj")`},
		{peft.Config{TargetModules: []string{"q_proj"}, LayersToTransform: []int{0, 5}}, "layers_to_transform: layer 5 has none of the target modules"},
	} {
		if _, err := peft.Select(all, tc.c); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
	for _, tc := range []struct {
		c    peft.Config
		want string
	}{
		{peft.Config{R: 0, Alpha: 1, TargetModules: []string{"q_proj"}}, "r must be > 0, got 0"},
		{peft.Config{R: 2, Alpha: -1, TargetModules: []string{"q_proj"}}, "lora_alpha must be a positive number, got -1"},
		{peft.Config{R: 2, Alpha: 1}, "target_modules is empty"},
		{peft.Config{R: 2, Alpha: 1, Dropout: 1, TargetModules: []string{"q_proj"}}, "lora_dropout must be in [0, 1), got 1"},
		{peft.Config{R: 2, Alpha: 1, Init: "loftq", TargetModules: []string{"q_proj"}}, `init must be default, gaussian, pissa or olora, got "loftq"`},
		{peft.Config{R: 2, Alpha: 1, TargetModules: []string{"q_proj"}, TargetRegex: "q"}, "target_modules is both a list and a regex"},
		{peft.Config{R: 2, Alpha: 1, TargetRegex: "(q"}, "target_modules regex: error parsing regexp: missing closing ): `(q`"},
		{peft.Config{R: 2, Alpha: 1, TargetRegex: "q.*", LayersToTransform: []int{0}}, "layers_to_transform cannot be used with a target_modules regex (PEFT refuses it too; put the layers in the regex)"},
	} {
		if err := tc.c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}
