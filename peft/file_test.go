package peft_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/safetensors"
)

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A DoRA adapter with rsLoRA, dropout, a regex target and a bf16 file: PEFT's
// key names (the magnitude without ".weight"), PEFT's config fields, and a
// round trip that keeps every value the dtype can hold.
func TestSaveLoadDoRA(t *testing.T) {
	m := tinyModel(t)
	c := peft.Config{R: 2, Alpha: 4, UseDoRA: true, UseRSLoRA: true, Dropout: 0.05, TargetRegex: `.*\.(q|v)_proj`}
	ts, _ := peft.Select(linearTargets(m), c)
	l, err := peft.New(c, ts, 2, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	perturb(l)
	dir := t.TempDir()
	if err := l.SaveAs(dir, "models/tiny", amp.BF16); err != nil {
		t.Fatal(err)
	}
	cfg := readJSON(t, filepath.Join(dir, peft.ConfigFile))
	for k, want := range map[string]any{"peft_type": "LORA", "r": 2.0, "lora_alpha": 4.0, "use_dora": true, "use_rslora": true,
		"lora_dropout": 0.05, "target_modules": `.*\.(q|v)_proj`, "layers_to_transform": nil, "init_lora_weights": true} {
		if cfg[k] != want {
			t.Errorf("adapter_config.json %s = %v, want %v", k, cfg[k], want)
		}
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, peft.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	names := f.Names()
	for _, want := range []string{
		"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
		"base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
		"base_model.model.model.layers.1.self_attn.v_proj.lora_magnitude_vector",
	} {
		if !slices.Contains(names, want) {
			t.Errorf("file lacks %s (has %v)", want, names)
		}
	}
	if info, _ := f.Info(peft.KeyM("model.layers.0.self_attn.q_proj")); info.Dtype != "BF16" || !slices.Equal(info.Shape, []int{8}) {
		t.Errorf("magnitude stored as %s %v, want BF16 [8]", info.Dtype, info.Shape)
	}
	l2, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Config.String() != l.Config.String() {
		t.Errorf("config %q reloaded as %q", l.Config, l2.Config)
	}
	for i, a := range l.Modules {
		b := l2.Modules[i]
		for _, p := range [][2][]float32{{a.A, b.A}, {a.B, b.B}, {a.M, b.M}} {
			for j := range p[0] {
				if amp.BF16.Round(p[0][j]) != p[1][j] {
					t.Fatalf("%s: %v reloaded as %v", a.Path, p[0][j], p[1][j])
				}
			}
		}
	}
}

func TestSaveLoadLayersAndGaussian(t *testing.T) {
	m := tinyModel(t)
	c := peft.Config{R: 2, Alpha: 2, Init: peft.InitGaussian, TargetModules: []string{"up_proj"}, LayersToTransform: []int{1}}
	ts, _ := peft.Select(linearTargets(m), c)
	l, _ := peft.New(c, ts, 2, nil)
	dir := t.TempDir()
	if err := l.Save(dir, "x"); err != nil {
		t.Fatal(err)
	}
	cfg := readJSON(t, filepath.Join(dir, peft.ConfigFile))
	if cfg["init_lora_weights"] != "gaussian" || len(cfg["layers_to_transform"].([]any)) != 1 || cfg["target_modules"].([]any)[0] != "up_proj" {
		t.Errorf("config %v", cfg)
	}
	l2, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if len(l2.Modules) != 1 || l2.Modules[0].Path != "model.layers.1.mlp.up_proj" || !slices.Equal(l2.Config.LayersToTransform, []int{1}) {
		t.Fatalf("reloaded %d modules, config %+v", len(l2.Modules), l2.Config)
	}
}

// A PiSSA adapter is saved as the rank-2r LoRA that applies to the
// original base model: the original model plus the file computes what the
// trained adapter computes on the residual model.
func TestPiSSASavesALoRAOfTheOriginalModel(t *testing.T) {
	for _, c := range []peft.Config{
		{R: 2, Alpha: 4, Init: peft.InitPiSSA, TargetModules: allModules},
		{R: 2, Alpha: 4, Init: peft.InitPiSSA, UseDoRA: true, UseRSLoRA: true, TargetModules: allModules},
	} {
		m := tinyModel(t)
		orig := cloneWeights(m)
		ts, _ := peft.Targets(linearTargets(m), allModules)
		l, err := peft.New(c, ts, 1, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		for _, mod := range l.Modules { // as if trained
			for j := range mod.A {
				mod.A[j] *= 1.1
			}
			for j := range mod.M {
				mod.M[j] *= 0.9
			}
		}
		trained := logits(t, build(t, m, l, tensor.Float32))
		dir := t.TempDir()
		if err := l.Save(dir, "base"); err != nil {
			t.Fatal(err)
		}
		cfg := readJSON(t, filepath.Join(dir, peft.ConfigFile))
		if cfg["r"] != 4.0 || cfg["init_lora_weights"] != true {
			t.Errorf("converted config r = %v, init_lora_weights = %v; want 4, true", cfg["r"], cfg["init_lora_weights"])
		}
		m.Weights = orig
		l2, err := peft.Load(dir, peft.BaseOf(m))
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(l2.Config.Scaling()-l.Config.Scaling()) > 1e-15*l.Config.Scaling() {
			t.Errorf("scaling %g saved as %g", l.Config.Scaling(), l2.Config.Scaling())
		}
		rel := maxRelDiff(logits(t, build(t, m, l2, tensor.Float32)), trained)
		t.Logf("%s: original model + saved adapter vs residual model + adapter: %.2g relative", c, rel)
		if rel > 1e-5 {
			t.Errorf("%s: the saved adapter on the original model is %.2g away", c, rel)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	m := tinyModel(t)
	ts, _ := peft.Targets(linearTargets(m), []string{"q_proj"})
	l, _ := peft.New(peft.Config{R: 2, Alpha: 2, UseDoRA: true, TargetModules: []string{"q_proj"}}, ts, 1, m.Weights)
	dir := t.TempDir()
	if err := l.Save(dir, "b"); err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) {
		p := filepath.Join(dir, peft.ConfigFile)
		raw, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(raw), old, new, 1)), 0o644)
	}
	edit(`"use_dora": true`, `"use_dora": false`)
	_, err := peft.Load(dir, peft.BaseOf(m))
	want := "tensor base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector is a DoRA magnitude, but adapter_config.json has use_dora false"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("magnitude without use_dora: %v", err)
	}
	edit(`"use_dora": false`, `"use_dora": true`)
	edit(`"r": 2`, `"r": 3`)
	_, err = peft.Load(dir, peft.BaseOf(m))
	want = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight has shape [2 8], want [3 8]"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("rank mismatch: %v", err)
	}
	edit(`"r": 3`, `"r": 2`)
	edit(`"target_modules": [`, `"target_modules": 7, "x": [`)
	_, err = peft.Load(dir, peft.BaseOf(m))
	want = "target_modules must be a list of module names or a regex string"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("bad target_modules: %v", err)
	}
}

