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
	"maps"
	"math"
	"math/bits"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/readlimit"
)

// Families mixtune computes exactly as transformers does: llama (with
// rope_scaling linear or llama3, attention_bias, mlp_bias), mistral (llama
// with a sliding attention window), qwen2 (biases on q, k and v) and qwen3
// (per-head RMSNorm of q and k, an explicit head_dim).
const (
	Llama   = "llama"
	Mistral = "mistral"
	Qwen2   = "qwen2"
	Qwen3   = "qwen3"
)

// architectureOf is the transformers class of each family.
func architectureOf(family string) string {
	switch family {
	case Mistral:
		return "MistralForCausalLM"
	case Qwen2:
		return "Qwen2ForCausalLM"
	case Qwen3:
		return "Qwen3ForCausalLM"
	}
	return "LlamaForCausalLM"
}

// RopeScaling is config.json's rope_scaling: how the rotary frequencies
// are stretched for long contexts. Type is linear or llama3.
type RopeScaling struct {
	Type                          string
	Factor                        float64
	LowFreqFactor, HighFreqFactor float64 // llama3
	OriginalMaxPositionEmbeddings int     // llama3
}

// Config is the subset of HF's model configs that defines the computation.
type Config struct {
	// Family is the model_type: llama, mistral, qwen2 or qwen3.
	Family string `json:"-"`
	// AttentionBias puts biases on q, k, v and o (llama's and qwen3's
	// attention_bias); qwen2 always has them on q, k and v only.
	AttentionBias bool `json:"-"`
	MLPBias       bool `json:"-"`
	// QKNorm is qwen3's RMSNorm of each head of q and k (q_norm, k_norm).
	QKNorm bool `json:"-"`
	// SlidingWindow > 0 lets a token attend to itself and the
	// SlidingWindow−1 tokens before it (mistral).
	SlidingWindow int          `json:"-"`
	RopeScaling   *RopeScaling `json:"-"`
	// Raw is config.json as read, so that a model written back keeps every
	// field of its family (transformers reads them) with the dtype updated.
	Raw json.RawMessage `json:"-"`
	// BnB4 is config.json's quantization_config when it describes a
	// bitsandbytes 4-bit checkpoint (nil: the weights are not quantized).
	BnB4 *BnB4Config `json:"-"`

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
	Architectures    []string        `json:"architectures"`
	ModelType        string          `json:"model_type"`
	HiddenAct        string          `json:"hidden_act"`
	AttentionBias    bool            `json:"attention_bias"`
	MLPBias          bool            `json:"mlp_bias"`
	AttentionDropout float64         `json:"attention_dropout"`
	RopeScaling      json.RawMessage `json:"rope_scaling"`
	RopeParameters   json.RawMessage `json:"rope_parameters"`
	RopeThetaRaw     json.RawMessage `json:"rope_theta"`
	PartialRotary    json.RawMessage `json:"partial_rotary_factor"`
	EOS              json.RawMessage `json:"eos_token_id"`
	BOS              json.RawMessage `json:"bos_token_id"`
	Pad              json.RawMessage `json:"pad_token_id"`
	TransformersV    string          `json:"transformers_version,omitempty"`
	SlidingWindow    json.RawMessage `json:"sliding_window"`
	UseSlidingWindow bool            `json:"use_sliding_window"`
	LayerTypes       []string        `json:"layer_types"`
	NumKeyValueRaw   json.RawMessage `json:"num_key_value_heads"`
	Quantization     json.RawMessage `json:"quantization_config"`
}

