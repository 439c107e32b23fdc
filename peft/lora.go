// Package peft implements parameter-efficient adapters as Hugging Face PEFT
// defines them: LoRA's low-rank update W + (α/r)·B·A on chosen linear
// modules, with B starting at zero so training starts from the base model,
// and adapter files PEFT itself can read.
package peft

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/nn"
)

// Config is a LoRA adapter's hyperparameters.
type Config struct {
	R             int
	Alpha         float64
	TargetModules []string // short module names: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
}

// Validate checks the values a LoRA adapter cannot work with.
func (c Config) Validate() error {
	var errs []string
	if c.R <= 0 {
		errs = append(errs, fmt.Sprintf("r must be > 0, got %d", c.R))
	}
	if c.Alpha <= 0 || math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0) {
		errs = append(errs, fmt.Sprintf("lora_alpha must be a positive number, got %g", c.Alpha))
	}
	if len(c.TargetModules) == 0 {
		errs = append(errs, "target_modules is empty")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Scaling is the factor on the low-rank branch, α/r.
func (c Config) Scaling() float64 { return c.Alpha / float64(c.R) }

// Target is a linear module an adapter may attach to.
type Target struct {
	Path    string // HF module path, e.g. "model.layers.0.self_attn.q_proj"
	Out, In int
}

// Targets keeps the modules whose short name (the last path element) is
// in names. It is an error if a name matches nothing, since a typo would
// otherwise train an adapter on nothing.
func Targets(all []Target, names []string) ([]Target, error) {
	matched := map[string]bool{}
	var out []Target
	for _, t := range all {
		short := t.Path[strings.LastIndex(t.Path, ".")+1:]
		if slices.Contains(names, short) {
			out = append(out, t)
			matched[short] = true
		}
	}
	for _, n := range names {
		if !matched[n] {
			return nil, fmt.Errorf("target module %q matches no linear module of the model", n)
		}
	}
	return out, nil
}

// Module is one adapted linear module: A [r, in], B [out, r], fp32.
type Module struct {
	Target
	A, B         []float32
	GradA, GradB []float32
}

// LoRA is a set of adapted modules.
type LoRA struct {
	Config  Config
	Modules []*Module
	byPath  map[string]*Module
}

// New initializes an adapter as PEFT does by default: A kaiming-uniform
// with a = √5, i.e. U(−1/√in, 1/√in), and B = 0, so the adapted model
// starts out computing exactly the base model. Each A draws from its own
// stream keyed by seed and module path.
func New(c Config, targets []Target, seed uint64) (*LoRA, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	l := &LoRA{Config: c, byPath: map[string]*Module{}}
	for _, t := range targets {
		m := &Module{Target: t,
			A: make([]float32, c.R*t.In), B: make([]float32, t.Out*c.R),
			GradA: make([]float32, c.R*t.In), GradB: make([]float32, t.Out*c.R)}
		h := fnv.New64a()
		h.Write([]byte(t.Path))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		bound := 1 / math.Sqrt(float64(t.In))
		for i := range m.A {
			m.A[i] = float32((rng.Float64()*2 - 1) * bound)
		}
		l.Modules = append(l.Modules, m)
		l.byPath[t.Path] = m
	}
	return l, nil
}

// KeyA and KeyB are the tensor names PEFT uses in adapter_model.safetensors.
func KeyA(path string) string { return "base_model.model." + path + ".lora_A.weight" }
func KeyB(path string) string { return "base_model.model." + path + ".lora_B.weight" }

// Linear computes module path with its adapter, W·x + (α/r)·B·(A·x), or
// plainly when the module is not adapted. Its signature is that of
// model.LinearFunc. Each adapter weight becomes a trainable param node,
// recorded in nodes under its PEFT key.
func (l *LoRA) Linear(nodes map[string]*G.Node) func(b *nn.Builder, path string, x, w *G.Node) *G.Node {
	return func(b *nn.Builder, path string, x, w *G.Node) *G.Node {
		base := b.Linear(x, w)
		m, ok := l.byPath[path]
		if !ok {
			return base
		}
		a := b.Param(KeyA(path), []int{l.Config.R, m.In}, m.A, true)
		bb := b.Param(KeyB(path), []int{m.Out, l.Config.R}, m.B, true)
		nodes[KeyA(path)], nodes[KeyB(path)] = a, bb
		return b.AddScaled(base, b.Linear(b.Linear(x, a), bb), l.Config.Scaling())
	}
}

// NumParams counts the adapter's trainable values.
func (l *LoRA) NumParams() int {
	n := 0
	for _, m := range l.Modules {
		n += len(m.A) + len(m.B)
	}
	return n
}

// Delta returns (α/r)·B·A [out, in] for an adapted module, computed in
// float64 and rounded once, for merging into the base weight.
func (l *LoRA) Delta(path string) ([]float32, bool) {
	m, ok := l.byPath[path]
	if !ok {
		return nil, false
	}
	r, s := l.Config.R, l.Config.Scaling()
	d := make([]float32, m.Out*m.In)
	for o := 0; o < m.Out; o++ {
		for i := 0; i < m.In; i++ {
			var acc float64
			for k := 0; k < r; k++ {
				acc += float64(m.B[o*r+k]) * float64(m.A[k*m.In+i])
			}
			d[o*m.In+i] = float32(s * acc)
		}
	}
	return d, true
}