// adapter_config.json and the weights must describe the same modules, as
// PEFT requires (it would report missing or unexpected keys); a weight
// that is not finite is named. Both used to load silently.
func TestLoadRefusesDisagreementAndNonFinite(t *testing.T) {
	m := tinyModel(t)
	ts, _ := peft.Select(linearTargets(m), peft.Config{TargetModules: []string{"q_proj", "v_proj"}})
	l, err := peft.New(peft.Config{R: 2, Alpha: 2, TargetModules: []string{"q_proj", "v_proj"}}, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	save := func(t *testing.T) string {
		dir := t.TempDir()
		if err := l.Save(dir, "b"); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	edit := func(dir, old, new string) {
		p := filepath.Join(dir, peft.ConfigFile)
		raw, _ := os.ReadFile(p)
		if !strings.Contains(string(raw), old) {
			t.Fatalf("adapter_config.json lacks %q", old)
		}
		os.WriteFile(p, []byte(strings.Replace(string(raw), old, new, 1)), 0o644)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"config names a module without tensors", `"target_modules": [`, `"target_modules": ["k_proj", `,
			"the config selects model.layers.0.self_attn.k_proj (target_modules [k_proj q_proj v_proj]), but the weights have no tensors for it"},
		{"tensors for a module the config lacks", `"v_proj"`, `"q_proj"`,
			"the weights adapt model.layers.0.self_attn.v_proj, which the config does not select (target_modules [q_proj q_proj])"},
		{"layers_to_transform leaving out adapted layers", `"layers_to_transform": null`, `"layers_to_transform": [0]`,
			"the weights adapt model.layers.1.self_attn.q_proj, which the config does not select (target_modules [q_proj v_proj], layers_to_transform [0])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := save(t)
			edit(dir, tc.old, tc.new)
			_, err := peft.Load(dir, peft.BaseOf(m))
			if err == nil || !strings.Contains(err.Error(), "disagree: "+tc.want) {
				t.Fatalf("error %v\nwant one ending %q", err, tc.want)
			}
		})
	}
	l.Modules[1].B[3] = float32(math.NaN())
	dir := save(t)
	_, err = peft.Load(dir, peft.BaseOf(m))
	want := "tensor base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight holds a non-finite value (NaN at index 3)"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("NaN weight: %v", err)
	}
}
