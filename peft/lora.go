// Package peft implements parameter-efficient adapters as Hugging Face PEFT
// defines them: LoRA's low-rank update W + s·B·A on chosen linear modules
// (s = α/r, or α/√r with rsLoRA), with dropout on the adapter branch; DoRA,
// which also learns a magnitude per output row; PEFT's initializations
// (kaiming-uniform, gaussian, PiSSA); merging into and unmerging from the
// base weights; extraction of a LoRA from a fine-tuned model by SVD; and
// adapter files PEFT itself can read.
package peft

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/optim"
)

// Initializations of A and B (PEFT's init_lora_weights).
const (
	InitDefault  = "default"  // A kaiming-uniform (a = √5), B = 0
	InitGaussian = "gaussian" // A ~ N(0, (1/r)²), B = 0
	InitPiSSA    = "pissa"    // A, B from the top r singular triplets of W; W keeps the residual
	InitOLoRA    = "olora"    // A, B from W's QR decomposition (B = Q_r, A = R_r); W keeps the residual
)

// Pattern is one entry of PEFT's rank_pattern or alpha_pattern: a regular
// expression for module paths, and the rank or alpha of the modules it
// matches (see patternValue).
type Pattern struct {
	Key   string
	Value float64
}

// Config is a LoRA or DoRA adapter's hyperparameters, with PEFT's meanings.
type Config struct {
	R         int
	Alpha     float64
	Dropout   float64 // lora_dropout: on the adapter branch's input, in training only
	UseRSLoRA bool    // scaling α/√r instead of α/r
	UseDoRA   bool
	Init      string // InitDefault ("" too), InitGaussian, InitPiSSA or InitOLoRA
	// Which linear modules to adapt, as PEFT's target_modules: either a
	// list of names, each matching a module path equal to it or ending in
	// "." + it (q_proj, mlp.up_proj), or a regular expression that must
	// match a whole module path.
	TargetModules []string
	TargetRegex   string
	// LayersToTransform keeps only modules of these decoder layers (all
	// when empty). As in PEFT, it applies to a list of names only.
	LayersToTransform []int
	// ExcludeModules and ExcludeRegex drop modules the targets select
	// (PEFT's exclude_modules): a name drops a path equal to it or ending
	// in "." + it; a regex drops the paths it matches whole.
	ExcludeModules []string
	ExcludeRegex   string
	// RankPattern and AlphaPattern give some modules another r or alpha
	// than R and Alpha (PEFT's rank_pattern and alpha_pattern), in the
	// order PEFT tries them.
	RankPattern, AlphaPattern []Pattern
	// ModulesToSave names the modules whose whole weights the adapter
	// file carries (lm_head, embed_tokens): loading one replaces the
	// base's weights with them.
	ModulesToSave []string
}