// Bias reports whether linear module short (q_proj, ..., down_proj) has a bias.
func (c Config) Bias(short string) bool {
	switch short {
	case "q_proj", "k_proj", "v_proj":
		return c.AttentionBias || c.Family == Qwen2
	case "o_proj":
		return c.AttentionBias
	}
	return c.MLPBias
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
	b, err := readlimit.ReadFile(path, readlimit.ModelConfig)
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
	c.Raw = append(json.RawMessage(nil), b...)
	if err := hc.family(&c); err != nil {
		return c, err
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
	if c.BnB4, err = parseQuantization(hc.Quantization); err != nil {
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

// family reads model_type and the features of its family, refusing what
// mixtune would compute differently from transformers.
func (hc *hfConfig) family(c *Config) error {
	switch hc.ModelType {
	case "", Llama:
		c.Family = Llama
	case Mistral, Qwen2, Qwen3:
		c.Family = hc.ModelType
	default:
		return fmt.Errorf("model_type %q is not supported (mixtune trains llama, mistral, qwen2 and qwen3)", hc.ModelType)
	}
	if hc.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act %q is not supported (these families use silu)", hc.HiddenAct)
	}
	if hc.AttentionDropout != 0 {
		return fmt.Errorf("attention_dropout %g is not supported: mixtune trains without dropout in attention", hc.AttentionDropout)
	}
	switch c.Family {
	case Llama:
		c.AttentionBias, c.MLPBias = hc.AttentionBias, hc.MLPBias
	case Qwen3:
		c.AttentionBias, c.QKNorm = hc.AttentionBias, true
	case Mistral, Qwen2:
		if hc.AttentionBias || hc.MLPBias {
			return fmt.Errorf("attention_bias and mlp_bias are not part of %s", c.Family)
		}
	}
	if hc.MLPBias && c.Family != Llama {
		return fmt.Errorf("mlp_bias is not part of %s", c.Family)
	}
	window, err := optionalInt("sliding_window", hc.SlidingWindow)
	if err != nil {
		return err
	}
	switch {
	case c.Family == Mistral:
		c.SlidingWindow = window
	case hc.UseSlidingWindow:
		return fmt.Errorf("use_sliding_window true is not supported for %s (the published models set it false)", c.Family)
	}
	for i, t := range hc.LayerTypes {
		if t != "full_attention" && !(t == "sliding_attention" && c.Family == Mistral) {
			return fmt.Errorf("layer_types[%d] is %q: only full_attention layers are supported", i, t)
		}
	}
	return hc.rope(c)
}

// rope reads the rotary embedding's theta and scaling from either layout
// transformers writes:
//
//   - v4: top-level rope_theta (10000 when absent) and rope_scaling (null,
//     or an object with rope_type or type and the scaling's parameters);
//   - v5: rope_parameters, one object holding rope_type, rope_theta and
//     the scaling's parameters (RotaryEmbeddingConfigMixin in
//     modeling_rope_utils.py), top-level rope_theta absent.
//
// A config with both is read when the two agree, and refused when they
// differ, since transformers v4 reads one and v5 the other (v5 prefers a
// non-empty rope_scaling to rope_parameters, and rope_parameters'
// rope_theta to the top-level one). A per-layer-type rope_parameters
// ({"full_attention": {...}}) is read when every layer type has the same
// parameters. partial_rotary_factor other than 1, and any key or rope_type
// mixtune does not compute, is refused by name.
func (hc *hfConfig) rope(c *Config) error {
	if err := checkPartialRotary("partial_rotary_factor", hc.PartialRotary); err != nil {
		return err
	}
	var topTheta *float64
	if raw := bytes.TrimSpace(hc.RopeThetaRaw); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil {
			return fmt.Errorf("rope_theta must be a number, got %s", raw)
		}
		topTheta = &f
		c.RopeTheta = f
	}
	legacy, _, err := parseRope("rope_scaling", hc.RopeScaling, c.MaxPositionEmbeddings)
	if err != nil {
		return err
	}
	params, err := perLayerRope(hc.RopeParameters, hc.LayerTypes)
	if err != nil {
		return err
	}
	v5, v5Theta, err := parseRope("rope_parameters", params, c.MaxPositionEmbeddings)
	if err != nil {
		return err
	}
	c.RopeScaling = legacy
	if hasJSONValue(params) {
		if hasJSONValue(hc.RopeScaling) && !sameScaling(legacy, v5) {
			return fmt.Errorf("rope_scaling %s and rope_parameters %s disagree (transformers v4 reads the first, v5 the second)", compactJSON(hc.RopeScaling), compactJSON(params))
		}
		c.RopeScaling = v5
		if v5Theta != nil {
			if topTheta != nil && *topTheta != *v5Theta {
				return fmt.Errorf("rope_theta %g and rope_parameters.rope_theta %g disagree (transformers v4 reads the first, v5 the second)", *topTheta, *v5Theta)
			}
			c.RopeTheta = *v5Theta
		}
	}
	return nil
}

// perLayerRope returns rope_parameters as one object: itself, or, when its
// keys are all layer types (transformers v5's per-layer form), the one
// object every layer type shares.
func perLayerRope(raw json.RawMessage, layerTypes []string) (json.RawMessage, error) {
	if !hasJSONValue(raw) || len(layerTypes) == 0 {
		return raw, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return raw, nil // parseRope names the problem
	}
	var first json.RawMessage
	for k, v := range m {
		if !slices.Contains(layerTypes, k) {
			return raw, nil // one global object
		}
		if first != nil && compactJSON(first) != compactJSON(v) {
			return nil, fmt.Errorf("rope_parameters differ between layer types (%s): mixtune computes one RoPE for every layer", strings.Join(slices.Sorted(maps.Keys(m)), ", "))
		}
		first = v
	}
	return first, nil
}

// checkPartialRotary refuses a partial_rotary_factor other than 1: these
// families rotate the whole head.
func checkPartialRotary(field string, raw json.RawMessage) error {
	if !hasJSONValue(raw) {
		return nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || f != 1 {
		return fmt.Errorf("%s %s is not supported: mixtune rotates the whole head (1.0)", field, compactJSON(raw))
	}
	return nil
}

func hasJSONValue(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

func sameScaling(a, b *RopeScaling) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// ropeKeys are the keys each rope_type reads (besides rope_type, type,
// and in rope_parameters rope_theta and partial_rotary_factor); any other
// key changes the computation in a way mixtune does not implement.
var ropeKeys = map[string][]string{
	"default": nil,
	"linear":  {"factor"},
	"llama3":  {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
}

// parseRope reads rope_scaling or rope_parameters (field): null, or an
// object whose rope_type (or older type) is default, linear (factor) or
// llama3 (factor, low_freq_factor, high_freq_factor,
// original_max_position_embeddings). In rope_parameters, rope_type
// defaults to "default", rope_theta is returned when present, and llama3's
// original_max_position_embeddings defaults to max_position_embeddings, as
// transformers v5's standardize_rope_params sets them.
func parseRope(field string, raw json.RawMessage, maxPositions int) (*RopeScaling, *float64, error) {
	if !hasJSONValue(raw) {
		return nil, nil, nil
	}
	raw = bytes.TrimSpace(raw)
	v5 := field == "rope_parameters"
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("%s must be an object or null, got %s", field, raw)
	}
	var kind string
	for _, k := range []string{"rope_type", "type"} {
		if v, ok := m[k]; ok {
			if err := json.Unmarshal(v, &kind); err != nil {
				return nil, nil, fmt.Errorf("%s.%s must be a string, got %s", field, k, v)
			}
			break
		}
	}
	if kind == "" && v5 {
		kind = "default"
	}
	var theta *float64
	if v5 {
		if v, ok := m["rope_theta"]; ok && hasJSONValue(v) {
			var f float64
			if err := json.Unmarshal(v, &f); err != nil || !(f > 0) || math.IsInf(f, 0) {
				return nil, nil, fmt.Errorf("rope_parameters.rope_theta must be a positive number, got %s", v)
			}
			theta = &f
		}
		if err := checkPartialRotary("rope_parameters.partial_rotary_factor", m["partial_rotary_factor"]); err != nil {
			return nil, nil, err
		}
		if _, ok := m["original_max_position_embeddings"]; !ok && kind == "llama3" {
			m["original_max_position_embeddings"] = json.RawMessage(strconv.Itoa(maxPositions))
		}
	}
	keys, known := ropeKeys[kind]
	switch {
	case kind == "":
		return nil, nil, fmt.Errorf("%s %s has no rope_type", field, raw)
	case !known:
		return nil, nil, fmt.Errorf("%s of type %q is not supported (mixtune computes linear and llama3 scaling exactly as transformers; dynamic, yarn and longrope it refuses rather than approximate)", field, kind)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(keys, k) && k != "rope_type" && k != "type" && !(v5 && (k == "rope_theta" || k == "partial_rotary_factor")) {
			return nil, nil, fmt.Errorf("%s.%s is not supported with rope_type %s: mixtune would compute RoPE without it", field, k, kind)
		}
	}
	num := func(key string) (float64, error) {
		v, ok := m[key]
		if !ok {
			return 0, fmt.Errorf("%s of type %s needs %s", field, kind, key)
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || !(f > 0) || math.IsInf(f, 0) {
			return 0, fmt.Errorf("%s.%s must be a positive number, got %s", field, key, v)
		}
		return f, nil
	}
	switch kind {
	case "linear":
		f, err := num("factor")
		if err != nil {
			return nil, nil, err
		}
		return &RopeScaling{Type: kind, Factor: f}, theta, nil
	case "llama3":
		rs := &RopeScaling{Type: kind}
		var err error
		var orig float64
		for _, p := range []struct {
			key string
			dst *float64
		}{{"factor", &rs.Factor}, {"low_freq_factor", &rs.LowFreqFactor}, {"high_freq_factor", &rs.HighFreqFactor}, {"original_max_position_embeddings", &orig}} {
			if *p.dst, err = num(p.key); err != nil {
				return nil, nil, err
			}
		}
		if orig != math.Trunc(orig) {
			return nil, nil, fmt.Errorf("%s.original_max_position_embeddings must be an integer, got %g", field, orig)
		}
		rs.OriginalMaxPositionEmbeddings = int(orig)
		if rs.HighFreqFactor <= rs.LowFreqFactor {
			return nil, nil, fmt.Errorf("%s.high_freq_factor (%g) must be greater than low_freq_factor (%g)", field, rs.HighFreqFactor, rs.LowFreqFactor)
		}
		return rs, theta, nil
	}
	return nil, theta, nil // default
}

// optionalInt reads a field that may be an integer or null (0).
func optionalInt(field string, raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, nil
	}
	var n int
	if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
		return 0, fmt.Errorf("%s must be a positive integer or null, got %s", field, raw)
	}
	return n, nil
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

// WriteConfig writes dir/config.json in HF's form, with the dtype the
// weights are stored in. A config read from a file is written back as it
// was, every field of its family kept with its value's text unchanged
// (500000.0 stays 500000.0: transformers warns when a float field such as
// rope_theta reads as an integer), keys sorted as transformers writes
// them; only "torch_dtype" is set, and "dtype" too when the config has
// it: transformers ≥ 4.56 writes "dtype" and gives it precedence, so a
// stale one would name the old dtype. A random initialization's is a
// Llama config with both.
func WriteConfig(dir string, c Config, torchDtype string) error {
	return writeConfig(dir, c, torchDtype, nil)
}

// writeConfig is WriteConfig with quantization_config set to quant (a
// 4-bit model in bitsandbytes' layout: Model.SaveBnB4), or removed when
// quant is nil.
func writeConfig(dir string, c Config, torchDtype string, quant json.RawMessage) error {
	var b []byte
	var err error
	if len(c.Raw) > 0 {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(c.Raw, &m); err != nil {
			return fmt.Errorf("write config: %w", err)
		}
		dt, _ := json.Marshal(torchDtype)
		m["torch_dtype"] = dt
		// the weights written are plain floats, whatever the source's
		// quantization (a bitsandbytes checkpoint merged or saved), unless
		// quant describes them
		delete(m, "quantization_config")
		if quant != nil {
			m["quantization_config"] = quant
		}
		if _, ok := m["dtype"]; ok {
			m["dtype"] = dt
		}
		b, err = json.MarshalIndent(m, "", "  ")
	} else {
		c.TorchDtype = torchDtype
		out := struct {
			Architectures []string `json:"architectures"`
			ModelType     string   `json:"model_type"`
			HiddenAct     string   `json:"hidden_act"`
			AttentionBias bool     `json:"attention_bias"`
			MLPBias       bool     `json:"mlp_bias"`
			RopeScaling   any      `json:"rope_scaling"`
			Dtype         string   `json:"dtype"`
			Config
			Quantization json.RawMessage `json:"quantization_config,omitempty"`
		}{[]string{architectureOf(Llama)}, Llama, "silu", false, false, nil, torchDtype, c, quant}
		if c.HeadDim == 0 {
			out.Config.HeadDim = c.HeadDimension()
		}
		b, err = json.MarshalIndent(out, "", "  ")
	}
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "config.json"), append(b, '\n'))
}
