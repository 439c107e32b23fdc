package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/safetensors"
)

// A config.json claiming far more layers than the weights hold is refused
// from the headers, before anything in proportion to the claim is
// allocated (it used to end in "fatal error: runtime: out of memory").
func TestInspectRefusesAConfigTheWeightsDoNotHold(t *testing.T) {
	dir := t.TempDir()
	m, err := New(tinyConfig(false), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.json")
	raw, _ := os.ReadFile(p)
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["num_hidden_layers"] = 60000
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, load := range []func(string) error{
		func(d string) error { _, err := Inspect(d); return err },
		func(d string) error { _, err := Load(d); return err },
	} {
		err := load(dir)
		want := "config.json has num_hidden_layers 60000, but the weights hold 2 layers (missing tensor model.layers.2.input_layernorm.weight)"
		if err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Fatalf("error %v\nwant one ending %q", err, want)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("checking the config allocated %d MiB", grew>>20)
	}
}

// A non-finite base weight is named by Load, not discovered as a diverged
// loss.
func TestLoadNamesANonFiniteWeight(t *testing.T) {
	dir := t.TempDir()
	m, err := New(tinyConfig(false), 1)
	if err != nil {
		t.Fatal(err)
	}
	m.Weights["model.layers.1.mlp.up_proj.weight"].Data[5] = float32(math.Inf(-1))
	if err := m.Save(dir, amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir)
	want := "tensor model.layers.1.mlp.up_proj.weight holds a non-finite value (-Inf at index 5)"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("error %v, want one ending %q", err, want)
	}
}

// The configs of the models people fine-tune load as published, with the
// family, shapes and features transformers derives from them.
func TestPublishedConfigsLoad(t *testing.T) {
	for _, tc := range []struct {
		file                      string
		family                    string
		params                    int // weights, without the tied head
		headDim, kv, window       int
		bias, qkNorm, tied, scale bool
	}{
		{"SmolLM2-135M", Llama, 134515008, 64, 3, 0, false, false, true, false},
		{"TinyLlama-1.1B-Chat-v1.0", Llama, 1100048384, 64, 4, 0, false, false, false, false},
		{"Llama-3.2-1B", Llama, 1235814400, 64, 8, 0, false, false, true, true},
		{"Mistral-7B-v0.1", Mistral, 7241732096, 128, 8, 4096, false, false, false, false},
		{"Qwen2.5-0.5B", Qwen2, 494032768, 64, 2, 0, true, false, true, false},
		{"Qwen3-0.6B", Qwen3, 596049920, 128, 8, 0, false, true, true, false},
	} {
		b, err := os.ReadFile(filepath.Join("testdata", "published", tc.file+".json"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := ParseConfig(b)
		if err != nil {
			t.Errorf("%s: %v", tc.file, err)
			continue
		}
		params := 0
		for _, s := range Specs(c) {
			params += numel(s.Shape)
		}
		if c.Family != tc.family || params != tc.params || c.HeadDimension() != tc.headDim || c.NumKeyValueHeads != tc.kv ||
			c.SlidingWindow != tc.window || c.Bias("q_proj") != tc.bias || c.QKNorm != tc.qkNorm || c.TieWordEmbeddings != tc.tied || (c.RopeScaling != nil) != tc.scale {
			t.Errorf("%s: family %s, %d params, head_dim %d, kv %d, window %d, q bias %v, qk norm %v, tied %v, scaling %v",
				tc.file, c.Family, params, c.HeadDimension(), c.NumKeyValueHeads, c.SlidingWindow, c.Bias("q_proj"), c.QKNorm, c.TieWordEmbeddings, c.RopeScaling)
		}
	}
}

// A checkpoint that lacks a tensor its family needs, holds one it does not
// use, or whose q_norm disagrees with head_dim is refused, naming it.
func TestFamilyWeightsChecked(t *testing.T) {
	src := filepath.Join("testdata", "families", "qwen3")
	ck, err := safetensors.OpenCheckpoint(src)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(src, "config.json"))
	for _, tc := range []struct {
		name string
		edit func(map[string]safetensors.Tensor)
		want string
	}{
		{"missing q_norm", func(ts map[string]safetensors.Tensor) { delete(ts, "model.layers.1.self_attn.q_norm.weight") },
			"missing tensor model.layers.1.self_attn.q_norm.weight"},
		{"a tensor the family does not use", func(ts map[string]safetensors.Tensor) {
			ts["model.layers.0.self_attn.q_proj.bias"] = safetensors.Tensor{Name: "model.layers.0.self_attn.q_proj.bias", Shape: []int{64}, Data: make([]float32, 64), Dtype: amp.FP32}
		}, "unexpected tensor model.layers.0.self_attn.q_proj.bias: not part of a qwen3 model with this config.json"},
		{"q_norm of the wrong width", func(ts map[string]safetensors.Tensor) {
			ts["model.layers.0.self_attn.q_norm.weight"] = safetensors.Tensor{Name: "model.layers.0.self_attn.q_norm.weight", Shape: []int{8}, Data: make([]float32, 8), Dtype: amp.FP32}
		}, "tensor model.layers.0.self_attn.q_norm.weight has shape [8], config.json implies [16]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := map[string]safetensors.Tensor{}
			for _, n := range ck.Names() {
				v, shape, err := ck.Float32(n)
				if err != nil {
					t.Fatal(err)
				}
				ts[n] = safetensors.Tensor{Name: n, Shape: shape, Data: v, Dtype: amp.FP32}
			}
			tc.edit(ts)
			var list []safetensors.Tensor
			for _, x := range ts {
				list = append(list, x)
			}
			dir := t.TempDir()
			if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), list, nil); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644)
			if _, err := Inspect(dir); err == nil || !strings.HasSuffix(err.Error(), tc.want) {
				t.Fatalf("%v\nwant ...%s", err, tc.want)
			}
		})
	}
}

// NewAs and LoadAs convert each matrix to 16 bits as they make it, and
// give what converting the whole fp32 model afterwards (Compact) gives.
func TestSixteenBitAsMadeEqualsCompact(t *testing.T) {
	c := tinyConfig(false)
	dir := t.TempDir()
	m, err := New(c, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir, amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	for _, f := range []amp.Format{amp.BF16, amp.FP16} {
		want, _ := New(c, 5)
		want.Compact(f, func(string) bool { return true })
		made, err := NewAs(c, 5, f)
		if err != nil {
			t.Fatal(err)
		}
		loaded, err := LoadAs(dir, f)
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range want.Weights {
			for what, got := range map[string]*Tensor{"NewAs": made.Weights[name], "LoadAs": loaded.Weights[name]} {
				if got.Format != w.Format || !slices.Equal(got.Bits, w.Bits) || !slices.Equal(got.Data, w.Data) {
					t.Errorf("%v %s: %s differs from Compact's", f, name, what)
				}
			}
		}
		if n := made.Weights["model.layers.0.self_attn.q_proj.weight"]; n.Bits == nil || n.Data != nil {
			t.Errorf("%v: a matrix kept fp32", f)
		}
	}
}
