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

// AdapterKind is what a run trains: a LoRA or DoRA adapter on a frozen
// base, or every weight.
type AdapterKind string

const (
	LoRA         AdapterKind = "lora"
	DoRA         AdapterKind = "dora"
	FullFineTune AdapterKind = "none"
)

// UnmarshalText reads lora, dora or none.
func (k *AdapterKind) UnmarshalText(b []byte) error {
	switch s := AdapterKind(b); s {
	case LoRA, DoRA, FullFineTune:
		*k = s
		return nil
	}
	return fmt.Errorf("must be lora, dora or none, got %q", b)
}

// MarshalText writes the kind's name.
func (k AdapterKind) MarshalText() ([]byte, error) { return []byte(k), nil }

// AdapterConfig chooses LoRA, DoRA or full fine-tuning, with PEFT's
// hyperparameters (configs/reference.yaml documents each).
type AdapterConfig struct {
	Type              AdapterKind `yaml:"type"`
	R                 int         `yaml:"r"`
	Alpha             float64     `yaml:"alpha"`
	Dropout           float64     `yaml:"dropout"`
	UseRSLoRA         bool        `yaml:"use_rslora"`
	Init              string      `yaml:"init"` // default, gaussian or pissa
	TargetModules     []string    `yaml:"target_modules"`
	TargetRegex       string      `yaml:"target_regex"`
	LayersToTransform []int       `yaml:"layers_to_transform"`
	From              string      `yaml:"from"` // a PEFT adapter directory to continue training
}

// peftConfig is the adapter's hyperparameters as the peft package takes them.
func (a AdapterConfig) peftConfig() peft.Config {
	return peft.Config{R: a.R, Alpha: a.Alpha, Dropout: a.Dropout, UseRSLoRA: a.UseRSLoRA,
		UseDoRA: a.Type == DoRA, Init: a.Init, TargetModules: a.TargetModules,
		TargetRegex: a.TargetRegex, LayersToTransform: a.LayersToTransform}
}

// checkAdapter checks the adapter section's own values; with from, the
// loaded adapter's hyperparameters apply, and resolveAdapter checks them.
func (r *Recipe) checkAdapter(bad func(field, format string, args ...any)) {
	a := r.Adapter
	if a.Type == FullFineTune {
		if a.From != "" {
			bad("adapter.from", "needs type lora or dora (type none trains every weight)")
		}
		return
	}
	if !(a.Dropout >= 0 && a.Dropout < 1) {
		bad("adapter.dropout", "must be in [0, 1), got %g", a.Dropout)
	}
	if a.From != "" {
		return // the adapter's own hyperparameters apply (resolveAdapter)
	}
	if a.R <= 0 {
		bad("adapter.r", "must be > 0, got %d", a.R)
	}
	if a.Alpha <= 0 {
		bad("adapter.alpha", "must be > 0, got %g", a.Alpha)
	}
	switch a.Init {
	case "", peft.InitDefault, peft.InitGaussian, peft.InitPiSSA:
	default:
		bad("adapter.init", "must be default, gaussian or pissa, got %q", a.Init)
	}
	r.validateTargets(bad)
}

