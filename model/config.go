// Package model is the Llama architecture: its Hugging Face config, its
// weights under HF tensor names, loading and saving the HF layout
// (config.json + safetensors, single file or sharded), the training graph
// built from nn ops, and a KV-cached decoder for generation.
package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mixtune/mixtune/internal/atomicfile"
)

// Config is the subset of HF's LlamaConfig that defines the computation.
type Config struct {
	VocabSize             int     `json:"vocab_size"`
	HiddenSize            int     `json:"hidden_size"`
	IntermediateSize      int     `json:"intermediate_size"`
	NumHiddenLayers       int     `json:"num_hidden_layers"`
	NumAttentionHeads     int     `json:"num_attention_heads"`
	NumKeyValueHeads      int     `json:"num_key_value_heads"`
	HeadDim               int     `json:"head_dim,omitempty"`
	MaxPositionEmbeddings int     `json:"max_position_embeddings"`
	RMSNormEps            float64 `json:"rms_norm_eps"`
	RopeTheta             float64 `json:"rope_theta"`
	TieWordEmbeddings     bool    `json:"tie_word_embeddings"`
	BOSTokenID            int     `json:"bos_token_id"`
	EOSTokenID            int     `json:"eos_token_id"`
	PadTokenID            int     `json:"pad_token_id"`
	InitializerRange      float64 `json:"initializer_range,omitempty"`
	TorchDtype            string  `json:"torch_dtype,omitempty"`
}

// hfConfig is config.json as HF writes it: Config plus the fields mixtune
// checks it can honour, and token ids that may be lists.
type hfConfig struct {
	Config
	Architectures  []string        `json:"architectures"`
	ModelType      string          `json:"model_type"`
	HiddenAct      string          `json:"hidden_act"`
	AttentionBias  bool            `json:"attention_bias"`
	MLPBias        bool            `json:"mlp_bias"`
	RopeScaling    json.RawMessage `json:"rope_scaling"`
	EOS            json.RawMessage `json:"eos_token_id"`
	BOS            json.RawMessage `json:"bos_token_id"`
	Pad            json.RawMessage `json:"pad_token_id"`
	TransformersV  string          `json:"transformers_version,omitempty"`
	SlidingWindow  json.RawMessage `json:"sliding_window"`
	NumKeyValueRaw json.RawMessage `json:"num_key_value_heads"`
}

