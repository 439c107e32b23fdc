package main

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/safetensors"
)

// writePEFTAdapter writes an adapter directory as PEFT lays it out, with
// random A and B for each module path under prefix, r and the config
// fields given.
func writePEFTAdapter(t *testing.T, m *model.Model, prefix string, ranks map[string]int, cfg map[string]any) string {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	var ts []safetensors.Tensor
	for path, r := range ranks {
		s := m.Weights[path+".weight"].Shape
		a, b := make([]float32, r*s[1]), make([]float32, s[0]*r)
		for i := range a {
			a[i] = float32(rng.NormFloat64() * 0.1)
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64() * 0.1)
		}
		ts = append(ts, safetensors.Tensor{Name: prefix + path + ".lora_A.weight", Shape: []int{r, s[1]}, Data: a, Dtype: amp.FP32},
			safetensors.Tensor{Name: prefix + path + ".lora_B.weight", Shape: []int{s[0], r}, Data: b, Dtype: amp.FP32})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestMergeRefusesWhatPEFTWouldComputeDifferently: merge exits 2 naming
// the field and its value, and writes nothing, for adapters whose PEFT
// load mixtune does not reproduce. Before, each merged onto the original
// weights with exit 0.
func TestMergeRefusesWhatPEFTWouldComputeDifferently(t *testing.T) {
	dir := t.TempDir()
	baseDir, m := tinyBase(t, dir)
	q := "model.layers.0.self_attn.q_proj"
	for _, tc := range []struct {
		field string
		value any
		want  string
	}{
		{"alora_invocation_tokens", []int{7, 8}, "alora_invocation_tokens [7,8]"},
		{"init_lora_weights", "pissa_niter_16", `init_lora_weights "pissa_niter_16"`},
		{"init_lora_weights", "corda", `init_lora_weights "corda"`},
		{"init_lora_weights", "loftq", `init_lora_weights "loftq"`},
		{"lora_bias", true, "lora_bias true"},
	} {
		adapter := writePEFTAdapter(t, m, "base_model.model.", map[string]int{q: 2},
			map[string]any{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": []string{q}, tc.field: tc.value})
		out := filepath.Join(dir, "out-"+strings.ReplaceAll(tc.want, `"`, ""))
		code, _, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapter, "--out", out)
		if code != 2 || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "adapter_config.json") {
			t.Errorf("%s %v: exit %d, %q; want exit 2 naming adapter_config.json and %s", tc.field, tc.value, code, stderr, tc.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s %v: %s was written", tc.field, tc.value, out)
		}
	}
}

// TestMergeTransformersLayoutAndPatterns: an adapter in transformers'
// save_peft_format=False layout (no base_model.model. prefix) with
// rank_pattern and "ALL-LINEAR" merges (exit 0), and the written config
// has "dtype" and "torch_dtype" both float32. Before, it was refused
// (rank_pattern), and "dtype" kept the base's value.
func TestMergeTransformersLayoutAndPatterns(t *testing.T) {
	dir := t.TempDir()
	baseDir, m := tinyBase(t, dir)
	ranks := map[string]int{}
	for i := 0; i < m.Config.NumHiddenLayers; i++ {
		for _, s := range allModules {
			ranks[model.ModulePath(i, s)] = 2
		}
	}
	ranks["model.layers.1.mlp.down_proj"] = 4
	// a base config written by transformers ≥ 4.56 has both keys
	cpath := filepath.Join(baseDir, "config.json")
	var c map[string]any
	raw, _ := os.ReadFile(cpath)
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	c["dtype"] = "bfloat16"
	raw, _ = json.Marshal(c)
	if err := os.WriteFile(cpath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	adapter := writePEFTAdapter(t, m, "", ranks, map[string]any{"peft_type": "LORA", "r": 2, "lora_alpha": 4,
		"target_modules": "ALL-LINEAR", "rank_pattern": map[string]int{`layers\.1\.mlp\.down_proj`: 4}})
	out := filepath.Join(dir, "merged")
	code, stdout, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapter, "--out", out, "--dtype", "fp32")
	if code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "into 14 modules") {
		t.Errorf("merge said %q", stdout)
	}
	var written map[string]any
	raw, _ = os.ReadFile(filepath.Join(out, "config.json"))
	if err := json.Unmarshal(raw, &written); err != nil {
		t.Fatal(err)
	}
	if written["dtype"] != "float32" || written["torch_dtype"] != "float32" {
		t.Errorf("merged config has dtype %v, torch_dtype %v; want both float32", written["dtype"], written["torch_dtype"])
	}
}
