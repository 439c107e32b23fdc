package peft

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/safetensors"
)

// File names of an adapter directory, as PEFT's save_pretrained writes them.
const (
	WeightsFile = "adapter_model.safetensors"
	ConfigFile  = "adapter_config.json"
)

// adapterConfig is adapter_config.json with PEFT's field names.
type adapterConfig struct {
	AlphaPattern        map[string]float64 `json:"alpha_pattern"`
	AutoMapping         any                `json:"auto_mapping"`
	BaseModelNameOrPath string             `json:"base_model_name_or_path"`
	Bias                string             `json:"bias"`
	ExcludeModules      any                `json:"exclude_modules"`
	FanInFanOut         bool               `json:"fan_in_fan_out"`
	InferenceMode       bool               `json:"inference_mode"`
	InitLoraWeights     any                `json:"init_lora_weights"`
	LayersPattern       any                `json:"layers_pattern"`
	LayersToTransform   any                `json:"layers_to_transform"`
	LoraAlpha           float64            `json:"lora_alpha"`
	LoraDropout         float64            `json:"lora_dropout"`
	ModulesToSave       any                `json:"modules_to_save"`
	PeftType            string             `json:"peft_type"`
	R                   int                `json:"r"`
	RankPattern         map[string]float64 `json:"rank_pattern"`
	Revision            any                `json:"revision"`
	TargetModules       json.RawMessage    `json:"target_modules"`
	TaskType            string             `json:"task_type"`
	UseDora             bool               `json:"use_dora"`
	UseRslora           bool               `json:"use_rslora"`
}

// Save writes the adapter as PEFT's save_pretrained does, in fp32: the
// weights under PEFT's keys and adapter_config.json. baseModel is recorded
// as base_model_name_or_path.
func (l *Adapter) Save(dir, baseModel string) error { return l.SaveAs(dir, baseModel, amp.FP32) }

// SaveAs is Save with the weights stored in dtype.
//
// A PiSSA adapter is saved as PEFT saves one with
// path_initial_model_for_weight_conversion: as a plain LoRA of rank 2r
// whose update s·(B·A − B₀·A₀) applies to the original base weight, since
// that, not the residual the run trained against, is the model the file
// names. The scaling stays s (alpha is doubled, or multiplied by √2 with
// rsLoRA).
func (l *Adapter) SaveAs(dir, baseModel string, dtype amp.Format) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	c := l.Config
	if len(c.ModulesToSave) > 0 {
		return fmt.Errorf("save adapter: modules_to_save %v: mixtune trains no whole modules, so it does not save them", c.ModulesToSave)
	}
	convert := slices.ContainsFunc(l.Modules, func(m *Module) bool { return m.a0 != nil })
	// PiSSA and OLoRA convert to a rank-2r LoRA with the same scaling:
	// PEFT doubles r and rank_pattern, and alpha likewise (×√2 with
	// rsLoRA, where α/√r must stay put).
	rankBy, alphaBy := 1.0, 1.0
	if convert {
		rankBy, alphaBy = 2, 2
		if c.UseRSLoRA {
			alphaBy = math.Sqrt2
		}
	}
	rankPattern, alphaPattern := map[string]float64{}, map[string]float64{}
	for _, p := range c.RankPattern {
		rankPattern[p.Key] = p.Value * rankBy
	}
	for _, p := range c.AlphaPattern {
		alphaPattern[p.Key] = p.Value * alphaBy
	}
	var ts []safetensors.Tensor
	for _, m := range l.Modules {
		a, b, r := m.A, m.B, m.R
		if convert {
			a, b = pissaAsLoRA(m)
			r = 2 * m.R
		}
		ts = append(ts,
			safetensors.Tensor{Name: KeyA(m.Path), Shape: []int{r, m.In}, Data: a, Dtype: dtype},
			safetensors.Tensor{Name: KeyB(m.Path), Shape: []int{m.Out, r}, Data: b, Dtype: dtype})
		if c.UseDoRA {
			ts = append(ts, safetensors.Tensor{Name: KeyM(m.Path), Shape: []int{m.Out}, Data: m.M, Dtype: dtype})
		}
	}
	if err := safetensors.WriteFile(filepath.Join(dir, WeightsFile), ts, nil); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	var targets []byte
	if c.TargetRegex != "" {
		targets, _ = json.Marshal(c.TargetRegex)
	} else {
		targets, _ = json.Marshal(c.TargetModules)
	}
	var layers any
	if len(c.LayersToTransform) > 0 {
		layers = c.LayersToTransform
	}
	var init any = true
	if c.Init == InitGaussian {
		init = InitGaussian
	}
	var exclude any
	if c.ExcludeRegex != "" {
		exclude = c.ExcludeRegex
	} else if len(c.ExcludeModules) > 0 {
		exclude = c.ExcludeModules
	}
	ac := adapterConfig{
		AlphaPattern: alphaPattern, BaseModelNameOrPath: baseModel, Bias: "none", ExcludeModules: exclude,
		InferenceMode: true, InitLoraWeights: init, LayersToTransform: layers, LoraAlpha: c.Alpha * alphaBy,
		LoraDropout: c.Dropout, PeftType: "LORA", R: int(float64(c.R) * rankBy), RankPattern: rankPattern,
		TargetModules: targets, TaskType: "CAUSAL_LM", UseDora: c.UseDoRA, UseRslora: c.UseRSLoRA,
	}
	b, err := marshalSorted(ac)
	if err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, ConfigFile), b)
}

