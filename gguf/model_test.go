package gguf

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

func familyVocab(t *testing.T, c model.Config) *Vocab {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile("testdata/family_tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := LoadVocab(dir, c.VocabSize, c.BOSTokenID, c.EOSTokenID, c.PadTokenID)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Every family's export has llama.cpp's tensor names and the metadata its
// loader reads, with q and k permuted exactly for the llama architecture.
func TestModelExportEveryFamily(t *testing.T) {
	for _, fam := range []string{"llama3.2", "llama-linear-bias", "mistral", "qwen2.5", "qwen3"} {
		t.Run(fam, func(t *testing.T) {
			m, err := model.Load(filepath.Join("../model/testdata/families", fam))
			if err != nil {
				t.Fatal(err)
			}
			c := m.Config
			w, _ := MergedWeights(m, nil)
			f, _, err := Model(c, w, familyVocab(t, c), ModelOptions{Type: F32, Name: fam})
			if err != nil {
				t.Fatal(err)
			}
			arch := map[string]string{"llama3.2": "llama", "llama-linear-bias": "llama", "mistral": "llama", "qwen2.5": "qwen2", "qwen3": "qwen3"}[fam]
			if f.Get("general.architecture") != arch {
				t.Fatalf("architecture %v, want %s", f.Get("general.architecture"), arch)
			}
			hd := c.HeadDimension()
			for key, want := range map[string]any{
				"context_length": uint32(c.MaxPositionEmbeddings), "embedding_length": uint32(c.HiddenSize),
				"block_count": uint32(c.NumHiddenLayers), "feed_forward_length": uint32(c.IntermediateSize),
				"attention.head_count": uint32(c.NumAttentionHeads), "attention.head_count_kv": uint32(c.NumKeyValueHeads),
				"attention.key_length": uint32(hd), "rope.freq_base": float32(c.RopeTheta),
				"attention.layer_norm_rms_epsilon": float32(c.RMSNormEps), "vocab_size": uint32(c.VocabSize),
			} {
				if got := f.Get(arch + "." + key); got != want {
					t.Errorf("%s.%s = %v (%T), want %v (%T)", arch, key, got, got, want, want)
				}
			}
			if (arch == "llama") != (f.Get("llama.rope.dimension_count") == uint32(hd)) {
				t.Errorf("rope.dimension_count %v", f.Get("llama.rope.dimension_count"))
			}
			if fam == "llama-linear-bias" && (f.Get("llama.rope.scaling.type") != "linear" || f.Get("llama.rope.scaling.factor") != float32(2)) {
				t.Errorf("linear rope scaling written as %v × %v", f.Get("llama.rope.scaling.type"), f.Get("llama.rope.scaling.factor"))
			}
			var names []string
			byName := map[string]Tensor{}
			for _, tn := range f.Tensors {
				names = append(names, tn.Name)
				byName[tn.Name] = tn
			}
			want := []string{"token_embd.weight", "output_norm.weight"}
			if !c.TieWordEmbeddings {
				want = append(want, "output.weight")
			}
			if c.RopeScaling != nil && c.RopeScaling.Type == "llama3" {
				want = append(want, "rope_freqs.weight")
			}
			for i := 0; i < c.NumHiddenLayers; i++ {
				for _, n := range []string{"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"} {
					want = append(want, fmt.Sprintf("blk.%d.%s.weight", i, n))
				}
				if c.QKNorm {
					want = append(want, fmt.Sprintf("blk.%d.attn_q_norm.weight", i), fmt.Sprintf("blk.%d.attn_k_norm.weight", i))
				}
				for short, gg := range moduleNames {
					if c.Bias(short) {
						want = append(want, fmt.Sprintf("blk.%d.%s.bias", i, gg))
					}
				}
			}
			slices.Sort(names)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Fatalf("tensors\n%v\nwant\n%v", names, want)
			}
			// shapes: HF's [out, in]; norms and biases f32
			q := byName["blk.1.attn_q.weight"]
			if !slices.Equal(q.Shape, []int{c.NumAttentionHeads * hd, c.HiddenSize}) {
				t.Fatalf("attn_q shape %v", q.Shape)
			}
			orig := w[model.ModulePath(1, "q_proj")+".weight"]
			k := byName["blk.1.attn_k.weight"]
			origK := w[model.ModulePath(1, "k_proj")+".weight"]
			if permuted(c.Family) {
				if !slices.Equal(q.Data, permuteRows(orig, c.NumAttentionHeads, c.HiddenSize)) || slices.Equal(q.Data, orig) ||
					!slices.Equal(k.Data, permuteRows(origK, c.NumKeyValueHeads, c.HiddenSize)) {
					t.Fatal("llama's q and k must be permuted by their own head counts")
				}
			} else if !slices.Equal(q.Data, orig) || !slices.Equal(k.Data, origK) {
				t.Fatal("qwen's q and k are written as they are (NEOX rope)")
			}
			if c.RopeScaling != nil && c.RopeScaling.Type == "llama3" {
				// llama.cpp divides the base frequencies by the factors: that
				// must be mixtune's (transformers') scaled inv_freq
				rf := byName["rope_freqs.weight"].Data
				base := nn.RopeInvFreq(hd, c.RopeTheta)
				inv := c.InvFreq()
				for i := range rf {
					if got := float64(base[i]) / float64(rf[i]); math.Abs(got-float64(inv[i])) > 1e-6*float64(inv[i]) {
						t.Fatalf("frequency %d: base/factor = %v, mixtune's %v", i, got, inv[i])
					}
				}
			}
		})
	}
}

func TestCheckModelRefusals(t *testing.T) {
	base := model.Config{Family: model.Llama, VocabSize: 40, HiddenSize: 32, IntermediateSize: 32, NumHiddenLayers: 1,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-6, RopeTheta: 1e4}
	for _, c := range []struct {
		edit func(*model.Config)
		want string
	}{
		{func(c *model.Config) { c.Family = "gemma" }, `model family "gemma" is not supported by GGUF export`},
		{func(c *model.Config) { c.Family, c.QKNorm, c.AttentionBias = model.Qwen3, true, true }, "qwen3 with attention_bias true"},
		{func(c *model.Config) { c.Family, c.HeadDim = model.Qwen2, 16 }, "qwen2 with head_dim 16"},
		{func(c *model.Config) { c.RopeScaling = &model.RopeScaling{Type: "yarn"} }, "rope_scaling yarn"},
	} {
		cfg := base
		c.edit(&cfg)
		if err := CheckModel(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
	if err := CheckModel(base); err != nil {
		t.Fatal(err)
	}
	// a vocabulary that does not match the embedding is refused by name
	m, _ := model.New(base, 1)
	w, _ := MergedWeights(m, nil)
	v, _ := ByteVocab(300)
	if _, _, err := Model(base, w, v, ModelOptions{}); err == nil || !strings.Contains(err.Error(), "300 tokens but the model's embedding has 40 rows") {
		t.Fatalf("mismatched vocabulary: %v", err)
	}
	delete(w, "model.norm.weight")
	if _, _, err := Model(base, w, familyVocab(t, base), ModelOptions{}); err == nil || !strings.Contains(err.Error(), "no tensor model.norm.weight") {
		t.Fatalf("missing tensor: %v", err)
	}
}

func TestAdapterExport(t *testing.T) {
	cfg := model.Config{VocabSize: 40, HiddenSize: 64, IntermediateSize: 96, NumHiddenLayers: 2, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-6, RopeTheta: 1e4, InitializerRange: 0.1, BOSTokenID: 1, EOSTokenID: 2}
	m, err := model.New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(model.AttentionModules), model.MLPModules...)
	ts, _ := peft.Targets(peft.ModelTargets(m), all)
	l, err := peft.New(peft.Config{R: 8, Alpha: 16, TargetModules: all, Init: peft.InitGaussian}, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range l.Modules {
		for i := range mod.B {
			mod.B[i] = float32(i%7) * 0.01
		}
	}
	f, fb, err := Adapter(m.Config, l, ModelOptions{Type: Q8_0})
	if err != nil {
		t.Fatal(err)
	}
	if f.Get("general.type") != "adapter" || f.Get("adapter.type") != "lora" || f.Get("adapter.lora.alpha") != float32(16) || f.Get("general.architecture") != "llama" {
		t.Fatalf("metadata %v", f.KV)
	}
	if len(f.Tensors) != 2*len(l.Modules) {
		t.Fatalf("%d tensors for %d modules", len(f.Tensors), len(l.Modules))
	}
	// rank 8 rows cannot be q8_0: every lora_b falls back to f16
	if len(fb) != len(l.Modules) || !strings.HasSuffix(fb[0].Tensor, ".lora_b") {
		t.Fatalf("fallbacks %v", fb)
	}
	q := l.Module(model.ModulePath(0, "q_proj"))
	for _, tn := range f.Tensors {
		switch tn.Name {
		case "blk.0.attn_q.weight.lora_a":
			if !slices.Equal(tn.Shape, []int{8, 64}) || !slices.Equal(tn.Data, q.A) || tn.Type != Q8_0 {
				t.Fatalf("lora_a %v %v", tn.Shape, tn.Type)
			}
		case "blk.0.attn_q.weight.lora_b":
			if !slices.Equal(tn.Shape, []int{64, 8}) || !slices.Equal(tn.Data, permuteRows(q.B, 4, 8)) || tn.Type != F16 {
				t.Fatalf("lora_b %v %v: B's rows permuted as the model's q rows", tn.Shape, tn.Type)
			}
		}
	}
	l.Config.UseRSLoRA = true
	if a := Alpha(l.Config); math.Abs(float64(a)/8-16/math.Sqrt(8)) > 1e-6 {
		t.Fatalf("rsLoRA alpha %v: alpha/r must be 16/√8", a)
	}
	l.Config.UseDoRA = true
	if _, _, err := Adapter(m.Config, l, ModelOptions{}); err == nil || !strings.Contains(err.Error(), "DoRA") {
		t.Fatalf("DoRA exported: %v", err)
	}
	if _, err := TensorName("lm_head"); err == nil {
		t.Fatal("lm_head got a GGUF adapter name")
	}
}

// TestAdapterExportPatterns: a rank_pattern alone is what llama.cpp's
// alpha/r computes per module (each lora_a has its own rank), so it is
// written; an alpha_pattern, or modules_to_save, has no llama.cpp adapter
// form and is refused by name rather than written with the wrong scaling.
func TestAdapterExportPatterns(t *testing.T) {
	cfg := model.Config{VocabSize: 40, HiddenSize: 64, IntermediateSize: 96, NumHiddenLayers: 2, NumAttentionHeads: 4,
		NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-6, RopeTheta: 1e4, InitializerRange: 0.1, BOSTokenID: 1, EOSTokenID: 2}
	m, err := model.New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    peft.Config
		want string // "" for success
	}{
		{peft.Config{R: 8, Alpha: 16, TargetModules: []string{"q_proj", "v_proj"}, RankPattern: []peft.Pattern{{Key: "v_proj", Value: 4}}}, ""},
		{peft.Config{R: 8, Alpha: 16, TargetModules: []string{"q_proj", "v_proj"}, AlphaPattern: []peft.Pattern{{Key: "v_proj", Value: 4}}},
			"model.layers.0.self_attn.v_proj has scaling 0.5 (from rank_pattern or alpha_pattern)"},
		{peft.Config{R: 8, Alpha: 16, TargetModules: []string{"q_proj"}, ModulesToSave: []string{"lm_head"}},
			"the adapter replaces [lm_head] whole (modules_to_save)"},
	} {
		ts, err := peft.Select(peft.ModelTargets(m), tc.c)
		if err != nil {
			t.Fatal(err)
		}
		l, err := peft.New(tc.c, ts, 1, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := Adapter(m.Config, l, ModelOptions{Type: F32})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.c, err)
		case tc.want == "":
			for _, tn := range f.Tensors {
				if tn.Name == "blk.0.attn_v.weight.lora_a" && tn.Shape[0] != 4 {
					t.Errorf("%s: v_proj's lora_a has shape %v, want rank 4", tc.c, tn.Shape)
				}
			}
		case err == nil || !strings.Contains(err.Error(), tc.want):
			t.Errorf("%s: %v, want an error containing %q", tc.c, err, tc.want)
		}
	}
}
