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
func linearTargets(m *model.Model) []peft.Target {
	var ts []peft.Target
	for i := 0; i < m.Config.NumHiddenLayers; i++ {
		for _, short := range append(slices.Clone(model.AttentionModules), model.MLPModules...) {
			p := model.ModulePath(i, short)
			w := m.Weights[p+".weight"]
			ts = append(ts, peft.Target{Path: p, Out: w.Shape[0], In: w.Shape[1]})
		}
	}
	return ts
}

type built struct {
	b     *nn.Builder
	g     *model.Graph
	nodes map[string]*G.Node
}

func build(t *testing.T, m *model.Model, l *peft.LoRA, dt tensor.Dtype) built {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, dt)
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
	return built{b, g, nodes}
}

func logits(t *testing.T, bt built) []float32 {
	t.Helper()
	vm := G.NewTapeMachine(bt.b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
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
	l, err := peft.New(peft.Config{R: 4, Alpha: 8, TargetModules: []string{"q_proj", "v_proj", "down_proj"}}, ts, 1)
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

func TestLoRAGradients(t *testing.T) {
	m := tinyModel(t)
	names := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
	ts, _ := peft.Targets(linearTargets(m), names)
	l, err := peft.New(peft.Config{R: 2, Alpha: 3, TargetModules: names}, ts, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, mod := range l.Modules { // B = 0 would make every A gradient zero
		for j := range mod.B {
			mod.B[j] = float32(math.Sin(float64(7*i+j))) * 0.3
		}
	}
	bt := build(t, m, l, tensor.Float64)
	var params []*G.Node
	for _, mod := range l.Modules {
		params = append(params, bt.nodes[peft.KeyA(mod.Path)], bt.nodes[peft.KeyB(mod.Path)])
	}
	worst := nntest.GradCheck(t, bt.b.G, bt.g.Loss, params, 1e-6)
	t.Logf("%d adapter tensors, worst relative error %.2g", len(params), worst)
}

func TestSaveLoadPEFTFormat(t *testing.T) {
	m := tinyModel(t)
	ts, _ := peft.Targets(linearTargets(m), []string{"q_proj", "v_proj"})
	l, _ := peft.New(peft.Config{R: 4, Alpha: 16, TargetModules: []string{"q_proj", "v_proj"}}, ts, 9)
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
	l2, err := peft.Load(dir, linearTargets(m))
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
	if _, err := peft.Load(dir, small); err == nil {
		t.Fatal("an adapter for missing modules loaded")
	}
}

func TestTargetsAndConfigErrors(t *testing.T) {
	m := tinyModel(t)
	if _, err := peft.Targets(linearTargets(m), []string{"q_proj", "qproj"}); err == nil || err.Error() != `target module "qproj" matches no linear module of the model` {
		t.Fatalf("typo: %v", err)
	}
	for _, tc := range []struct {
		c    peft.Config
		want string
	}{
		{peft.Config{R: 0, Alpha: 1, TargetModules: []string{"q_proj"}}, "r must be > 0, got 0"},
		{peft.Config{R: 2, Alpha: -1, TargetModules: []string{"q_proj"}}, "lora_alpha must be a positive number, got -1"},
		{peft.Config{R: 2, Alpha: 1}, "target_modules is empty"},
	} {
		if err := tc.c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}
