// Package testadapter writes adapters whose merge changes every weight
// they adapt, for the tests of merging and exporting: peft.New starts B at
// zero, so a freshly initialized adapter merges to its base.
package testadapter

import (
	"fmt"
	"math/rand/v2"

	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

// Random saves in dir, for the model in baseDir, a LoRA (DoRA with dora)
// of rank 4 and alpha 8 on targets, with B drawn from N(0, 0.02²) and
// DoRA's magnitudes off the base's row norms by N(0, 0.1²) relative, all
// from seed.
func Random(baseDir, dir string, targets []string, dora bool, seed uint64) error {
	m, err := model.Load(baseDir)
	if err != nil {
		return err
	}
	ts, err := peft.Targets(peft.ModelTargets(m), targets)
	if err != nil {
		return err
	}
	fp32 := map[string]*model.Tensor{} // DoRA's magnitudes start at the row norms of fp32 weights
	for name, w := range m.Weights {
		fp32[name] = &model.Tensor{Shape: w.Shape, Data: w.Float32()}
	}
	l, err := peft.New(peft.Config{R: 4, Alpha: 8, TargetModules: targets, UseDoRA: dora}, ts, seed, fp32)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(seed, 3))
	for _, mod := range l.Modules {
		for j := range mod.B {
			mod.B[j] = float32(rng.NormFloat64() * 0.02)
		}
		for j := range mod.M {
			mod.M[j] *= float32(1 + 0.1*rng.NormFloat64())
		}
	}
	if err := l.Save(dir, baseDir); err != nil {
		return fmt.Errorf("testadapter: %w", err)
	}
	return nil
}
