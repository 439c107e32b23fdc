package peft

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/quant"
)

// WriteOptions say how WriteMerged stores a merged model.
type WriteOptions struct {
	// Dtype stores the weights (those left in 16 or 32 bits, with Requant).
	Dtype amp.Format
	// Requant, when its Type is set, stores the decoder projections 4-bit
	// in bitsandbytes' layout (Model.Requantize, Model.SaveBnB4).
	Requant       model.Quantization
	MaxShardBytes int64 // the largest safetensors file (model.Save)
	// FourBit, with Requant, reports whether base gives weight name 4-bit
	// (a bitsandbytes checkpoint's); nil: none but the projections. Such
	// a weight that is not a projection (a 4-bit lm_head) keeps its
	// codes, as Model.SaveBnB4 writes a loaded model's.
	FourBit func(name string) bool
}

// WriteMerged writes into dir the model with config c whose base weights
// base yields, one by one, with l merged in: what MergeInto, then
// Model.Requantize when opt.Requant is set, then Model.Save or SaveBnB4
// write for a loaded model, the same bytes, but holding one weight at a
// time. Each weight is read from base when its turn to be written comes,
// dequantized to fp32 if it is 4-bit, merged in fp32 if adapted, checked
// finite in opt.Dtype (PEFT's safe_merge), converted or quantized, written
// and dropped. base gives a weight as the adapter trained on it (4-bit for
// a QLoRA base) and may be called more than once for one name.
//
// With Requant, every projection is merged and quantized twice: once,
// before anything is written, for the error statistics and for the layout
// of its quant state, whose length the file's header holds (it includes
// the double quantization's offset), and again to be written. Both give
// the same codes: the arithmetic is the same.
func WriteMerged(dir string, c model.Config, base func(name string) (*model.Tensor, error), l *Adapter, opt WriteOptions) (model.RequantStats, error) {
	src := &mergedWeights{base: base, l: l, dtype: opt.Dtype, requant: opt.Requant}
	if opt.Requant.Type == 0 {
		return model.RequantStats{}, model.SaveFrom(dir, c, opt.Dtype, opt.MaxShardBytes, src)
	}
	st := model.RequantStats{Type: opt.Requant.Type, Double: opt.Requant.Double}
	layouts := map[string]*quant.Tensor{}
	for _, s := range model.Specs(c) {
		kept := !model.Quantizable(s.Name)
		if kept && (opt.FourBit == nil || !opt.FourBit(s.Name)) {
			continue
		}
		var q *quant.Tensor
		var err error
		if kept {
			q, err = src.Quantized(s.Name)
		} else {
			var t *model.Tensor
			if t, err = src.merged(s.Name); err == nil {
				q, _, err = st.Add(s.Name, t, opt.Requant)
			}
		}
		if err != nil {
			return st, err
		}
		layouts[s.Name] = model.QuantLayout(q)
	}
	return st, model.SaveBnB4From(dir, c, opt.Dtype, opt.MaxShardBytes, src, layouts)
}

// MergedSource is the weights base yields, one by one, with l merged in
// fp32 into each it adapts (nil l: none), each merge checked finite once
// stored in format f (CheckFinite): a model computed weight by weight,
// for a writer that holds one weight at a time (model.SaveFrom, a GGUF
// file). A weight base gives 4-bit is dequantized to fp32 first; a merge
// that is not finite is a *MergeError. base may be called more than once
// for one name.
func MergedSource(base func(name string) (*model.Tensor, error), l *Adapter, f amp.Format) model.WeightSource {
	return &mergedWeights{base: base, l: l, dtype: f}
}

// OpenStreaming loads the adapter in adapterDir for the base model src,
// whose weights are read one at a time: it reads, of the base, only the
// weights the adapter's modules_to_save replace. It returns the adapter
// and read, which gives each base weight as the adapter trained on it:
// from src, quantized as q says (the 4-bit base of a QLoRA run, whose
// weights are quantized as they load: Source.ReadQuantized), or replaced.
// An adapter trained against the residual of its base (Config.ResidualInit)
// needs every adapted base weight to load, so the base loaded whole.
func OpenStreaming(src *model.Source, adapterDir string, q model.Quantization) (*Adapter, func(name string) (*model.Tensor, error), error) {
	c, err := ReadConfig(adapterDir)
	if err != nil {
		return nil, nil, fmt.Errorf("load adapter: %w", err)
	}
	if c.ResidualInit() {
		return nil, nil, fmt.Errorf("load adapter %s: init %s saved unconverted needs the base loaded whole", adapterDir, c.Init)
	}
	// modules_to_save replace whole base weights (lm_head, the
	// embedding), which Load writes into the base it is given
	replaced := map[string]*model.Tensor{}
	if !src.Config.TieWordEmbeddings {
		for _, name := range c.ReplacedWeights() {
			if replaced[name], err = src.Read(name); err != nil {
				return nil, nil, err
			}
		}
	}
	base := Base{Targets: ConfigTargets(src.Config), Weights: replaced, TiedEmbeddings: src.Config.TieWordEmbeddings}
	l, err := Load(adapterDir, base)
	if err != nil {
		return nil, nil, err
	}
	read := func(name string) (*model.Tensor, error) {
		if t := replaced[name]; t != nil {
			return t, nil
		}
		return src.ReadQuantized(name, q)
	}
	return l, read, nil
}