// Validate checks the values an adapter cannot work with.
func (c Config) Validate() error {
	var errs []string
	if c.R <= 0 {
		errs = append(errs, fmt.Sprintf("r must be > 0, got %d", c.R))
	}
	if c.Alpha <= 0 || math.IsNaN(c.Alpha) || math.IsInf(c.Alpha, 0) {
		errs = append(errs, fmt.Sprintf("lora_alpha must be a positive number, got %g", c.Alpha))
	}
	if !(c.Dropout >= 0 && c.Dropout < 1) {
		errs = append(errs, fmt.Sprintf("lora_dropout must be in [0, 1), got %g", c.Dropout))
	}
	switch c.Init {
	case "", InitDefault, InitGaussian, InitPiSSA, InitOLoRA:
	default:
		errs = append(errs, fmt.Sprintf("init must be default, gaussian, pissa or olora, got %q", c.Init))
	}
	for _, p := range c.RankPattern {
		if p.Value < 1 || p.Value != math.Trunc(p.Value) || p.Value > 1<<30 {
			errs = append(errs, fmt.Sprintf("rank_pattern[%q] must be a positive integer, got %g", p.Key, p.Value))
		}
	}
	for _, p := range c.AlphaPattern {
		if !(p.Value > 0) || math.IsInf(p.Value, 0) {
			errs = append(errs, fmt.Sprintf("alpha_pattern[%q] must be a positive number, got %g", p.Key, p.Value))
		}
	}
	for _, p := range append(slices.Clone(c.RankPattern), c.AlphaPattern...) {
		if err := CheckPortableRegex(p.Key); err != nil {
			errs = append(errs, fmt.Sprintf("pattern key %q: %v", p.Key, err))
		}
	}
	if c.ExcludeRegex != "" {
		if err := CheckPortableRegex(c.ExcludeRegex); err != nil {
			errs = append(errs, fmt.Sprintf("exclude_modules regex: %v", err))
		}
	}
	switch {
	case len(c.TargetModules) == 0 && c.TargetRegex == "":
		errs = append(errs, "target_modules is empty")
	case len(c.TargetModules) > 0 && c.TargetRegex != "":
		errs = append(errs, "target_modules is both a list and a regex")
	case c.TargetRegex != "":
		if err := CheckPortableRegex(c.TargetRegex); err != nil {
			errs = append(errs, fmt.Sprintf("target_modules regex: %v", err))
		}
		if len(c.LayersToTransform) > 0 {
			errs = append(errs, "layers_to_transform cannot be used with a target_modules regex (PEFT refuses it too; put the layers in the regex)")
		}
	}
	for _, l := range c.LayersToTransform {
		if l < 0 {
			errs = append(errs, fmt.Sprintf("layers_to_transform: layer %d is negative", l))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// Scaling is the factor on the low-rank branch: α/r, or α/√r with rsLoRA.
func (c Config) Scaling() float64 { return scaling(c.Alpha, c.R, c.UseRSLoRA) }

func scaling(alpha float64, r int, rslora bool) float64 {
	if rslora {
		return alpha / math.Sqrt(float64(r))
	}
	return alpha / float64(r)
}

// ModuleRank returns the rank, alpha and scaling of module path: R and
// Alpha unless a rank_pattern or alpha_pattern entry matches it.
func (c Config) ModuleRank(path string) (r int, alpha, s float64) {
	r, alpha = c.R, c.Alpha
	if v, ok := patternValue(c.RankPattern, path); ok {
		r = int(v)
	}
	if v, ok := patternValue(c.AlphaPattern, path); ok {
		alpha = v
	}
	return r, alpha, scaling(alpha, r, c.UseRSLoRA)
}

// patternValue is PEFT's get_pattern_key (utils/other.py): the first key,
// in order, for which re.match(rf"(.*\.)?({key})$", path) matches, that
// is, the key as a regex matching a whole dotted suffix of the path.
func patternValue(ps []Pattern, path string) (float64, bool) {
	for _, p := range ps {
		re, err := regexp.Compile(`^(?:.*\.)?(?:` + p.Key + `)$`)
		if err == nil && re.MatchString(path) {
			return p.Value, true
		}
	}
	return 0, false
}

// Kind is "dora" or "lora".
func (c Config) Kind() string {
	if c.UseDoRA {
		return "dora"
	}
	return "lora"
}

// String describes the adapter for a run's log, e.g.
// "dora r=8 alpha=16 (scaling 2) dropout 0.05 init pissa on q_proj,v_proj".
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s r=%d alpha=%g (scaling %.4g", c.Kind(), c.R, c.Alpha, c.Scaling())
	if c.UseRSLoRA {
		b.WriteString(", rslora")
	}
	b.WriteString(")")
	for _, p := range c.RankPattern {
		fmt.Fprintf(&b, " r=%g on /%s/", p.Value, p.Key)
	}
	for _, p := range c.AlphaPattern {
		fmt.Fprintf(&b, " alpha=%g on /%s/", p.Value, p.Key)
	}
	if c.Dropout > 0 {
		fmt.Fprintf(&b, " dropout %g", c.Dropout)
	}
	if c.Init != "" && c.Init != InitDefault {
		fmt.Fprintf(&b, " init %s", c.Init)
	}
	if c.TargetRegex != "" {
		fmt.Fprintf(&b, " on /%s/", c.TargetRegex)
	} else {
		fmt.Fprintf(&b, " on %s", strings.Join(c.TargetModules, ","))
	}
	if len(c.LayersToTransform) > 0 {
		fmt.Fprintf(&b, " in layers %v", c.LayersToTransform)
	}
	if c.ExcludeRegex != "" {
		fmt.Fprintf(&b, " except /%s/", c.ExcludeRegex)
	} else if len(c.ExcludeModules) > 0 {
		fmt.Fprintf(&b, " except %s", strings.Join(c.ExcludeModules, ","))
	}
	if len(c.ModulesToSave) > 0 {
		fmt.Fprintf(&b, ", saving %s whole", strings.Join(c.ModulesToSave, ","))
	}
	return b.String()
}

// Target is a linear module an adapter may attach to.
type Target struct {
	Path    string // HF module path, e.g. "model.layers.0.self_attn.q_proj"
	Out, In int
}

// AllLinear is PEFT's target_modules value for every linear module but the
// output layer.
const AllLinear = "all-linear"

// layerIndex is PEFT's pattern for a module's layer number: the last
// number that is a whole path element followed by more path.
var layerIndex = regexp.MustCompile(`.*\.[^.]*\.(\d+)\.`)

// Select keeps the modules of all that c targets, with PEFT's rules
// (check_target_module_exists in tuners_utils.py): a regex must match a
// whole path; a name matches a path equal to it or ending in "." + name;
// layers_to_transform then keeps the listed layers, and exclude_modules
// drops what it names. A name, regex or layer that selects nothing is an
// error, since a typo in a recipe would otherwise train an adapter on
// nothing; loading a PEFT file is more lenient (see Load).
func Select(all []Target, c Config) ([]Target, error) {
	out, unmatched, err := selectTargets(all, c)
	if err != nil {
		return nil, err
	}
	if len(unmatched) > 0 {
		return nil, errors.New(unmatched[0])
	}
	return out, nil
}

// selectTargets is Select, with what selects nothing returned as
// messages in unmatched rather than as an error; err is an unusable
// config, or nothing selected at all.
func selectTargets(all []Target, c Config) (out []Target, unmatched []string, err error) {
	excluded, err := excluder(c)
	if err != nil {
		return nil, nil, err
	}
	if c.TargetRegex != "" {
		match := func(string) bool { return true }
		if !strings.EqualFold(c.TargetRegex, AllLinear) {
			re, err := regexp.Compile(`^(?:` + c.TargetRegex + `)$`)
			if err != nil {
				return nil, nil, fmt.Errorf("target_modules regex: %v", err)
			}
			match = re.MatchString
		}
		for _, t := range all {
			if match(t.Path) && !excluded(t.Path) {
				out = append(out, t)
			}
		}
		if len(out) == 0 {
			return nil, nil, fmt.Errorf("target_modules regex %q matches no linear module of the model (paths look like %q)%s", c.TargetRegex, all[0].Path, exclusionNote(c))
		}
		return out, nil, nil
	}
	matched, layers := map[string]bool{}, map[int]bool{}
	for _, t := range all {
		name := ""
		for _, n := range c.TargetModules {
			if t.Path == n || strings.HasSuffix(t.Path, "."+n) {
				name = n
				break
			}
		}
		if name == "" {
			continue
		}
		matched[name] = true
		if len(c.LayersToTransform) > 0 {
			m := layerIndex.FindStringSubmatch(t.Path)
			if m == nil {
				continue
			}
			l, _ := strconv.Atoi(m[1])
			if !slices.Contains(c.LayersToTransform, l) {
				continue
			}
			layers[l] = true
		}
		if !excluded(t.Path) {
			out = append(out, t)
		}
	}
	for _, n := range c.TargetModules {
		if !matched[n] {
			unmatched = append(unmatched, fmt.Sprintf("target module %q matches no linear module of the model", n))
		}
	}
	for _, l := range c.LayersToTransform {
		if !layers[l] {
			unmatched = append(unmatched, fmt.Sprintf("layers_to_transform: layer %d has none of the target modules", l))
		}
	}
	if len(out) == 0 {
		msg := fmt.Sprintf("target_modules %v select no linear module of the model", c.TargetModules)
		if len(unmatched) > 0 {
			msg = unmatched[0]
		}
		return nil, nil, errors.New(msg + exclusionNote(c))
	}
	return out, unmatched, nil
}

// excluder is exclude_modules as a predicate on module paths.
func excluder(c Config) (func(string) bool, error) {
	if c.ExcludeRegex != "" {
		re, err := regexp.Compile(`^(?:` + c.ExcludeRegex + `)$`)
		if err != nil {
			return nil, fmt.Errorf("exclude_modules regex: %v", err)
		}
		return re.MatchString, nil
	}
	return func(path string) bool {
		return slices.ContainsFunc(c.ExcludeModules, func(n string) bool { return path == n || strings.HasSuffix(path, "."+n) })
	}, nil
}

func exclusionNote(c Config) string {
	if c.ExcludeRegex != "" || len(c.ExcludeModules) > 0 {
		return " once exclude_modules is applied"
	}
	return ""
}

// Targets keeps the modules named by names (PEFT's list form of
// target_modules).
func Targets(all []Target, names []string) ([]Target, error) {
	return Select(all, Config{TargetModules: names})
}

// Module is one adapted linear module: A [r, in], B [out, r] and, for DoRA,
// the magnitude M [out], all fp32, with its rank r and scaling s (the
// config's, or rank_pattern's and alpha_pattern's).
type Module struct {
	Target
	R                   int
	Scaling             float64
	A, B, M             []float32
	GradA, GradB, GradM []float32

	// PiSSA's initial A and B: the base weight holds W − s·B₀·A₀, so the
	// file subtracts them to apply to the original W.
	a0, b0 []float32
	// merged says the adapter is folded into the base weight; mergedNorm
	// is DoRA's ‖W + s·B·A‖ at that time, which the merged weight no
	// longer determines and an exact unmerge needs.
	merged     bool
	mergedNorm []float64
}

// Adapter is a set of adapted modules: LoRA, or DoRA when Config.UseDoRA.
type Adapter struct {
	Config  Config
	Modules []*Module
	byPath  map[string]*Module
}

// alloc makes an adapter with zeroed weights for targets.
func alloc(c Config, targets []Target) *Adapter {
	l := &Adapter{Config: c, byPath: map[string]*Module{}}
	for _, t := range targets {
		r, _, s := c.ModuleRank(t.Path)
		m := &Module{Target: t, R: r, Scaling: s,
			A: make([]float32, r*t.In), B: make([]float32, t.Out*r),
			GradA: make([]float32, r*t.In), GradB: make([]float32, t.Out*r)}
		if c.UseDoRA {
			m.M, m.GradM = make([]float32, t.Out), make([]float32, t.Out)
		}
		l.Modules = append(l.Modules, m)
		l.byPath[t.Path] = m
	}
	return l
}

// Module returns the adapted module at path, or nil.
func (l *Adapter) Module(path string) *Module { return l.byPath[path] }

// Params lists the adapter's trainable tensors under their PEFT file
// keys, module by module: A, B, and DoRA's magnitude. Value and Grad are
// the adapter's own buffers, not copies, so an optimizer's update through
// them is the adapter's.
func (l *Adapter) Params() []*optim.Param {
	var ps []*optim.Param
	for _, m := range l.Modules {
		ps = append(ps,
			&optim.Param{Name: KeyA(m.Path), Shape: []int{m.R, m.In}, Value: m.A, Grad: m.GradA},
			&optim.Param{Name: KeyB(m.Path), Shape: []int{m.Out, m.R}, Value: m.B, Grad: m.GradB})
		if m.M != nil {
			ps = append(ps, &optim.Param{Name: KeyM(m.Path), Shape: []int{m.Out}, Value: m.M, Grad: m.GradM})
		}
	}
	return ps
}

// KeyA, KeyB and KeyM are the tensor names PEFT uses in
// adapter_model.safetensors. The DoRA magnitude has no ".weight".
func KeyA(path string) string { return "base_model.model." + path + ".lora_A.weight" }
func KeyB(path string) string { return "base_model.model." + path + ".lora_B.weight" }
func KeyM(path string) string { return "base_model.model." + path + ".lora_magnitude_vector" }

// Linear computes module path with its adapter, or plainly when the module
// is not adapted or the adapter is merged into its weight. Its signature
// is that of model.LinearFunc. With x_d = dropout(x) (x itself when
// lora_dropout is 0 or in evaluation):
//
//	LoRA:  W·x + s·B·A·x_d
//	DoRA:  g ⊙ (W·x + s·B·A·x)                    without dropout
//	       W·x + (g − 1) ⊙ W·x_d + g ⊙ s·B·A·x_d  with dropout (PEFT's form)
//
// with g = m / ‖W + s·B·A‖ per output row, the norm detached. Each adapter
// weight becomes a trainable param node, recorded in nodes under its PEFT
// key.
func (l *Adapter) Linear(nodes map[string]*G.Node) func(b *nn.Builder, path string, x, w, bias *G.Node) *G.Node {
	return func(b *nn.Builder, path string, x, w, bias *G.Node) *G.Node {
		m, ok := l.byPath[path]
		if !ok || m.merged {
			return b.LinearBias(x, w, bias)
		}
		c, s := l.Config, m.Scaling
		a := b.Param(KeyA(path), []int{m.R, m.In}, m.A, true)
		bb := b.Param(KeyB(path), []int{m.Out, m.R}, m.B, true)
		nodes[KeyA(path)], nodes[KeyB(path)] = a, bb
		xd := b.Dropout(x, c.Dropout)
		lora := b.Linear(b.Linear(xd, a), bb)
		if !c.UseDoRA {
			// the base layer with its (frozen) bias, plus the update: PEFT's
			// result = base_layer(x) + lora_B(lora_A(dropout(x)))·scaling
			return b.AddLinear(b.LinearBias(x, w, bias), lora, s)
		}
		mag := b.Param(KeyM(path), []int{m.Out}, m.M, true)
		nodes[KeyM(path)] = mag
		var baseD *G.Node
		if c.Dropout > 0 {
			baseD = b.Linear(xd, w)
		}
		// DoRA rescales W·x, not the bias, and the norm is of W + s·B·A
		// alone: PEFT subtracts the bias from the base output before the
		// rescaling and adds it back once.
		out := b.DoRA(b.Linear(x, w), baseD, lora, mag, b.DoRANorm(w, a, bb, s, path), s)
		if bias != nil {
			out = b.AddBias(out, bias)
		}
		return out
	}
}

// NumParams counts the adapter's trainable values.
func (l *Adapter) NumParams() int {
	n := 0
	for _, m := range l.Modules {
		n += len(m.A) + len(m.B) + len(m.M)
	}
	return n
}

// Delta returns s·B·A [out, in] for an adapted module, computed in float64
// and rounded once. For DoRA it is the low-rank update only; Merged gives
// the merged weight.
func (l *Adapter) Delta(path string) ([]float32, bool) {
	m, ok := l.byPath[path]
	if !ok {
		return nil, false
	}
	d64 := l.delta(m)
	d := make([]float32, len(d64))
	for i, v := range d64 {
		d[i] = float32(v)
	}
	return d, true
}

// delta is s·B·A in float64.
func (l *Adapter) delta(m *Module) []float64 {
	return lowRank(m.B, m.A, m.Out, m.In, m.R, m.Scaling)
}

// lowRank returns s·B·A [out, in] for B [out, r] and A [r, in], in float64.
func lowRank(b, a []float32, out, in, r int, s float64) []float64 {
	d := make([]float64, out*in)
	for o := 0; o < out; o++ {
		row := d[o*in : (o+1)*in]
		for k := 0; k < r; k++ {
			c := float64(b[o*r+k])
			if c == 0 {
				continue
			}
			for j, av := range a[k*in : (k+1)*in] {
				row[j] += c * float64(av)
			}
		}
		for j := range row {
			row[j] *= s
		}
	}
	return d
}