// HeadDimension is head_dim, or hidden_size/num_attention_heads when unset.
func (c Config) HeadDimension() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	if c.NumAttentionHeads == 0 {
		return 0
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// Validate checks that the config describes a model mixtune can build.
func (c Config) Validate() error {
	var errs []string
	pos := func(name string, v int) {
		if v <= 0 {
			errs = append(errs, fmt.Sprintf("%s must be positive, got %d", name, v))
		}
	}
	pos("vocab_size", c.VocabSize)
	pos("hidden_size", c.HiddenSize)
	pos("intermediate_size", c.IntermediateSize)
	pos("num_hidden_layers", c.NumHiddenLayers)
	pos("num_attention_heads", c.NumAttentionHeads)
	pos("num_key_value_heads", c.NumKeyValueHeads)
	pos("max_position_embeddings", c.MaxPositionEmbeddings)
	if c.NumAttentionHeads > 0 && c.NumKeyValueHeads > 0 && c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		errs = append(errs, fmt.Sprintf("num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", c.NumAttentionHeads, c.NumKeyValueHeads))
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		errs = append(errs, fmt.Sprintf("hidden_size (%d) is not divisible by num_attention_heads (%d); set head_dim", c.HiddenSize, c.NumAttentionHeads))
	}
	if hd := c.HeadDimension(); hd%2 != 0 {
		errs = append(errs, fmt.Sprintf("head dimension %d must be even for rotary embeddings", hd))
	}
	if c.RMSNormEps <= 0 {
		errs = append(errs, fmt.Sprintf("rms_norm_eps must be positive, got %g", c.RMSNormEps))
	}
	if c.RopeTheta <= 0 {
		errs = append(errs, fmt.Sprintf("rope_theta must be positive, got %g", c.RopeTheta))
	}
	for _, t := range []struct {
		name string
		id   int
	}{{"bos_token_id", c.BOSTokenID}, {"eos_token_id", c.EOSTokenID}, {"pad_token_id", c.PadTokenID}} {
		if t.id < -1 || t.id >= c.VocabSize {
			errs = append(errs, fmt.Sprintf("%s %d is outside the vocabulary (size %d)", t.name, t.id, c.VocabSize))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// ReadConfig reads dir/config.json and refuses architectures mixtune would
// compute differently from HF (biases, rope scaling, other activations).
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("read model config: %w", err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes config.json bytes.
func ParseConfig(b []byte) (Config, error) {
	hc := hfConfig{}
	hc.RMSNormEps = 1e-6 // HF LlamaConfig defaults for absent fields
	hc.RopeTheta = 10000
	hc.HiddenAct = "silu"
	if err := json.Unmarshal(b, &hc); err != nil {
		return Config{}, fmt.Errorf("invalid JSON: %w", err)
	}
	c := hc.Config
	if hc.ModelType != "" && hc.ModelType != "llama" {
		return c, fmt.Errorf("model_type %q is not supported (mixtune trains the llama architecture)", hc.ModelType)
	}
	if hc.HiddenAct != "silu" {
		return c, fmt.Errorf("hidden_act %q is not supported (the Llama MLP uses silu)", hc.HiddenAct)
	}
	if hc.AttentionBias || hc.MLPBias {
		return c, errors.New("attention_bias and mlp_bias are not supported")
	}
	if s := bytes.TrimSpace(hc.RopeScaling); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		return c, fmt.Errorf("rope_scaling %s is not supported: mixtune computes plain rotary embeddings", s)
	}
	var err error
	if c.BOSTokenID, err = firstID("bos_token_id", hc.BOS); err != nil {
		return c, err
	}
	if c.EOSTokenID, err = firstID("eos_token_id", hc.EOS); err != nil {
		return c, err
	}
	if c.PadTokenID, err = firstID("pad_token_id", hc.Pad); err != nil {
		return c, err
	}
	switch kv := bytes.TrimSpace(hc.NumKeyValueRaw); {
	case len(kv) == 0 || bytes.Equal(kv, []byte("null")):
		c.NumKeyValueHeads = c.NumAttentionHeads // HF: absent means multi-head attention
	default:
		if err := json.Unmarshal(kv, &c.NumKeyValueHeads); err != nil {
			return c, fmt.Errorf("num_key_value_heads must be an integer, got %s", kv)
		}
	}
	return c, c.Validate()
}

// firstID reads a token id that HF may write as a number, a list (the
// first is used) or null (-1).
func firstID(field string, raw json.RawMessage) (int, error) {
	s := bytes.TrimSpace(raw)
	if len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return -1, nil
	}
	var id int
	if json.Unmarshal(s, &id) == nil {
		return id, nil
	}
	var ids []int
	if json.Unmarshal(s, &ids) == nil && len(ids) > 0 {
		return ids[0], nil
	}
	return 0, fmt.Errorf("%s must be an integer or a list of integers, got %s", field, s)
}

// WriteConfig writes dir/config.json in HF's form, with torch_dtype naming
// the dtype the weights are stored in.
func WriteConfig(dir string, c Config, torchDtype string) error {
	c.TorchDtype = torchDtype
	out := struct {
		Architectures []string `json:"architectures"`
		ModelType     string   `json:"model_type"`
		HiddenAct     string   `json:"hidden_act"`
		AttentionBias bool     `json:"attention_bias"`
		MLPBias       bool     `json:"mlp_bias"`
		RopeScaling   any      `json:"rope_scaling"`
		Config
	}{[]string{"LlamaForCausalLM"}, "llama", "silu", false, false, nil, c}
	if c.HeadDim == 0 {
		out.Config.HeadDim = c.HeadDimension()
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'))
}
