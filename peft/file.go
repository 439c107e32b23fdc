package peft

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/atomicfile"
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

// Save writes the adapter as PEFT's save_pretrained does: fp32 weights
// under PEFT's keys and adapter_config.json. baseModel is recorded as
// base_model_name_or_path.
func (l *LoRA) Save(dir, baseModel string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	var ts []safetensors.Tensor
	for _, m := range l.Modules {
		ts = append(ts,
			safetensors.Tensor{Name: KeyA(m.Path), Shape: []int{l.Config.R, m.In}, Data: m.A, Dtype: amp.FP32},
			safetensors.Tensor{Name: KeyB(m.Path), Shape: []int{m.Out, l.Config.R}, Data: m.B, Dtype: amp.FP32})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, WeightsFile), ts, nil); err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	targets, _ := json.Marshal(l.Config.TargetModules)
	ac := adapterConfig{
		AlphaPattern: map[string]float64{}, BaseModelNameOrPath: baseModel, Bias: "none",
		InferenceMode: true, InitLoraWeights: true, LoraAlpha: l.Config.Alpha, PeftType: "LORA",
		R: l.Config.R, RankPattern: map[string]int{}, TargetModules: targets, TaskType: "CAUSAL_LM",
	}
	b, err := marshalSorted(ac)
	if err != nil {
		return fmt.Errorf("save adapter: %w", err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, ConfigFile), b)
}

// Load reads a PEFT LoRA adapter for a model whose linear modules are
// targets, checking every tensor's name and shape against them.
func Load(dir string, targets []Target) (*LoRA, error) {
	cpath := filepath.Join(dir, ConfigFile)
	raw, err := os.ReadFile(cpath)
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	var ac adapterConfig
	if err := json.Unmarshal(raw, &ac); err != nil {
		return nil, fmt.Errorf("load adapter: %s: %w", cpath, err)
	}
	switch {
	case ac.PeftType != "LORA":
		return nil, fmt.Errorf("load adapter: %s: peft_type %q is not supported (want LORA)", cpath, ac.PeftType)
	case ac.UseDora || ac.UseRslora:
		return nil, fmt.Errorf("load adapter: %s: use_dora and use_rslora are not supported yet", cpath)
	case ac.FanInFanOut:
		return nil, fmt.Errorf("load adapter: %s: fan_in_fan_out adapters (GPT-2 Conv1D) do not apply to Llama", cpath)
	case len(ac.RankPattern) > 0 || len(ac.AlphaPattern) > 0:
		return nil, fmt.Errorf("load adapter: %s: rank_pattern and alpha_pattern are not supported yet", cpath)
	}
	var names []string
	if err := json.Unmarshal(ac.TargetModules, &names); err != nil {
		return nil, fmt.Errorf("load adapter: %s: target_modules must be a list of module names", cpath)
	}
	cfg := Config{R: ac.R, Alpha: ac.LoraAlpha, TargetModules: names}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("load adapter: %s: %w", cpath, err)
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
	var used []Target
	for _, name := range f.Names() {
		path, ok := strings.CutSuffix(strings.TrimPrefix(name, "base_model.model."), ".lora_A.weight")
		if !ok {
			if strings.HasSuffix(name, ".lora_B.weight") {
				continue // checked with its A
			}
			return nil, fmt.Errorf("load adapter: %s: unexpected tensor %s", wpath, name)
		}
		t, ok := byPath[path]
		if !ok {
			return nil, fmt.Errorf("load adapter: %s: tensor %s adapts %s, which the base model does not have", wpath, name, path)
		}
		used = append(used, t)
	}
	slices.SortFunc(used, func(a, b Target) int { return strings.Compare(a.Path, b.Path) })
	l, err := New(cfg, used, 0)
	if err != nil {
		return nil, err
	}
	for _, m := range l.Modules {
		for _, w := range []struct {
			key   string
			dst   []float32
			shape []int
		}{{KeyA(m.Path), m.A, []int{cfg.R, m.In}}, {KeyB(m.Path), m.B, []int{m.Out, cfg.R}}} {
			data, shape, err := f.Float32(w.key)
			if err != nil {
				return nil, fmt.Errorf("load adapter: %s: %w", wpath, err)
			}
			if !slices.Equal(shape, w.shape) {
				return nil, fmt.Errorf("load adapter: %s: %s has shape %v, want %v", wpath, w.key, shape, w.shape)
			}
			copy(w.dst, data)
		}
	}
	return l, nil
}

// marshalSorted writes JSON with sorted keys and two-space indent, as PEFT
// does (json.dumps(indent=2, sort_keys=True)): struct fields are declared
// in sorted order, and maps are sorted by encoding/json.
func marshalSorted(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	return append(b, '\n'), err
}
