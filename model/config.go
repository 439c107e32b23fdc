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
	"math/bits"
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

// Limits on a config's sizes, far above any real Llama (Llama 3.1 405B has
// 126 layers, 4·10^11 parameters and 131072 positions) yet small enough
// that nothing computed from a config read from disk overflows an int or
// runs a loop for hours: a corrupt or hostile config.json is an error, not
// a panic or a hang.
const (
	MaxLayers    = 1 << 16
	MaxPositions = 1 << 24
	MaxParams    = 1 << 40
)

// paramCount is the number of weights Specs lists, computed without
// overflow: ok is false when it does not fit in a uint64 (or a size is
// negative, which Validate reports on its own).
func (c Config) paramCount() (n uint64, ok bool) {
	dims := []int{c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDimension()}
	for _, v := range dims {
		if v < 0 {
			return 0, true
		}
	}
	ok = true
	mul := func(a, b uint64) uint64 {
		hi, lo := bits.Mul64(a, b)
		ok = ok && hi == 0
		return lo
	}
	add := func(a, b uint64) uint64 {
		s, carry := bits.Add64(a, b, 0)
		ok = ok && carry == 0
		return s
	}
	d, f, hd := uint64(c.HiddenSize), uint64(c.IntermediateSize), uint64(c.HeadDimension())
	q, kv := mul(uint64(c.NumAttentionHeads), hd), mul(uint64(c.NumKeyValueHeads), hd)
	layer := add(add(mul(2, d), mul(2, mul(q, d))), add(mul(2, mul(kv, d)), mul(3, mul(f, d))))
	heads := uint64(2)
	if c.TieWordEmbeddings {
		heads = 1
	}
	n = add(add(mul(layer, uint64(c.NumHiddenLayers)), mul(heads, mul(uint64(c.VocabSize), d))), d)
	return n, ok
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
	if c.HeadDim < 0 {
		errs = append(errs, fmt.Sprintf("head_dim must be positive (or absent), got %d", c.HeadDim))
	}
	if c.NumHiddenLayers > MaxLayers {
		errs = append(errs, fmt.Sprintf("num_hidden_layers %d is more than mixtune's limit of %d", c.NumHiddenLayers, MaxLayers))
	}
	if c.MaxPositionEmbeddings > MaxPositions {
		errs = append(errs, fmt.Sprintf("max_position_embeddings %d is more than mixtune's limit of %d", c.MaxPositionEmbeddings, MaxPositions))
	}
	if n, ok := c.paramCount(); !ok || n > MaxParams {
		errs = append(errs, fmt.Sprintf("the model would have more than mixtune's limit of %d parameters (2^40)", int64(MaxParams)))
	}
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