// pissaAsLoRA returns A' = [A; A₀] [2r, in] and B' = [B, −B₀] [out, 2r], so
// that B'·A' = B·A − B₀·A₀.
func pissaAsLoRA(m *Module) (a, b []float32) {
	r := m.R
	a = append(slices.Clone(m.A), m.a0...)
	b = make([]float32, m.Out*2*r)
	for o := 0; o < m.Out; o++ {
		copy(b[o*2*r:], m.B[o*r:(o+1)*r])
		for k := 0; k < r; k++ {
			b[o*2*r+r+k] = -m.b0[o*r+k]
		}
	}
	return a, b
}

// ReadConfig reads an adapter directory's adapter_config.json: the
// hyperparameters of a PEFT LoRA or DoRA adapter, checked. Every field is
// either honoured, known not to change what the adapter computes
// (informational, or read only when training starts), or refused by name
// with its value: an adapter mixtune would apply differently from PEFT is
// an error, never a silent approximation.
func ReadConfig(dir string) (Config, error) {
	cpath := filepath.Join(dir, ConfigFile)
	raw, err := readlimit.ReadFile(cpath, readlimit.AdapterConfig)
	if err != nil {
		return Config{}, err
	}
	c, err := parseAdapterConfig(raw)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", cpath, err)
	}
	return c, nil
}

// ignoredFields do not change what a loaded adapter computes: metadata,
// and settings PEFT reads only when it initializes a fresh adapter or at
// run time.
var ignoredFields = []string{"auto_mapping", "base_model_name_or_path", "corda_config", "eva_config",
	"inference_mode", "lora_ga_config", "loftq_config", "megatron_core", "peft_version", "qalora_group_size",
	"revision", "runtime_config", "task_type"}

// emptyFields must be null, false or empty: each turns on a PEFT feature
// mixtune does not implement.
var emptyFields = map[string]string{
	"alora_invocation_tokens": "aLoRA adapters activate only after their invocation tokens, and PEFT refuses to merge them",
	"arrow_config":            "Arrow routing between adapters is not supported",
	"ensure_weight_tying":     "tying adapters across tied layers is not supported",
	"kasa_config":             "the KaSA variant is not supported",
	"layer_replication":       "layer replication is not supported",
	"lora_bias":               "trained lora_B biases are not supported",
	"megatron_config":         "Megatron parallel layers are not supported",
	"monteclora_config":       "the MonteCLoRA variant is not supported",
	"target_parameters":       "adapters on parameters (rather than modules) are not supported",
	"trainable_token_indices": "trainable token embeddings are not supported",
	"use_bdlora":              "block-diagonal LoRA is not supported",
	"use_qalora":              "QALoRA is not supported",
	"velora_config":           "the VeLoRA variant is not supported",
}

