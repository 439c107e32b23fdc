package peft

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/readlimit"
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
	RankPattern         map[string]int     `json:"rank_pattern"`
	Revision            any                `json:"revision"`
	TargetModules       json.RawMessage    `json:"target_modules"`
	TaskType            string             `json:"task_type"`
	UseDora             bool               `json:"use_dora"`
	UseRslora           bool               `json:"use_rslora"`
}

// Save writes the adapter as PEFT's save_pretrained does, in fp32: the
// weights under PEFT's keys and adapter_config.json. baseModel is recorded
// as base_model_name_or_path.
func (l *LoRA) Save(dir, baseModel string) error { return l.SaveAs(dir, baseModel, amp.FP32) }

// SaveAs is Save with the weights stored in dtype.
//
// A PiSSA adapter is saved as PEFT saves one with
// path_initial_model_for_weight_conversion: as a plain LoRA of rank 2r
// whose update s·(B·A − B₀·A₀) applies to the original base weight, since
// that, not the residual the run trained against, is the model the file
// names. The scaling stays s (alpha is doubled, or multiplied by √2 with
// rsLoRA).
func (l *LoRA) SaveAs(dir, baseModel string, dtype amp.Format) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	c := l.Config
	r, alpha := c.R, c.Alpha
	convert := slices.ContainsFunc(l.Modules, func(m *Module) bool { return m.a0 != nil })
	if convert {
		r *= 2
		if c.UseRSLoRA {
			alpha *= 1.4142135623730951
		} else {
			alpha *= 2
		}
	}
	var ts []safetensors.Tensor
	for _, m := range l.Modules {
		a, b := m.A, m.B
		if convert {
			a, b = pissaAsLoRA(m, c.R)
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
	ac := adapterConfig{
		AlphaPattern: map[string]float64{}, BaseModelNameOrPath: baseModel, Bias: "none",
		InferenceMode: true, InitLoraWeights: init, LayersToTransform: layers, LoraAlpha: alpha,
		LoraDropout: c.Dropout, PeftType: "LORA", R: r, RankPattern: map[string]int{},
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
func pissaAsLoRA(m *Module, r int) (a, b []float32) {
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
// hyperparameters of a PEFT LoRA or DoRA adapter, checked.
func ReadConfig(dir string) (Config, error) {
	cpath := filepath.Join(dir, ConfigFile)
	raw, err := readlimit.ReadFile(cpath, readlimit.AdapterConfig)
	if err != nil {
		return Config{}, err
	}
	var ac adapterConfig
	if err := json.Unmarshal(raw, &ac); err != nil {
		return Config{}, fmt.Errorf("%s: %w", cpath, err)
	}
	switch {
	case ac.PeftType != "LORA":
		return Config{}, fmt.Errorf("%s: peft_type %q is not supported (want LORA)", cpath, ac.PeftType)
	case ac.FanInFanOut:
		return Config{}, fmt.Errorf("%s: fan_in_fan_out adapters (GPT-2 Conv1D) do not apply to Llama", cpath)
	case len(ac.RankPattern) > 0 || len(ac.AlphaPattern) > 0:
		return Config{}, fmt.Errorf("%s: rank_pattern and alpha_pattern are not supported yet", cpath)
	}
	c := Config{R: ac.R, Alpha: ac.LoraAlpha, Dropout: ac.LoraDropout, UseDoRA: ac.UseDora, UseRSLoRA: ac.UseRslora}
	if err := decodeTargets(ac.TargetModules, &c); err != nil {
		return Config{}, fmt.Errorf("%s: target_modules %w", cpath, err)
	}
	if err := decodeLayers(ac.LayersToTransform, &c); err != nil {
		return Config{}, fmt.Errorf("%s: layers_to_transform %w", cpath, err)
	}
	if s, ok := ac.InitLoraWeights.(string); ok && s == InitGaussian {
		c.Init = InitGaussian // informational: the weights are loaded, not initialized
	}
	return c, nil
}

// decodeTargets reads target_modules: a list of names, a regex string, or
// null (then the tensors decide).
func decodeTargets(raw json.RawMessage, c *Config) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		return json.Unmarshal(raw, &c.TargetRegex)
	}
	if err := json.Unmarshal(raw, &c.TargetModules); err != nil {
		return fmt.Errorf("must be a list of module names or a regex string")
	}
	return nil
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

// Load reads a PEFT LoRA or DoRA adapter for a model whose linear modules
// are targets, checking every tensor's name and shape against them. The
// adapted modules are those with tensors in the file, in the order of
// targets. It loads adapters written by PEFT as well as by mixtune: to
// train further, evaluate, generate or merge.
func Load(dir string, targets []Target) (*LoRA, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	wpath := filepath.Join(dir, WeightsFile)
	f, err := safetensors.ReadFile(wpath)
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	byPath := map[string]Target{}
	for _, t := range targets {
		byPath[t.Path] = t
	}
	present, keyM := map[string]bool{}, map[string]string{}
	for _, name := range f.Names() {
		rest := strings.TrimPrefix(name, "base_model.model.")
		var path string
		switch {
		case strings.HasSuffix(rest, ".lora_A.weight"):
			path = strings.TrimSuffix(rest, ".lora_A.weight")
		case strings.HasSuffix(rest, ".lora_B.weight"):
			continue // checked with its A
		case strings.HasSuffix(rest, ".lora_magnitude_vector"), strings.HasSuffix(rest, ".lora_magnitude_vector.weight"):
			if !cfg.UseDoRA {
				return nil, fmt.Errorf("load adapter: %s: tensor %s is a DoRA magnitude, but adapter_config.json has use_dora false", wpath, name)
			}
			keyM[rest[:strings.Index(rest, ".lora_magnitude_vector")]] = name
			continue
		default:
			return nil, fmt.Errorf("load adapter: %s: unexpected tensor %s", wpath, name)
		}
		if _, ok := byPath[path]; !ok {
			return nil, fmt.Errorf("load adapter: %s: tensor %s adapts %s, which the base model does not have", wpath, name, path)
		}
		present[path] = true
	}
	for path, name := range keyM {
		if !present[path] {
			return nil, fmt.Errorf("load adapter: %s: tensor %s has no lora_A beside it", wpath, name)
		}
	}
	var used []Target
	var shorts []string
	for _, t := range targets {
		if present[t.Path] {
			used = append(used, t)
			if s := t.Path[strings.LastIndex(t.Path, ".")+1:]; !slices.Contains(shorts, s) {
				shorts = append(shorts, s)
			}
		}
	}
	if len(used) == 0 {
		return nil, fmt.Errorf("load adapter: %s: no lora_A tensors", wpath)
	}
	cpath := filepath.Join(dir, ConfigFile)
	if len(cfg.TargetModules) == 0 && cfg.TargetRegex == "" {
		cfg.TargetModules = shorts // target_modules null: the tensors say
	} else if err := sameModules(cfg, targets, used); err != nil {
		// PEFT builds the modules the config selects, then loads the
		// tensors into them: a disagreement is missing or unexpected keys.
		return nil, fmt.Errorf("load adapter: %s and %s disagree: %w", cpath, wpath, err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("load adapter: %s: %w", cpath, err)
	}
	l := alloc(cfg, used)
	for _, m := range l.Modules {
		ws := []struct {
			key   string
			dst   []float32
			shape []int
		}{{KeyA(m.Path), m.A, []int{cfg.R, m.In}}, {KeyB(m.Path), m.B, []int{m.Out, cfg.R}}}
		if cfg.UseDoRA {
			k, ok := keyM[m.Path]
			if !ok {
				return nil, fmt.Errorf("load adapter: %s: use_dora is true but %s is missing", wpath, KeyM(m.Path))
			}
			ws = append(ws, struct {
				key   string
				dst   []float32
				shape []int
			}{k, m.M, []int{m.Out}})
		}
		for _, w := range ws {
			data, shape, err := f.Float32(w.key)
			if err != nil {
				return nil, fmt.Errorf("load adapter: %s: %w", wpath, err)
			}
			if !slices.Equal(shape, w.shape) {
				return nil, fmt.Errorf("load adapter: %s: %s has shape %v, want %v", wpath, w.key, shape, w.shape)
			}
			for i, v := range data {
				if v-v != 0 { // NaN or ±Inf
					return nil, fmt.Errorf("load adapter: %s: tensor %s holds a non-finite value (%v at index %d)", wpath, w.key, v, i)
				}
			}
			copy(w.dst, data)
		}
	}
	return l, nil
}

// sameModules checks that the modules adapter_config.json selects among
// targets are exactly those the weights file has tensors for (used).
func sameModules(cfg Config, targets, used []Target) error {
	selected, err := Select(targets, cfg)
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