// resolveAdapter fills in what the recipe leaves to the adapter: the
// default init, and, with adapter.from, the hyperparameters of the
// adapter it continues. It checks the targets against the model: each
// layer named exists, and what they select (r at most what PiSSA can
// take; a warning for a rank above what a module can use).
func (r *Recipe) resolveAdapter(bad func(field, format string, args ...any)) {
	a := &r.Config.Adapter
	if a.Type == FullFineTune {
		return
	}
	if a.Init == "" {
		a.Init = peft.InitDefault
	}
	if a.From != "" {
		r.validateFrom(bad)
		return
	}
	usable := r.validateTargets(func(string, string, ...any) {}) // check reported why not
	if a.TargetRegex != "" {
		a.TargetModules = nil // the default list gives way to the regex
	}
	if !usable {
		return
	}
	layersOK := true
	for i, l := range a.LayersToTransform {
		if n := r.Base.NumHiddenLayers; n > 0 && l >= n {
			bad(fmt.Sprintf("adapter.layers_to_transform[%d]", i), "layer %d does not exist (the model has layers 0 to %d)", l, n-1)
			layersOK = false
		}
	}
	if !layersOK || r.Base.NumHiddenLayers == 0 {
		return
	}
	// what the targets select in this model, checked before any work
	ts, err := peft.Select(peft.ConfigTargets(r.Base), a.peftConfig())
	switch {
	case err != nil && a.TargetRegex != "":
		bad("adapter.target_regex", "%v", err)
	case err != nil:
		bad("adapter.layers_to_transform", "%v", err)
	case a.Init == peft.InitPiSSA && a.R > 0:
		for _, t := range ts {
			if k := min(t.Out, t.In); a.R > k {
				bad("adapter.r", "init pissa takes r singular vectors: r = %d exceeds min(out, in) = %d of %s", a.R, k, t.Path)
				break
			}
		}
	case a.R > 0:
		// Legal, as in PEFT, but the update B·A of an out×in module has
		// rank at most min(out, in): the extra rank only costs.
		for _, t := range ts {
			if k := min(t.Out, t.In); a.R > k {
				r.Warnings = append(r.Warnings, fmt.Sprintf("adapter.r = %d exceeds min(out, in) = %d of %s (and perhaps others): "+
					"the update B·A cannot have rank above %d there, so r = %d trains the same updates with more parameters", a.R, k, t.Path, k, k))
				break
			}
		}
	}
}

// validateTargets checks target_modules, target_regex and
// layers_to_transform on their own; false if they are unusable.
func (r *Recipe) validateTargets(bad func(field, format string, args ...any)) bool {
	a := r.Adapter
	ok := true
	known := append(slices.Clone(model.AttentionModules), model.MLPModules...)
	if a.TargetRegex != "" {
		if len(a.TargetModules) > 0 && r.doc != nil && r.doc.Has("adapter.target_modules") {
			bad("adapter.target_regex", "set target_modules (a list of names) or target_regex, not both")
			ok = false
		}
		// the regex is written to adapter_config.json for PEFT, which
		// matches it with Python's re: only what both read alike
		if err := peft.CheckPortableRegex(a.TargetRegex); err != nil {
			bad("adapter.target_regex", "%v", err)
			ok = false
		}
		if len(a.LayersToTransform) > 0 {
			bad("adapter.layers_to_transform", "cannot be used with target_regex (PEFT refuses it too); put the layer numbers in the regex")
			ok = false
		}
	} else {
		if len(a.TargetModules) == 0 {
			bad("adapter.target_modules", "must name at least one module (%s), or set target_regex", strings.Join(known, ", "))
			ok = false
		}
		for i, m := range a.TargetModules {
			if !slices.Contains(known, m) {
				bad(fmt.Sprintf("adapter.target_modules[%d]", i), "unknown module %q (known: %s)", m, strings.Join(known, ", "))
				ok = false
			}
		}
	}
	for i, l := range a.LayersToTransform {
		if l < 0 {
			bad(fmt.Sprintf("adapter.layers_to_transform[%d]", i), "layer %d does not exist (layers count from 0)", l)
			ok = false
		}
	}
	return ok
}