// savedModules are the modules_to_save entries mixtune applies: the whole
// output layer or input embedding of a dense fine-tune. PEFT saves a
// module whose path ends with the entry; for these names that is exactly
// lm_head and model.embed_tokens.
var savedModules = map[string]string{"lm_head": "lm_head", "embed_tokens": "model.embed_tokens", "model.embed_tokens": "model.embed_tokens"}

// parseAdapterConfig reads adapter_config.json's fields (see ReadConfig).
func parseAdapterConfig(raw []byte) (Config, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return Config{}, err
	}
	var c Config
	var peftType string
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		v := bytes.TrimSpace(fields[key])
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s %s: %s", key, compactJSON(v), fmt.Sprintf(format, args...))
		}
		var err error
		switch key {
		case "peft_type":
			err = json.Unmarshal(v, &peftType)
		case "r":
			err = json.Unmarshal(v, &c.R)
		case "lora_alpha":
			err = json.Unmarshal(v, &c.Alpha)
		case "lora_dropout":
			err = json.Unmarshal(v, &c.Dropout)
		case "use_rslora":
			err = json.Unmarshal(v, &c.UseRSLoRA)
		case "use_dora":
			err = json.Unmarshal(v, &c.UseDoRA)
		case "fan_in_fan_out":
			if !isEmptyJSON(v) {
				return c, bad("fan_in_fan_out adapters (GPT-2 Conv1D) do not apply to Llama")
			}
		case "bias":
			var b string
			if json.Unmarshal(v, &b) != nil || b != "none" {
				return c, bad(`trained biases are not supported (mixtune applies adapters with bias "none")`)
			}
		case "target_modules":
			if err := decodeTargets(v, &c); err != nil {
				return c, fmt.Errorf("target_modules %w", err)
			}
		case "exclude_modules":
			if err := decodeExclude(v, &c); err != nil {
				return c, bad("%v", err)
			}
		case "layers_to_transform":
			var layers any
			if err := json.Unmarshal(v, &layers); err != nil {
				return c, bad("%v", err)
			}
			if err := decodeLayers(layers, &c); err != nil {
				return c, fmt.Errorf("layers_to_transform %w", err)
			}
		case "layers_pattern":
			// PEFT's default is any layer number; for Llama's paths
			// (model.layers.N.…) "layers" finds the same one
			var one string
			var list []string
			if !isEmptyJSON(v) && !(json.Unmarshal(v, &one) == nil && one == "layers") && !(json.Unmarshal(v, &list) == nil && slices.Equal(list, []string{"layers"})) {
				return c, bad(`only "layers" (Llama's decoder layers) is supported`)
			}
		case "rank_pattern", "alpha_pattern":
			ps, err := decodePatterns(v)
			if err != nil {
				return c, bad("%v", err)
			}
			if key == "rank_pattern" {
				c.RankPattern = ps
			} else {
				c.AlphaPattern = ps
			}
		case "modules_to_save":
			if isEmptyJSON(v) {
				break
			}
			if err := json.Unmarshal(v, &c.ModulesToSave); err != nil {
				return c, bad("must be a list of module names")
			}
			for _, n := range c.ModulesToSave {
				if _, ok := savedModules[n]; !ok {
					return c, bad("module %q: mixtune replaces only lm_head and embed_tokens with saved weights", n)
				}
			}
		case "init_lora_weights":
			if c.Init, err = decodeInit(v); err != nil {
				return c, bad("%v", err)
			}
		default:
			if slices.Contains(ignoredFields, key) {
				break
			}
			if why, ok := emptyFields[key]; ok {
				if !isEmptyJSON(v) {
					return c, bad("%s", why)
				}
				break
			}
			if !isEmptyJSON(v) {
				return c, bad("mixtune does not know this field, so it refuses the adapter rather than ignore it")
			}
		}
		if err != nil {
			return c, bad("%v", err)
		}
	}
	if peftType != "LORA" {
		return c, fmt.Errorf("peft_type %q is not supported (want LORA)", peftType)
	}
	return c, nil
}

