package model

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/nn/nntest"
)

func tinyConfig(tied bool) Config {
	return Config{
		VocabSize: 11, HiddenSize: 8, IntermediateSize: 12, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 16,
		RMSNormEps: 1e-5, RopeTheta: 10000, TieWordEmbeddings: tied,
		BOSTokenID: 0, EOSTokenID: 1, PadTokenID: 2, InitializerRange: 0.5,
	}
}

// setBatch binds token ids and targets to the graph's inputs.
func setBatch(t *testing.T, g *Graph, ids, targets []int) {
	t.Helper()
	for _, in := range []struct {
		n *G.Node
		v []int
	}{{g.IDs, ids}, {g.Targets, targets}} {
		if err := G.Let(in.n, tensor.New(tensor.WithShape(len(in.v)), tensor.WithBacking(append([]int(nil), in.v...)))); err != nil {
			t.Fatal(err)
		}
	}
}

// TestModelGradients checks every weight's gradient of a whole 2-layer
// model in float64 against central differences.
func TestModelGradients(t *testing.T) {
	for _, tied := range []bool{false, true} {
		name := "untied"
		if tied {
			name = "tied"
		}
		t.Run(name, func(t *testing.T) {
			m, err := New(tinyConfig(tied), 3)
			if err != nil {
				t.Fatal(err)
			}
			b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
			g, err := m.Build(b, GraphConfig{Batch: 2, SeqLen: 5, Trainable: func(string) bool { return true }})
			if err != nil {
				t.Fatal(err)
			}
			setBatch(t, g, []int{0, 5, 3, 9, 4, 0, 7, 7, 10, 6}, []int{5, 3, 9, 4, nn.IgnoreIndex, 7, 7, 10, 6, 8})
			var params []*G.Node
			for _, s := range Specs(m.Config) {
				params = append(params, g.Params[s.Name])
			}
			worst := nntest.GradCheck(t, b.G, g.Loss, params, 1e-8)
			t.Logf("%d weights, worst relative error %.2g", len(params), worst)
		})
	}
}

// A frozen base computes no weight gradients at all: Grad must refuse to
// differentiate with respect to a frozen weight, because the ops never
// built that path.
func TestFrozenWeightsGetNoGradientPath(t *testing.T) {
	m, err := New(tinyConfig(false), 3)
	if err != nil {
		t.Fatal(err)
	}
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 1}, tensor.Float64)
	g, err := m.Build(b, GraphConfig{Batch: 1, SeqLen: 4, Trainable: func(n string) bool { return n == "model.norm.weight" }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := G.Grad(g.Loss, g.Params["model.layers.0.self_attn.q_proj.weight"]); err == nil {
		t.Fatal("a frozen weight got a gradient path")
	}
	if _, err := G.Grad(g.Loss, g.Params["model.norm.weight"]); err != nil {
		t.Fatalf("trainable weight: %v", err)
	}
	if n := len(b.G.AllNodes()); n > 120 {
		t.Fatalf("graph has %d nodes: the frozen layers grew backward ops", n)
	}
}

func TestConfigValidation(t *testing.T) {
	c := tinyConfig(false)
	c.NumKeyValueHeads = 3
	if err := c.Validate(); err == nil || err.Error() != "num_attention_heads (4) must be a multiple of num_key_value_heads (3)" {
		t.Fatalf("got %v", err)
	}
	base := `"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":64`
	for _, tc := range []struct{ extra, want string }{
		{`"model_type":"gemma"`, `model_type "gemma" is not supported (mixtune trains llama, mistral, qwen2 and qwen3)`},
		{`"hidden_act":"gelu"`, `hidden_act "gelu" is not supported (these families use silu)`},
		{`"attention_dropout":0.1`, `attention_dropout 0.1 is not supported: mixtune trains without dropout in attention`},
		{`"model_type":"qwen2","use_sliding_window":true,"sliding_window":4`, `use_sliding_window true is not supported for qwen2 (the published models set it false)`},
		{`"model_type":"mistral","attention_bias":true`, `attention_bias and mlp_bias are not part of mistral`},
		{`"model_type":"qwen3","mlp_bias":true`, `mlp_bias is not part of qwen3`},
		{`"layer_types":["full_attention","sliding_attention"]`, `layer_types[1] is "sliding_attention": only full_attention layers are supported`},
		{`"rope_scaling":{"rope_type":"yarn","factor":4}`, `rope_scaling of type "yarn" is not supported (mixtune computes linear and llama3 scaling exactly as transformers; dynamic, yarn and longrope it refuses rather than approximate)`},
		{`"rope_scaling":{"rope_type":"linear"}`, `rope_scaling of type linear needs factor`},
		{`"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4}`, `rope_scaling of type llama3 needs original_max_position_embeddings`},
		{`"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":4,"high_freq_factor":1,"original_max_position_embeddings":16}`, `rope_scaling.high_freq_factor (1) must be greater than low_freq_factor (4)`},
		{`"rope_scaling":{"rope_type":"linear","factor":-2}`, `rope_scaling.factor must be a positive number, got -2`},
		{`"rope_scaling":{"factor":2}`, `rope_scaling {"factor":2} has no rope_type`},
		{`"rope_scaling":[1]`, `rope_scaling must be an object or null, got [1]`},
	} {
		if _, err := ParseConfig([]byte("{" + base + "," + tc.extra + "}")); err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v\nwant %q", tc.extra, err, tc.want)
		}
	}
	for extra, want := range map[string]*RopeScaling{
		`"rope_scaling":null`:                           nil,
		`"rope_scaling":{"rope_type":"default"}`:        nil,
		`"rope_scaling":{"type":"linear","factor":2.0}`: {Type: "linear", Factor: 2},
		`"rope_scaling":{"rope_type":"llama3","factor":32.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192}`: {Type: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
	} {
		c, err := ParseConfig([]byte("{" + base + "," + extra + "}"))
		if err != nil || (c.RopeScaling == nil) != (want == nil) || (want != nil && *c.RopeScaling != *want) {
			t.Errorf("%s: %+v %v", extra, c.RopeScaling, err)
		}
	}
	c2, err := ParseConfig([]byte(`{"vocab_size":10,"hidden_size":8,"intermediate_size":4,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":8,"eos_token_id":[3,4],"bos_token_id":1}`))
	if err != nil || c2.EOSTokenID != 3 || c2.NumKeyValueHeads != 2 || c2.PadTokenID != -1 || c2.RMSNormEps != 1e-6 {
		t.Fatalf("defaults: %+v, %v", c2, err)
	}
	if math.Abs(c2.RopeTheta-10000) > 0 {
		t.Fatalf("rope_theta default %v", c2.RopeTheta)
	}
}