// validateFrom reads the adapter to continue from. Its own
// hyperparameters define the adapter; the recipe may repeat them (a
// resumed run's resolved.yaml does) but not contradict them, and may set
// dropout, a training-time choice.
func (r *Recipe) validateFrom(bad func(field, format string, args ...any)) {
	a := &r.Config.Adapter
	c, err := peft.ReadConfig(a.From)
	if err != nil {
		bad("adapter.from", "%v", err)
		return
	}
	if len(c.ModulesToSave) > 0 {
		bad("adapter.from", "the adapter in %s saves %v whole (modules_to_save); mixtune trains adapters only, so it cannot continue training those (merge it, or evaluate or generate with it)", a.From, c.ModulesToSave)
		return
	}
	has := func(f string) bool { return r.doc != nil && r.doc.Has("adapter."+f) }
	differs := func(field string, recipe, file any) {
		if has(field) && fmt.Sprint(recipe) != fmt.Sprint(file) {
			bad("adapter."+field, "%v differs from %v in the adapter of adapter.from (%s); leave it out to take the adapter's", recipe, file, a.From)
		}
	}
	differs("type", string(a.Type), c.Kind())
	differs("r", a.R, c.R)
	differs("alpha", a.Alpha, c.Alpha)
	differs("use_rslora", a.UseRSLoRA, c.UseRSLoRA)
	differs("target_regex", a.TargetRegex, c.TargetRegex)
	if len(a.TargetModules) > 0 || c.TargetRegex == "" {
		differs("target_modules", a.TargetModules, c.TargetModules)
	}
	differs("layers_to_transform", a.LayersToTransform, c.LayersToTransform)
	if a.Init != peft.InitDefault {
		bad("adapter.init", "does not apply with adapter.from: the weights are loaded, not initialized")
	}
	a.Type, a.R, a.Alpha, a.UseRSLoRA = AdapterKind(c.Kind()), c.R, c.Alpha, c.UseRSLoRA
	a.TargetModules, a.TargetRegex, a.LayersToTransform = c.TargetModules, c.TargetRegex, c.LayersToTransform
	if !has("dropout") {
		a.Dropout = c.Dropout
	}
}

// linearTargets lists every linear module of the model with its shape.
func linearTargets(m *model.Model) []peft.Target { return peft.ModelTargets(m) }

// newAdapter makes the run's adapter: loaded from adapter.from, or fresh
// (PiSSA rewrites the targeted base weights to their residuals); nil for
// full fine-tuning.
func newAdapter(r *Recipe, m *model.Model) (*peft.Adapter, error) {
	if r.Adapter.Type == FullFineTune {
		return nil, nil
	}
	if r.Adapter.From != "" {
		l, err := peft.Load(r.Adapter.From, peft.BaseOf(m))
		if err != nil {
			return nil, err
		}
		l.Config.Dropout = r.Adapter.Dropout
		return l, nil
	}
	c := r.Adapter.peftConfig()
	ts, err := peft.Select(linearTargets(m), c)
	if err != nil {
		return nil, err
	}
	return peft.New(c, ts, r.Seed, m.Weights)
}

// trainables lists what the optimizer updates: the adapter's A, B and
// DoRA magnitudes, or every weight of the model. Their gradients are fp32
// buffers of their own.
func trainables(m *model.Model, l *peft.Adapter) []*optim.Param {
	var ps []*optim.Param
	if l != nil {
		return l.Params()
	}
	for _, s := range model.Specs(m.Config) {
		w := m.Weights[s.Name]
		ps = append(ps, &optim.Param{Name: s.Name, Shape: w.Shape, Value: w.Data, Grad: make([]float32, len(w.Data))})
	}
	return ps
}

// mergedWeights returns the base weights with the adapter merged in (LoRA
// or DoRA, in fp32), for generation; unadapted weights are shared, not
// copied.
func mergedWeights(m *model.Model, l *peft.Adapter) (map[string][]float32, error) {
	w, err := peft.MergedWeights(m, l)
	if err != nil {
		return nil, fmt.Errorf("merge the adapter for generation: %w", err)
	}
	return w, nil
}

// loadWithAdapter loads a model and, if adapterDir is set, a PEFT LoRA or
// DoRA adapter for it.
func loadWithAdapter(modelDir, adapterDir string) (*model.Model, *peft.Adapter, error) {
	m, err := model.Load(modelDir)
	if err != nil {
		return nil, nil, err
	}
	if adapterDir == "" {
		return m, nil, nil
	}
	l, err := peft.Load(adapterDir, peft.BaseOf(m))
	return m, l, err
}
