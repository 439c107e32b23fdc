package peft

import (
	"slices"

	"github.com/mixtune/mixtune/model"
)

// ModelTargets lists every linear module of a Llama model's decoder layers
// with its shape, in model order: what an adapter may target. The output
// layer is left out, as PEFT's "all-linear" leaves it out.
func ModelTargets(m *model.Model) []Target {
	var ts []Target
	for i := 0; i < m.Config.NumHiddenLayers; i++ {
		for _, short := range append(slices.Clone(model.AttentionModules), model.MLPModules...) {
			p := model.ModulePath(i, short)
			w := m.Weights[p+".weight"]
			ts = append(ts, Target{Path: p, Out: w.Shape[0], In: w.Shape[1]})
		}
	}
	return ts
}