// decodeInit reads init_lora_weights. Initializations that leave the base
// weight alone load as they are (the file holds A and B). PiSSA and OLoRA
// subtract their initial s·B₀·A₀ from the base; PEFT loading an adapter
// saved without path_initial_model_for_weight_conversion re-runs the
// initialization on the base it is given, and so does Load. The others
// that change the base cannot be re-run here and are refused.
func decodeInit(v json.RawMessage) (string, error) {
	var b bool
	if json.Unmarshal(v, &b) == nil || isEmptyJSON(v) {
		return "", nil // true, false (random A and B, then loaded) or null
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", fmt.Errorf("must be true, false or the name of an initialization")
	}
	switch {
	case s == InitGaussian:
		return InitGaussian, nil // informational: the weights are loaded, not initialized
	case s == "eva", s == "orthogonal":
		return "", nil // likewise; neither touches the base weight
	case s == InitPiSSA:
		return InitPiSSA, nil
	case strings.EqualFold(s, InitOLoRA):
		return InitOLoRA, nil
	case strings.HasPrefix(s, "pissa_niter_"):
		return "", fmt.Errorf("this PiSSA adapter subtracts a randomized SVD (svd_lowrank) of the base weight that cannot be recomputed; save it from PEFT with path_initial_model_for_weight_conversion, which makes it a plain LoRA of the original model")
	case strings.HasPrefix(s, "corda"):
		return "", fmt.Errorf("CorDA's residual base comes from activation statistics that are not in the adapter; save it from PEFT with path_initial_model_for_weight_conversion")
	case s == "loftq":
		return "", fmt.Errorf("LoftQ's base is a quantized model; load the adapter onto that model with PEFT, or convert it")
	case s == "lora_ga":
		return "", fmt.Errorf("LoRA-GA's residual base comes from gradients that are not in the adapter; save it from PEFT with path_initial_model_for_weight_conversion")
	}
	return "", fmt.Errorf("not an initialization mixtune can load faithfully")
}

// decodeTargets reads target_modules: a list of names, a regex string
// (PEFT's "all-linear" in any case), or null (then the tensors decide).
func decodeTargets(raw json.RawMessage, c *Config) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &c.TargetRegex); err != nil {
			return err
		}
		if strings.EqualFold(c.TargetRegex, AllLinear) {
			c.TargetRegex = AllLinear // PEFT lowercases it
		}
		return nil
	}
	if err := json.Unmarshal(raw, &c.TargetModules); err != nil {
		return fmt.Errorf("must be a list of module names or a regex string")
	}
	return nil
}

// decodeExclude reads exclude_modules: null, a list of names or a regex.
func decodeExclude(raw json.RawMessage, c *Config) error {
	switch {
	case isEmptyJSON(raw):
		return nil
	case raw[0] == '"':
		return json.Unmarshal(raw, &c.ExcludeRegex)
	}
	if err := json.Unmarshal(raw, &c.ExcludeModules); err != nil {
		return fmt.Errorf("must be a list of module names or a regex string")
	}
	return nil
}

// decodePatterns reads rank_pattern or alpha_pattern, an object of
// regex → number, keeping the file's key order: PEFT tries the keys in
// that order and takes the first that matches.
func decodePatterns(raw json.RawMessage) ([]Pattern, error) {
	if isEmptyJSON(raw) {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("must be an object of module patterns and numbers")
	}
	var ps []Pattern
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil, err
		}
		var v float64
		if err := d.Decode(&v); err != nil {
			return nil, fmt.Errorf("the value of %q must be a number", t)
		}
		ps = append(ps, Pattern{Key: t.(string), Value: v})
	}
	return ps, nil
}