// MergeError is a merge that is not finite (a DoRA row of norm 0, an
// overflow of the output dtype: CheckFinite), found by WriteMerged as it
// wrote the weight: the error to report whatever file was being written.
type MergeError struct{ Err error }

func (e *MergeError) Error() string { return e.Err.Error() }
func (e *MergeError) Unwrap() error { return e.Err }

// mergedWeights is a base model with an adapter merged in, weight by
// weight, as a model.WeightSource.
type mergedWeights struct {
	base    func(name string) (*model.Tensor, error)
	l       *Adapter
	dtype   amp.Format
	requant model.Quantization
	// large says the weight last given was 64 MiB or more in fp32: it is
	// collected before the next is read (see merged).
	large bool
}

// merged is weight name with the adapter merged in, if it adapts it:
// fp32, or the base's tensor as base gave it.
func (w *mergedWeights) merged(name string) (*model.Tensor, error) {
	if w.large {
		// The weight before, written and dropped, is garbage of up to
		// twice its fp32 size; left to the collector's pace (GOGC=100)
		// it would still be there when this one is read, doubling the
		// peak. Collected now, the peak is the largest weight's.
		runtime.GC()
	}
	t, err := w.base(name)
	if err != nil {
		return nil, err
	}
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	w.large = 4*n >= 64<<20
	path, ok := strings.CutSuffix(name, ".weight")
	if !ok || w.l == nil || w.l.byPath[path] == nil {
		return t, nil
	}
	// a 4-bit base: merged into its dequantized fp32 values, as MergeInto does
	merged, err := w.l.Merged(path, t.Float32())
	if err == nil {
		err = CheckFinite(path, merged, w.l.byPath[path].In, w.dtype)
	}
	if err != nil {
		return nil, &MergeError{err}
	}
	return &model.Tensor{Shape: t.Shape, Data: merged}, nil
}

func (w *mergedWeights) Float32(name string) ([]float32, error) {
	t, err := w.merged(name)
	if err != nil {
		return nil, err
	}
	return t.Float32(), nil
}

func (w *mergedWeights) Quantized(name string) (*quant.Tensor, error) {
	t, err := w.merged(name)
	if err != nil {
		return nil, err
	}
	if !model.Quantizable(name) { // 4-bit as base gave it: its codes kept
		if t.Q4 == nil {
			return nil, fmt.Errorf("%s is not 4-bit", name)
		}
		return quant.Decode(t.Q4)
	}
	var st model.RequantStats // counted before anything was written
	q, _, err := st.Add(name, t, w.requant)
	return q, err
}

// ReplacedWeights names the base weights that c's modules_to_save replace
// when Load reads the adapter: Load needs them in Base.Weights, and no
// other base weight unless c.ResidualInit.
func (c Config) ReplacedWeights() []string {
	var names []string
	for _, n := range c.ModulesToSave {
		if p := savedModules[n] + ".weight"; !slices.Contains(names, p) {
			names = append(names, p)
		}
	}
	return names
}

// ResidualInit reports whether the adapter holds A and B trained against
// the residual of its base weights (init pissa or olora, saved
// unconverted), which Load computes from every adapted base weight.
func (c Config) ResidualInit() bool { return c.Init == InitPiSSA || c.Init == InitOLoRA }

// ConfigTargets lists the linear modules a model with config c has, with
// their shapes, as ModelTargets lists a loaded model's.
func ConfigTargets(c model.Config) []Target {
	shapes := map[string][]int{}
	for _, s := range model.Specs(c) {
		shapes[s.Name] = s.Shape
	}
	var ts []Target
	for i := 0; i < c.NumHiddenLayers; i++ {
		for _, short := range append(slices.Clone(model.AttentionModules), model.MLPModules...) {
			p := model.ModulePath(i, short)
			s := shapes[p+".weight"]
			ts = append(ts, Target{Path: p, Out: s[0], In: s[1]})
		}
	}
	return ts
}
