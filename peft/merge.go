package peft

import (
	"fmt"
	"math"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
)

// Merging folds an adapter into its base weights, as PEFT's merge does:
//
//	LoRA:  W' = W + ΔW,                       ΔW = s·B·A
//	DoRA:  W' = (m / ‖W + ΔW‖) ⊙ (W + ΔW)     per output row
//
// The arithmetic runs in float64 on the fp32 values of W, A and B, and the
// result is rounded to fp32 once; an export casts it to its dtype once more,
// at the end.

// Merged returns module path's weight with the adapter folded in, for its
// base weight w [out, in], leaving w and the adapter as they are. A merged
// value that is not finite is an error naming the
// module; the values are returned regardless.
func (l *Adapter) Merged(path string, w []float32) ([]float32, error) {
	m, err := l.module(path, w)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(w))
	_, err = l.merge(m, w, out)
	return out, err
}

// Merge folds the adapter into w, module path's base weight, in place.
// From then on Linear computes the module plainly from w, and Unmerge can
// restore w. For DoRA it keeps ‖W + ΔW‖ per row, which W' no longer
// determines (its rows have norm m), so that the unmerge is exact.
func (l *Adapter) Merge(path string, w []float32) error {
	m, err := l.module(path, w)
	if err != nil {
		return err
	}
	if m.merged {
		return fmt.Errorf("%s: the adapter is already merged", path)
	}
	merged := make([]float32, len(w))
	norm, err := l.merge(m, w, merged)
	if err != nil {
		return err // w is left as it was
	}
	copy(w, merged)
	m.merged, m.mergedNorm = true, norm
	return nil
}

// Unmerge takes the adapter back out of w: W = W' − ΔW, or for DoRA
// W = W' · ‖W + ΔW‖ / m − ΔW with the norm kept at merge time.
func (l *Adapter) Unmerge(path string, w []float32) error {
	m, err := l.module(path, w)
	if err != nil {
		return err
	}
	if !m.merged {
		return fmt.Errorf("%s: the adapter is not merged", path)
	}
	d := l.delta(m)
	for o := 0; o < m.Out; o++ {
		f := 1.0
		if l.Config.UseDoRA {
			if m.M[o] == 0 {
				return fmt.Errorf("%s: cannot unmerge: row %d has magnitude 0, so the merged row is 0 and W is lost", path, o)
			}
			f = m.mergedNorm[o] / float64(m.M[o])
		}
		for j := o * m.In; j < (o+1)*m.In; j++ {
			w[j] = float32(float64(w[j])*f - d[j])
		}
	}
	m.merged, m.mergedNorm = false, nil
	return nil
}

// IsMerged reports whether the adapter of module path is merged into its weight.
func (l *Adapter) IsMerged(path string) bool {
	m := l.byPath[path]
	return m != nil && m.merged
}

func (l *Adapter) module(path string, w []float32) (*Module, error) {
	m := l.byPath[path]
	if m == nil {
		return nil, fmt.Errorf("%s is not adapted", path)
	}
	if len(w) != m.Out*m.In {
		return nil, fmt.Errorf("%s: base weight has %d values, want %d×%d", path, len(w), m.Out, m.In)
	}
	return m, nil
}

// merge writes the merged weight of m for base weight w into dst (which may
// be w) and returns DoRA's row norms of W + ΔW (nil for LoRA).
func (l *Adapter) merge(m *Module, w, dst []float32) ([]float64, error) {
	d := l.delta(m)
	for i := range d {
		d[i] += float64(w[i]) // W + ΔW
	}
	var norms []float64
	if l.Config.UseDoRA {
		norms = make([]float64, m.Out)
		for o := range norms {
			var acc float64
			for _, v := range d[o*m.In : (o+1)*m.In] {
				acc += v * v
			}
			norms[o] = max(math.Sqrt(acc), nn.DoRANormFloor) // as the forward pass divides
			f := float64(m.M[o]) / norms[o]
			for j := o * m.In; j < (o+1)*m.In; j++ {
				d[j] *= f
			}
		}
	}
	for i, v := range d {
		dst[i] = float32(v)
	}
	return norms, CheckFinite(m.Path, dst, m.In, amp.FP32)
}

// CheckFinite reports the first value of module path's merged weight w
// [out, in] that is not finite once stored in format f (fp16 overflows
// beyond 65504), naming the module: PEFT's safe_merge check, applied at
// the dtype the weight is written in.
func CheckFinite(path string, w []float32, in int, f amp.Format) error {
	for i, v := range w {
		if r := float64(f.Round(v)); math.IsNaN(r) || math.IsInf(r, 0) {
			return fmt.Errorf("%s: merged weight [%d, %d] is %v in %s (%v before the cast): the merge is not finite", path, i/in, i%in, r, f, v)
		}
	}
	return nil
}

// MergedWeights returns m's weights in fp32 with l merged into each
// adapted module, as generation, evaluation and export use them (nil l:
// the base weights). Unadapted weights are shared with m, not copied. A
// merge that is not finite (a DoRA row of norm 0, an overflow) is an error
// naming the module.
func MergedWeights(m *model.Model, l *Adapter) (map[string][]float32, error) {
	w := make(map[string][]float32, len(m.Weights))
	for name, t := range m.Weights {
		w[name] = t.Float32()
	}
	if l == nil {
		return w, nil
	}
	for _, mod := range l.Modules {
		name := mod.Path + ".weight"
		merged, err := l.Merged(mod.Path, w[name])
		if err != nil {
			return nil, err
		}
		w[name] = merged
	}
	return w, nil
}

// MergeInto folds l into m's fp32 weights in place (a 4-bit weight is
// dequantized to fp32 first), module by module, and
// checks each merged weight once stored in format f (PEFT's safe_merge,
// at the dtype it will be written in): what `mixtune merge` writes. An
// error leaves the modules before it merged.
func MergeInto(m *model.Model, l *Adapter, f amp.Format) error {
	for _, mod := range l.Modules {
		w := m.Weights[mod.Path+".weight"]
		if w != nil && w.Q4 != nil { // a 4-bit base: merged into its dequantized fp32 values
			w.Data, w.Q4 = w.Float32(), nil
		}
		if w == nil || w.Data == nil {
			return fmt.Errorf("%s: the base model has no fp32 weight %s.weight to merge into", mod.Path, mod.Path)
		}
		if err := l.Merge(mod.Path, w.Data); err != nil {
			return err
		}
		if err := CheckFinite(mod.Path, w.Data, mod.In, f); err != nil {
			return err
		}
	}
	return nil
}