// isEmptyJSON is true for null, false, 0, "" and empty lists and objects:
// a field left at "off".
func isEmptyJSON(raw json.RawMessage) bool {
	switch s := string(bytes.TrimSpace(raw)); s {
	case "", "null", "false", "0", `""`, "[]", "{}":
		return true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil {
		for _, v := range m {
			if !isEmptyJSON(v) {
				return false
			}
		}
		return true
	}
	return false
}

func compactJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// decodeLayers reads layers_to_transform: null, one layer or a list. A
// layer must be a whole number below 2^53, which a float64 from JSON
// holds exactly: int() would silently truncate 1.5, and turn 1e300 into
// whatever the platform's conversion gives.
func decodeLayers(v any, c *Config) error {
	layer := func(e any) (int, bool) {
		f, ok := e.(float64)
		if !ok || f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
			return 0, false
		}
		return int(f), true
	}
	switch x := v.(type) {
	case nil:
	case []any:
		for _, e := range x {
			l, ok := layer(e)
			if !ok {
				return fmt.Errorf("must be a layer number or a list of them, got %v", v)
			}
			c.LayersToTransform = append(c.LayersToTransform, l)
		}
	default:
		l, ok := layer(x)
		if !ok {
			return fmt.Errorf("must be a layer number or a list of them, got %v", v)
		}
		c.LayersToTransform = []int{l}
	}
	return nil
}

// Base is the model an adapter loads onto: the linear modules it may
// adapt, and the weights that PiSSA and OLoRA adapters and modules_to_save
// change.
type Base struct {
	Targets []Target
	// Weights holds the base weights by HF name (model.Model.Weights); nil
	// refuses adapters that need them.
	Weights        map[string]*model.Tensor
	TiedEmbeddings bool
}

// BaseOf is m as an adapter's base.
func BaseOf(m *model.Model) Base {
	return Base{Targets: ModelTargets(m), Weights: m.Weights, TiedEmbeddings: m.Config.TieWordEmbeddings}
}

// adapterTensors are the tensor names of one adapted module in a file.
type adapterTensors struct{ a, b, m string }

