package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/peft"
)

// Everything the training loop knows about adapters: their recipe section,
// building a fresh one, the trainable tensors, merging for generation and
// loading a saved one.

// AdapterConfig chooses LoRA or full fine-tuning.
type AdapterConfig struct {
	Type          string   `yaml:"type"`
	R             int      `yaml:"r"`
	Alpha         float64  `yaml:"alpha"`
	TargetModules []string `yaml:"target_modules"`
}

// validateAdapter checks the adapter section.
func (r *Recipe) validateAdapter(bad func(field, format string, args ...any)) {
	c := &r.Config
	switch c.Adapter.Type {
	case "lora":
		if c.Adapter.R <= 0 {
			bad("adapter.r", "must be > 0, got %d", c.Adapter.R)
		}
		if c.Adapter.Alpha <= 0 {
			bad("adapter.alpha", "must be > 0, got %g", c.Adapter.Alpha)
		}
		known := append(slices.Clone(model.AttentionModules), model.MLPModules...)
		if len(c.Adapter.TargetModules) == 0 {
			bad("adapter.target_modules", "must name at least one module (%s)", strings.Join(known, ", "))
		}
		for i, m := range c.Adapter.TargetModules {
			if !slices.Contains(known, m) {
				bad(fmt.Sprintf("adapter.target_modules[%d]", i), "unknown module %q (known: %s)", m, strings.Join(known, ", "))
			}
		}
	case "none":
	default:
		bad("adapter.type", "must be lora or none, got %q", c.Adapter.Type)
	}
}

// linearTargets lists every linear module of the model with its shape.
func linearTargets(m *model.Model) []peft.Target {
	var ts []peft.Target
	for i := 0; i < m.Config.NumHiddenLayers; i++ {
		for _, short := range append(slices.Clone(model.AttentionModules), model.MLPModules...) {
			p := model.ModulePath(i, short)
			w := m.Weights[p+".weight"]
			ts = append(ts, peft.Target{Path: p, Out: w.Shape[0], In: w.Shape[1]})
		}
	}
	return ts
}

// newAdapter makes a fresh LoRA adapter, or nil for full fine-tuning.
func newAdapter(r *Recipe, m *model.Model) (*peft.LoRA, error) {
	if r.Adapter.Type != "lora" {
		return nil, nil
	}
	ts, err := peft.Targets(linearTargets(m), r.Adapter.TargetModules)
	if err != nil {
		return nil, err
	}
	return peft.New(peft.Config{R: r.Adapter.R, Alpha: r.Adapter.Alpha, TargetModules: r.Adapter.TargetModules}, ts, r.Seed)
}

// trainables lists what the optimizer updates: the adapter's A and B, or
// every weight of the model. Their gradients are fp32 buffers of their own.
func trainables(m *model.Model, l *peft.LoRA) []*optim.Param {
	var ps []*optim.Param
	if l != nil {
		for _, mod := range l.Modules {
			ps = append(ps,
				&optim.Param{Name: peft.KeyA(mod.Path), Shape: []int{l.Config.R, mod.In}, Value: mod.A, Grad: mod.GradA},
				&optim.Param{Name: peft.KeyB(mod.Path), Shape: []int{mod.Out, l.Config.R}, Value: mod.B, Grad: mod.GradB})
		}
		return ps
	}
	for _, s := range model.Specs(m.Config) {
		w := m.Weights[s.Name]
		ps = append(ps, &optim.Param{Name: s.Name, Shape: w.Shape, Value: w.Data, Grad: make([]float32, len(w.Data))})
	}
	return ps
}

// mergedWeights returns the base weights with each adapter's (α/r)·B·A
// added, for generation; unadapted weights are shared, not copied.
func mergedWeights(m *model.Model, l *peft.LoRA) map[string][]float32 {
	w := map[string][]float32{}
	for name, t := range m.Weights {
		w[name] = t.Float32()
	}
	if l == nil {
		return w
	}
	for _, mod := range l.Modules {
		delta, _ := l.Delta(mod.Path)
		base := m.Weights[mod.Path+".weight"].Float32()
		merged := make([]float32, len(base))
		for i := range base {
			merged[i] = base[i] + delta[i]
		}
		w[mod.Path+".weight"] = merged
	}
	return w
}

// loadWithAdapter loads a model and, if adapterDir is set, a PEFT LoRA
// adapter for it.
func loadWithAdapter(modelDir, adapterDir string) (*model.Model, *peft.LoRA, error) {
	m, err := model.Load(modelDir)
	if err != nil {
		return nil, nil, err
	}
	if adapterDir == "" {
		return m, nil, nil
	}
	l, err := peft.Load(adapterDir, linearTargets(m))
	return m, l, err
}
