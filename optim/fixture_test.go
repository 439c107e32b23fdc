package optim

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// torchFixture is testdata/torch_optim.json, written by
// scripts/gen_optim_fixture.py from PyTorch.
type torchFixture struct {
	TorchVersion string `json:"torch_version"`
	Params       []struct {
		Name  string    `json:"name"`
		Shape []int     `json:"shape"`
		Init  []float64 `json:"init"`
	} `json:"params"`
	Grads [][][]float64 `json:"grads"` // [step][param][element]
	Cases []struct {
		Name      string `json:"name"`
		Optimizer string `json:"optimizer"`
		Config    struct {
			Beta1       float64 `json:"beta1"`
			Beta2       float64 `json:"beta2"`
			Eps         float64 `json:"eps"`
			WeightDecay float64 `json:"weight_decay"`
			Momentum    float64 `json:"momentum"`
			Nesterov    bool    `json:"nesterov"`
		} `json:"config"`
		LR    []float64     `json:"lr"`
		After [][][]float64 `json:"after"` // [step][param][element]
		// State holds the optimizer's state tensors after every step, keyed
		// like State.Tensors.
		State []map[string][]float64 `json:"state"`
	} `json:"cases"`
	Clip []struct {
		MaxNorm     float64     `json:"max_norm"`
		Grads       [][]float64 `json:"grads"`
		Norm        float64     `json:"norm"`
		NormFloat64 float64     `json:"norm_float64"`
		Clipped     [][]float64 `json:"clipped"`
	} `json:"clip"`
	BiasCorrection []struct {
		Beta  float64 `json:"beta"`
		Step  int64   `json:"step"`
		Value float64 `json:"value"`
	} `json:"bias_correction"`
}

func loadFixture(t testing.TB) *torchFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/torch_optim.json")
	if err != nil {
		t.Fatalf("reading fixture: %v", err)
	}
	var f torchFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("parsing fixture: %v", err)
	}
	if len(f.Params) == 0 || len(f.Grads) == 0 || len(f.Cases) == 0 {
		t.Fatal("fixture is empty")
	}
	return &f
}

// f32s converts fixture numbers, which are exact float32 values, to float32.
func f32s(xs []float64) []float32 {
	out := make([]float32, len(xs))
	for i, x := range xs {
		out[i] = float32(x)
	}
	return out
}

// fixtureParams returns fresh params holding the fixture's initial values.
func (f *torchFixture) params() []*Param {
	ps := make([]*Param, len(f.Params))
	for i, p := range f.Params {
		ps[i] = &Param{Name: p.Name, Shape: p.Shape, Value: f32s(p.Init), Grad: make([]float32, len(p.Init))}
	}
	return ps
}

// setGrads copies the fixture's gradients for step (0-based) into ps.
func (f *torchFixture) setGrads(ps []*Param, step int) {
	for i, p := range ps {
		copy(p.Grad, f32s(f.Grads[step][i]))
	}
}

// ulpDiff is the distance between a and b in units in the last place of
// float32 (0 when equal, counting across zero).
func ulpDiff(a, b float32) int64 {
	ord := func(x float32) int64 {
		u := int64(math.Float32bits(x))
		if u&(1<<31) != 0 {
			return -(u &^ (1 << 31))
		}
		return u
	}
	d := ord(a) - ord(b)
	if d < 0 {
		d = -d
	}
	return d
}