// Load reads a PEFT LoRA or DoRA adapter for base, checking every tensor's
// name and shape. The adapted modules are those with tensors in the file,
// in the order of base.Targets; keys may carry PEFT's "base_model.model."
// prefix or not (transformers' save_peft_format=False). It loads adapters
// written by PEFT as well as by mixtune: to train further, evaluate,
// generate or merge.
//
// As PEFT's loading does, Load changes base.Weights for two kinds of
// adapter: one initialized with pissa or olora and saved unconverted
// holds A and B trained against the residual W − s·B₀·A₀, so the
// initialization is run again on the base weight, which keeps the
// residual; and the modules_to_save tensors (lm_head, embed_tokens)
// replace the base's weights, rounded to the base's storage format.
// Everything in the file is checked before any weight changes.
func Load(dir string, base Base) (*Adapter, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	wpath := filepath.Join(dir, WeightsFile)
	cpath := filepath.Join(dir, ConfigFile)
	f, err := safetensors.ReadFile(wpath)
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	fail := func(format string, args ...any) (*Adapter, error) {
		return nil, fmt.Errorf("load adapter: %s: %s", wpath, fmt.Sprintf(format, args...))
	}
	byPath := map[string]Target{}
	for _, t := range base.Targets {
		byPath[t.Path] = t
	}
	keys, saved, seen := map[string]*adapterTensors{}, map[string]string{}, map[string]string{}
	for _, name := range f.Names() {
		rest := strings.TrimPrefix(name, "base_model.model.")
		if other, dup := seen[rest]; dup {
			return fail("tensors %s and %s are the same weight, with and without the base_model.model. prefix", other, name)
		}
		seen[rest] = name
		var path string
		var slot *string
		entry := func(p string) *adapterTensors {
			if keys[p] == nil {
				keys[p] = &adapterTensors{}
			}
			return keys[p]
		}
		switch {
		case strings.HasSuffix(rest, ".lora_A.weight"):
			path = strings.TrimSuffix(rest, ".lora_A.weight")
			slot = &entry(path).a
		case strings.HasSuffix(rest, ".lora_B.weight"):
			path = strings.TrimSuffix(rest, ".lora_B.weight")
			slot = &entry(path).b
		case strings.HasSuffix(rest, ".lora_magnitude_vector"), strings.HasSuffix(rest, ".lora_magnitude_vector.weight"):
			if !cfg.UseDoRA {
				return fail("tensor %s is a DoRA magnitude, but adapter_config.json has use_dora false", name)
			}
			path = rest[:strings.Index(rest, ".lora_magnitude_vector")]
			slot = &entry(path).m
		case strings.HasSuffix(rest, ".bias"):
			return fail("tensor %s is a trained bias (lora_bias, or bias \"all\"/\"lora_only\"), which mixtune does not apply", name)
		case strings.Contains(rest, ".lora_embedding_"):
			return fail("tensor %s is a LoRA on an embedding, which mixtune does not apply", name)
		case rest == "lm_head.weight" || rest == "model.embed_tokens.weight":
			saved[strings.TrimSuffix(rest, ".weight")] = name
			continue
		default:
			return fail("unexpected tensor %s", name)
		}
		if _, ok := byPath[path]; !ok {
			return fail("tensor %s adapts %s, which the base model does not have", name, path)
		}
		*slot = name
	}
	for path, k := range keys {
		switch {
		case k.a == "":
			return fail("%s has lora_B or a magnitude but no lora_A", path)
		case k.b == "":
			return fail("%s has lora_A but no lora_B", path)
		case cfg.UseDoRA && k.m == "":
			return fail("use_dora is true but %s has no lora_magnitude_vector", path)
		}
	}
	var used []Target
	var shorts []string
	for _, t := range base.Targets {
		if keys[t.Path] != nil {
			used = append(used, t)
			if s := t.Path[strings.LastIndex(t.Path, ".")+1:]; !slices.Contains(shorts, s) {
				shorts = append(shorts, s)
			}
		}
	}
	if len(used) == 0 {
		return fail("no lora_A tensors")
	}
	if len(cfg.TargetModules) == 0 && cfg.TargetRegex == "" {
		cfg.TargetModules = shorts // target_modules null: the tensors say
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("load adapter: %s: %w", cpath, err)
	}
	if err := sameModules(cfg, base.Targets, used); err != nil {
		// PEFT builds the modules the config selects, then loads the
		// tensors into them: a disagreement is missing or unexpected keys.
		return nil, fmt.Errorf("load adapter: %s and %s disagree: %w", cpath, wpath, err)
	}
	l := alloc(cfg, used)
	// every tensor read and checked before anything changes
	loaded := map[string][]float32{}
	read := func(key string, shape []int) error {
		data, got, err := f.Float32(key)
		if err != nil {
			return err
		}
		if !slices.Equal(got, shape) {
			return fmt.Errorf("%s has shape %v, want %v", key, got, shape)
		}
		for i, v := range data {
			if v-v != 0 { // NaN or ±Inf
				return fmt.Errorf("tensor %s holds a non-finite value (%v at index %d)", key, v, i)
			}
		}
		loaded[key] = data
		return nil
	}
	for _, m := range l.Modules {
		k := keys[m.Path]
		if err := read(k.a, []int{m.R, m.In}); err != nil {
			return fail("%v", err)
		}
		if err := read(k.b, []int{m.Out, m.R}); err != nil {
			return fail("%v", err)
		}
		if cfg.UseDoRA {
			if err := read(k.m, []int{m.Out}); err != nil {
				return fail("%v", err)
			}
		}
		if cfg.Init == InitPiSSA || cfg.Init == InitOLoRA {
			w := base.Weights[m.Path+".weight"]
			switch {
			case w == nil:
				return nil, fmt.Errorf("load adapter: %s: init_lora_weights %q: the adapter was trained against the residual of %s.weight, which needs the base weight", cpath, cfg.Init, m.Path)
			case m.R > min(m.Out, m.In):
				return nil, fmt.Errorf("load adapter: %s: init_lora_weights %q: r = %d exceeds min(out, in) = %d of %s", cpath, cfg.Init, m.R, min(m.Out, m.In), m.Path)
			}
		}
	}
	savedPaths := slices.Sorted(maps.Keys(saved))
	for _, path := range savedPaths {
		name := saved[path]
		if !slices.ContainsFunc(cfg.ModulesToSave, func(n string) bool { return savedModules[n] == path }) {
			return fail("tensor %s replaces a base weight, but modules_to_save does not name %s", name, path)
		}
		w := base.Weights[path+".weight"]
		if base.TiedEmbeddings {
			return nil, fmt.Errorf("load adapter: %s: modules_to_save %v: the base model ties lm_head to embed_tokens (tie_word_embeddings), and PEFT's saved copy of one unties them; mixtune does not untie a model", cpath, cfg.ModulesToSave)
		}
		if w == nil {
			return fail("tensor %s replaces %s.weight, which the base model does not have", name, path)
		}
		if err := read(name, w.Shape); err != nil {
			return fail("%v", err)
		}
	}
	// the base changes, as PEFT changes it
	for _, m := range l.Modules {
		w := base.Weights[m.Path+".weight"]
		switch cfg.Init {
		case InitPiSSA:
			err = l.pissa(m, w)
		case InitOLoRA:
			err = l.olora(m, w)
		}
		if err != nil {
			return nil, fmt.Errorf("load adapter: %w", err)
		}
		k := keys[m.Path]
		copy(m.A, loaded[k.a])
		copy(m.B, loaded[k.b])
		if cfg.UseDoRA {
			copy(m.M, loaded[k.m])
		}
	}
	for _, path := range savedPaths {
		w, data := base.Weights[path+".weight"], loaded[saved[path]]
		if w.Data != nil {
			copy(w.Data, data)
			continue
		}
		for i, v := range data {
			w.Bits[i] = w.Format.Bits16(v)
		}
	}
	return l, nil
}

// sameModules checks that the modules adapter_config.json selects among
// targets are exactly those the weights file has tensors for (used).
func sameModules(cfg Config, targets, used []Target) error {
	// PEFT accepts target_modules naming modules the model lacks, as long
	// as something is selected
	selected, _, err := selectTargets(targets, cfg)
	if err != nil {
		return err
	}
	has := map[string]bool{}
	for _, t := range used {
		has[t.Path] = true
	}
	sel := map[string]bool{}
	for _, t := range selected {
		sel[t.Path] = true
		if !has[t.Path] {
			return fmt.Errorf("the config selects %s (%s), but the weights have no tensors for it", t.Path, describeTargets(cfg))
		}
	}
	for _, t := range used {
		if !sel[t.Path] {
			return fmt.Errorf("the weights adapt %s, which the config does not select (%s)", t.Path, describeTargets(cfg))
		}
	}
	return nil
}

// describeTargets says what a config selects, for an error message.
func describeTargets(c Config) string {
	if c.TargetRegex != "" {
		return fmt.Sprintf("target_modules %q", c.TargetRegex)
	}
	s := fmt.Sprintf("target_modules %v", c.TargetModules)
	if len(c.LayersToTransform) > 0 {
		s += fmt.Sprintf(", layers_to_transform %v", c.LayersToTransform)
	}
	return s
}

// marshalSorted writes JSON with sorted keys and two-space indent, as PEFT
// does (json.dumps(indent=2, sort_keys=True)): struct fields are declared
// in sorted order, and maps are sorted by encoding/json.
func marshalSorted(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}
