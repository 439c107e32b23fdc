package optim

import (
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// newFixtureOptimizer builds the optimizer a fixture case describes.
func newFixtureOptimizer(t testing.TB, f *torchFixture, ci int) Optimizer {
	t.Helper()
	c := f.Cases[ci]
	var (
		o   Optimizer
		err error
	)
	switch c.Optimizer {
	case "adamw":
		o, err = NewAdamW(AdamWConfig{Beta1: c.Config.Beta1, Beta2: c.Config.Beta2, Eps: c.Config.Eps, WeightDecay: c.Config.WeightDecay})
	case "sgd":
		o, err = NewSGD(SGDConfig{Momentum: c.Config.Momentum, WeightDecay: c.Config.WeightDecay, Nesterov: c.Config.Nesterov})
	default:
		t.Fatalf("case %s: unknown optimizer %q", c.Name, c.Optimizer)
	}
	if err != nil {
		t.Fatalf("case %s: %v", c.Name, err)
	}
	return o
}

// TestMatchesTorch replays every fixture case and requires params and state
// tensors after every step to equal PyTorch's bit for bit. The float32
// emulation (see AdamW.update) achieves 0 ulp on the checked-in fixture
// (PyTorch 1.13, x86-64 AVX2). Should the fixture ever be regenerated on a
// build that fuses differently, up to 1-2 ulp would be expected; anything
// more is a semantic bug.
func TestMatchesTorch(t *testing.T) {
	const maxULP = 0
	f := loadFixture(t)
	for ci, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			o := newFixtureOptimizer(t, f, ci)
			ps := f.params()
			var worstULP int64
			var worstRel float64
			compare := func(what string, got []float32, want []float64) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
				}
				for i, w := range f32s(want) {
					u := ulpDiff(got[i], w)
					worstULP = max(worstULP, u)
					if w != 0 {
						worstRel = max(worstRel, math.Abs(float64(got[i])-float64(w))/math.Abs(float64(w)))
					}
					if u > maxULP {
						t.Errorf("%s[%d] = %v, torch %v (%d ulp)", what, i, got[i], w, u)
					}
				}
			}
			for step := range f.Grads {
				f.setGrads(ps, step)
				if err := o.Step(ps, c.LR[step]); err != nil {
					t.Fatalf("step %d: %v", step+1, err)
				}
				for pi, p := range ps {
					compare(p.Name+" after step "+strconv.Itoa(step+1), p.Value, c.After[step][pi])
				}
				st := o.State()
				if len(st.Tensors) != len(c.State[step]) {
					t.Errorf("step %d: %d state tensors, torch has %d", step+1, len(st.Tensors), len(c.State[step]))
				}
				for key, want := range c.State[step] {
					got, ok := st.Tensors[key]
					if !ok {
						t.Errorf("step %d: state tensor %q missing", step+1, key)
						continue
					}
					compare(key+" after step "+strconv.Itoa(step+1), got, want)
				}
				if st.Step != int64(step+1) {
					t.Errorf("State().Step = %d, want %d", st.Step, step+1)
				}
			}
			t.Logf("max diff vs torch %s: %d ulp, %.3g relative", f.TorchVersion, worstULP, worstRel)
		})
	}
}

func TestBiasCorrectionMatchesLibm(t *testing.T) {
	f := loadFixture(t)
	for _, b := range f.BiasCorrection {
		if got := 1 - powInt(b.Beta, b.Step); got != b.Value {
			t.Errorf("1 - %v**%d = %v, Python %v", b.Beta, b.Step, got, b.Value)
		}
	}
}

func cloneParams(ps []*Param) []*Param {
	out := make([]*Param, len(ps))
	for i, p := range ps {
		out[i] = &Param{Name: p.Name, Shape: p.Shape, Value: slices.Clone(p.Value), Grad: slices.Clone(p.Grad)}
	}
	return out
}

// TestResumeBitIdentical stops every fixture case half way, moves the state
// into a fresh optimizer and checks that finishing there gives exactly what
// never stopping gives.
func TestResumeBitIdentical(t *testing.T) {
	f := loadFixture(t)
	// Extra steps beyond the fixture reuse its grads, so the runs are long
	// enough for bias corrections and momentum to matter.
	const steps, stopAt = 12, 5
	for ci, c := range f.Cases {
		t.Run(c.Name, func(t *testing.T) {
			run := func(o Optimizer, ps []*Param, from, to int) {
				for s := from; s < to; s++ {
					f.setGrads(ps, s%len(f.Grads))
					if err := o.Step(ps, 1e-3*float64(1+s%3)); err != nil {
						t.Fatal(err)
					}
				}
			}
			ref, refPs := newFixtureOptimizer(t, f, ci), f.params()
			run(ref, refPs, 0, steps)

			first, ps := newFixtureOptimizer(t, f, ci), f.params()
			run(first, ps, 0, stopAt)
			st := first.State()
			// Scribbling on the optimizer afterwards must not reach the
			// exported state, and vice versa.
			run(first, cloneParams(ps), stopAt, stopAt+1)
			for _, v := range first.State().Tensors {
				clear(v)
			}
			second := newFixtureOptimizer(t, f, ci)
			if err := second.Load(st); err != nil {
				t.Fatal(err)
			}
			for _, v := range st.Tensors {
				for i := range v {
					v[i] = float32(math.NaN())
				}
			}
			run(second, ps, stopAt, steps)
			for pi := range ps {
				for i := range ps[pi].Value {
					if math.Float32bits(ps[pi].Value[i]) != math.Float32bits(refPs[pi].Value[i]) {
						t.Fatalf("%s[%d]: resumed %v, uninterrupted %v", ps[pi].Name, i, ps[pi].Value[i], refPs[pi].Value[i])
					}
				}
			}
			if got := second.State().Step; got != steps {
				t.Errorf("State().Step = %d after resuming, want %d", got, steps)
			}
		})
	}
}

// TestParamIdentityByName checks that state follows names, not positions, and
// that a param first seen late starts its own step count, as in PyTorch.
func TestParamIdentityByName(t *testing.T) {
	mk := func(name string, v, g float32) *Param {
		return &Param{Name: name, Value: []float32{v, -v}, Grad: []float32{g, 2 * g}}
	}
	for _, newOpt := range []func() Optimizer{
		func() Optimizer {
			o, _ := NewAdamW(AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
			return o
		},
		func() Optimizer {
			o, _ := NewSGD(SGDConfig{Momentum: 0.9, WeightDecay: 0.01, Nesterov: true})
			return o
		},
	} {
		a, b := mk("a", 1, 0.5), mk("b", 2, -0.25)
		o := newOpt()
		steps := [][]*Param{{a}, {a, b}, {b, a}}
		for _, ps := range steps {
			if err := o.Step(ps, 1e-2); err != nil {
				t.Fatal(err)
			}
		}
		// Separately: a alone for three steps, b alone for two.
		a2, b2 := mk("a", 1, 0.5), mk("b", 2, -0.25)
		oa, ob := newOpt(), newOpt()
		for range 3 {
			if err := oa.Step([]*Param{a2}, 1e-2); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := ob.Step([]*Param{b2}, 1e-2); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(a.Value, a2.Value) || !slices.Equal(b.Value, b2.Value) {
			t.Errorf("%s: joint run a=%v b=%v, separate runs a=%v b=%v", o.Name(), a.Value, b.Value, a2.Value, b2.Value)
		}
	}
}

func TestStepErrors(t *testing.T) {
	good := func() *Param { return &Param{Name: "w", Value: []float32{1, 2}, Grad: []float32{0.1, 0.2}} }
	tests := []struct {
		name   string
		params func() []*Param
		lr     float64
		want   string
	}{
		{"grad length", func() []*Param {
			return []*Param{good(), {Name: "b", Value: []float32{1, 2, 3}, Grad: []float32{1}}}
		}, 1e-3, `param "b": grad has 1 elements, value has 3`},
		{"nil param", func() []*Param { return []*Param{good(), nil} }, 1e-3, "param 1 is nil"},
		{"no name", func() []*Param { p := good(); p.Name = ""; return []*Param{p} }, 1e-3, "param 0 has no name"},
		{"duplicate", func() []*Param { return []*Param{good(), good()} }, 1e-3, `params 0 and 1 are both named "w"`},
		{"negative lr", func() []*Param { return []*Param{good()} }, -1e-3, "learning rate -0.001: must be finite and >= 0"},
		{"NaN lr", func() []*Param { return []*Param{good()} }, math.NaN(), "learning rate NaN: must be finite and >= 0"},
		{"Inf lr", func() []*Param { return []*Param{good()} }, math.Inf(1), "learning rate +Inf: must be finite and >= 0"},
	}
	for _, tt := range tests {
		for _, o := range []Optimizer{mustAdamW(t), mustSGD(t)} {
			// One good step first, so that there is state to keep intact.
			if err := o.Step([]*Param{good()}, 1e-3); err != nil {
				t.Fatal(err)
			}
			before := o.State()
			ps := tt.params()
			vals := make([][]float32, len(ps))
			for i, p := range ps {
				if p != nil {
					vals[i] = slices.Clone(p.Value)
				}
			}
			err := o.Step(ps, tt.lr)
			want := "optim: " + o.Name() + ": step: " + tt.want
			if err == nil || err.Error() != want {
				t.Errorf("%s/%s: err = %v, want %q", tt.name, o.Name(), err, want)
			}
			for i, p := range ps {
				if p != nil && !slices.Equal(p.Value, vals[i]) {
					t.Errorf("%s/%s: failed step changed %q", tt.name, o.Name(), p.Name)
				}
			}
			if !stateEqual(before, o.State()) {
				t.Errorf("%s/%s: failed step changed the state", tt.name, o.Name())
			}
		}
	}
}

func mustAdamW(t testing.TB) *AdamW {
	o, err := NewAdamW(AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustSGD(t testing.TB) *SGD {
	o, err := NewSGD(SGDConfig{Momentum: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func stateEqual(a, b State) bool {
	if a.Step != b.Step || len(a.Scalars) != len(b.Scalars) || len(a.Tensors) != len(b.Tensors) {
		return false
	}
	for k, v := range a.Scalars {
		if w, ok := b.Scalars[k]; !ok || w != v {
			return false
		}
	}
	for k, v := range a.Tensors {
		if w, ok := b.Tensors[k]; !ok || !slices.Equal(v, w) {
			return false
		}
	}
	return true
}

func TestConfigValidation(t *testing.T) {
	adam := []struct {
		c    AdamWConfig
		want string
	}{
		{AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}, ""},
		{AdamWConfig{Beta1: 0, Beta2: 0, Eps: 1e-8}, ""},
		{AdamWConfig{Beta1: 1, Beta2: 0.999, Eps: 1e-8}, "optim: adamw: beta1 1: must be in [0, 1)"},
		{AdamWConfig{Beta1: -0.1, Beta2: 0.999, Eps: 1e-8}, "optim: adamw: beta1 -0.1: must be in [0, 1)"},
		{AdamWConfig{Beta1: math.NaN(), Beta2: 0.999, Eps: 1e-8}, "optim: adamw: beta1 NaN: must be in [0, 1)"},
		{AdamWConfig{Beta1: 0.9, Beta2: 1.5, Eps: 1e-8}, "optim: adamw: beta2 1.5: must be in [0, 1)"},
		{AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 0}, "optim: adamw: eps 0: must be finite and > 0"},
		{AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: math.Inf(1)}, "optim: adamw: eps +Inf: must be finite and > 0"},
		{AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: -0.01}, "optim: adamw: weight decay -0.01: must be finite and >= 0"},
	}
	for _, tt := range adam {
		_, err := NewAdamW(tt.c)
		if got := errString(err); got != tt.want {
			t.Errorf("NewAdamW(%+v) error = %q, want %q", tt.c, got, tt.want)
		}
	}
	sgd := []struct {
		c    SGDConfig
		want string
	}{
		{SGDConfig{}, ""},
		{SGDConfig{Momentum: 0.9, WeightDecay: 1e-4, Nesterov: true}, ""},
		{SGDConfig{Momentum: -0.9}, "optim: sgd: momentum -0.9: must be finite and >= 0"},
		{SGDConfig{Momentum: math.Inf(1)}, "optim: sgd: momentum +Inf: must be finite and >= 0"},
		{SGDConfig{WeightDecay: -1}, "optim: sgd: weight decay -1: must be finite and >= 0"},
		{SGDConfig{Nesterov: true}, "optim: sgd: nesterov momentum requires momentum > 0"},
	}
	for _, tt := range sgd {
		_, err := NewSGD(tt.c)
		if got := errString(err); got != tt.want {
			t.Errorf("NewSGD(%+v) error = %q, want %q", tt.c, got, tt.want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestLoadErrors(t *testing.T) {
	ok := func() State {
		return State{
			Step:    3,
			Scalars: map[string]float64{"w.step": 3},
			Tensors: map[string][]float32{"w.exp_avg": {1, 2}, "w.exp_avg_sq": {3, 4}},
		}
	}
	tests := []struct {
		name string
		edit func(*State)
		want string
	}{
		{"valid", func(*State) {}, ""},
		{"negative step", func(s *State) { s.Step = -1 }, "step -1 is negative"},
		{"unknown tensor", func(s *State) { s.Tensors["w.momentum_buffer"] = []float32{0, 0} }, `unknown tensor "w.momentum_buffer"`},
		{"tensor without slot", func(s *State) { s.Tensors["w"] = []float32{0, 0} }, `unknown tensor "w"`},
		{"unknown scalar", func(s *State) { s.Scalars["lr"] = 1 }, `unknown scalar "lr"`},
		{"fractional step", func(s *State) { s.Scalars["w.step"] = 2.5 }, `scalar "w.step" = 2.5: must be a whole number >= 1`},
		{"zero step", func(s *State) { s.Scalars["w.step"] = 0 }, `scalar "w.step" = 0: must be a whole number >= 1`},
		{"missing step", func(s *State) { delete(s.Scalars, "w.step") }, `scalar "w.step" is missing`},
		{"missing exp_avg", func(s *State) { delete(s.Tensors, "w.exp_avg") }, `tensor "w.exp_avg" is missing`},
		{"missing exp_avg_sq", func(s *State) { delete(s.Tensors, "w.exp_avg_sq") }, `tensor "w.exp_avg_sq" is missing`},
		{"slot sizes differ", func(s *State) { s.Tensors["w.exp_avg_sq"] = []float32{1, 2, 3} },
			`tensor "w.exp_avg_sq" has 3 elements, "w.exp_avg" has 2`},
	}
	for _, tt := range tests {
		o := mustAdamW(t)
		st := ok()
		tt.edit(&st)
		err := o.Load(st)
		want := tt.want
		if want != "" {
			want = "optim: adamw: load: " + want
		}
		if got := errString(err); got != want {
			t.Errorf("%s: error = %q, want %q", tt.name, got, want)
		}
		if err != nil && (o.State().Step != 0 || len(o.State().Tensors) != 0) {
			t.Errorf("%s: failed Load changed the optimizer", tt.name)
		}
	}

	sgdTests := []struct {
		name string
		cfg  SGDConfig
		st   State
		want string
	}{
		{"valid", SGDConfig{Momentum: 0.9}, State{Step: 1, Tensors: map[string][]float32{"w.momentum_buffer": {1}}}, ""},
		{"empty", SGDConfig{}, State{}, ""},
		{"scalar", SGDConfig{Momentum: 0.9}, State{Scalars: map[string]float64{"w.step": 1}}, `unknown scalar "w.step"`},
		{"unknown tensor", SGDConfig{Momentum: 0.9}, State{Tensors: map[string][]float32{"w.exp_avg": {1}}}, `unknown tensor "w.exp_avg"`},
		{"buffer without momentum", SGDConfig{}, State{Tensors: map[string][]float32{"w.momentum_buffer": {1}}},
			`tensor "w.momentum_buffer": momentum is 0, so there is no momentum buffer`},
	}
	for _, tt := range sgdTests {
		o, err := NewSGD(tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		want := tt.want
		if want != "" {
			want = "optim: sgd: load: " + want
		}
		if got := errString(o.Load(tt.st)); got != want {
			t.Errorf("sgd %s: error = %q, want %q", tt.name, got, want)
		}
	}
}

// TestLoadSizeMismatch covers the two places a state tensor can disagree with
// its param: at Load, when the optimizer already holds state for that name,
// and at the next Step otherwise (Load cannot see the params).
func TestLoadSizeMismatch(t *testing.T) {
	p := &Param{Name: "layers.0.q.lora_A", Value: []float32{1, 2, 3}, Grad: []float32{1, 1, 1}}
	bad2 := []float32{0, 0}

	adam := mustAdamW(t)
	err := adam.Load(State{Step: 1, Scalars: map[string]float64{p.Name + ".step": 1},
		Tensors: map[string][]float32{p.Name + ".exp_avg": bad2, p.Name + ".exp_avg_sq": bad2}})
	if err != nil {
		t.Fatal(err)
	}
	want := `optim: adamw: step: state tensor "layers.0.q.lora_A.exp_avg" has 2 elements, param has 3`
	if err := adam.Step([]*Param{p}, 1e-3); errString(err) != want {
		t.Errorf("Step after bad Load: %v, want %q", err, want)
	}
	if !slices.Equal(p.Value, []float32{1, 2, 3}) {
		t.Errorf("failed Step changed the param: %v", p.Value)
	}

	adam = mustAdamW(t)
	if err := adam.Step([]*Param{p}, 1e-3); err != nil {
		t.Fatal(err)
	}
	st := adam.State()
	st.Tensors[p.Name+".exp_avg"] = bad2
	st.Tensors[p.Name+".exp_avg_sq"] = bad2
	want = `optim: adamw: load: tensor "layers.0.q.lora_A.exp_avg" has 2 elements, the optimizer's has 3`
	if err := adam.Load(st); errString(err) != want {
		t.Errorf("Load over existing state: %v, want %q", err, want)
	}

	sgd := mustSGD(t)
	if err := sgd.Load(State{Tensors: map[string][]float32{p.Name + ".momentum_buffer": bad2}}); err != nil {
		t.Fatal(err)
	}
	want = `optim: sgd: step: state tensor "layers.0.q.lora_A.momentum_buffer" has 2 elements, param has 3`
	if err := sgd.Step([]*Param{p}, 1e-3); errString(err) != want {
		t.Errorf("SGD Step after bad Load: %v, want %q", err, want)
	}
	sgd = mustSGD(t)
	if err := sgd.Step([]*Param{p}, 1e-3); err != nil {
		t.Fatal(err)
	}
	want = `optim: sgd: load: tensor "layers.0.q.lora_A.momentum_buffer" has 2 elements, the optimizer's has 3`
	if err := sgd.Load(State{Tensors: map[string][]float32{p.Name + ".momentum_buffer": bad2}}); errString(err) != want {
		t.Errorf("SGD Load over existing state: %v, want %q", err, want)
	}
}

// TestEmptyParam: a zero-length param is legal and its (empty) state survives
// a round trip.
func TestEmptyParam(t *testing.T) {
	p := &Param{Name: "empty", Value: []float32{}, Grad: []float32{}}
	o := mustAdamW(t)
	if err := o.Step([]*Param{p}, 1e-3); err != nil {
		t.Fatal(err)
	}
	o2 := mustAdamW(t)
	if err := o2.Load(o.State()); err != nil {
		t.Fatal(err)
	}
	if !stateEqual(o.State(), o2.State()) {
		t.Error("empty param state did not round-trip")
	}
}

func TestFMA32(t *testing.T) {
	p2 := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	tests := []struct {
		a, b, c, want float32
	}{
		{2, 3, 4, 10},
		// (1+2^-12)^2 = 1 + 2^-11 + 2^-24: unfused the 2^-24 is lost.
		{1 + p2(-12), 1 + p2(-12), -1, p2(-11) + p2(-24)},
		// Exact sums 2^-70 either side of a float32 tie: a float64 sum lands
		// on the tie and then ties to even, the wrong way; fma32 must not.
		// 1 + 2^-23 - 2^-24(1-2^-46) = (1 + 2^-24) + 2^-70: rounds up.
		{p2(-24) * (1 + p2(-23)), -(1 - p2(-23)), 1 + p2(-23), 1 + p2(-23)},
		// 1 + 2^-23 + 2^-24(1-2^-46) = (1 + 3*2^-24) - 2^-70: rounds down.
		{p2(-24) * (1 + p2(-23)), 1 - p2(-23), 1 + p2(-23), 1 + p2(-23)},
		{-p2(-24) * (1 + p2(-23)), 1 - p2(-23), -(1 + p2(-23)), -(1 + p2(-23))},
		// The same in float32's subnormal range, where the midpoints are not
		// at bit 28 of the float64: (2^22+1)*2^-149 + 2^-150 - 2^-196.
		{p2(-75) * (1 + p2(-23)), p2(-75) * (1 - p2(-23)), (1 + p2(22)) * p2(-149), (1 + p2(22)) * p2(-149)},
		{float32(math.Inf(1)), 1, 1, float32(math.Inf(1))},
		{0, 0, -0.0, 0},
	}
	for _, tt := range tests {
		if got := fma32(tt.a, tt.b, tt.c); math.Float32bits(got) != math.Float32bits(tt.want) {
			t.Errorf("fma32(%g, %g, %g) = %g, want %g", tt.a, tt.b, tt.c, got, tt.want)
		}
	}
	if got := fma32(float32(math.NaN()), 1, 1); !math.IsNaN(float64(got)) {
		t.Errorf("fma32(NaN, 1, 1) = %v", got)
	}
}

// TestFMA32Random compares fma32 with exact big.Float arithmetic on
// random operands, biased towards the cases that break naive double
// rounding: products with few significant bits whose sums land near float32
// midpoints, and results in float32's subnormal range.
func TestFMA32Random(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	randF32 := func(minExp, maxExp int) float32 {
		m := 1 + float64(r.Uint32N(1<<23))/(1<<23)
		if r.IntN(4) == 0 {
			// Mantissas with only a few bits set make ties likely.
			m = 1 + float64(r.Uint32N(8))/(1<<23) + float64(r.Uint32N(2))/(1<<12)
		}
		x := float32(math.Ldexp(m, minExp+r.IntN(maxExp-minExp+1)))
		if r.IntN(2) == 0 {
			x = -x
		}
		return x
	}
	exact := func(a, b, c float32) float32 {
		x := new(big.Float).SetPrec(400).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetFloat64(float64(b)))
		x.Add(x, new(big.Float).SetFloat64(float64(c)))
		f, _ := x.Float32()
		return f
	}
	n := 200000
	if testing.Short() {
		n = 20000
	}
	var slow int
	for i := range n {
		var a, b, c float32
		switch i % 4 {
		case 0: // anything
			a, b, c = randF32(-60, 60), randF32(-60, 60), randF32(-120, 120)
		case 1: // product far below c: its low bits decide near-ties
			a, b, c = randF32(-20, 0), randF32(-30, -5), randF32(-2, 2)
		case 2: // cancellation
			a, b = randF32(-10, 10), randF32(-10, 10)
			c = -float32(float64(a)*float64(b)) * (1 + float32(r.IntN(5)-2)*(1.0/(1<<23)))
		case 3: // subnormal results
			a, b, c = randF32(-75, -60), randF32(-75, -60), randF32(-149, -120)
		}
		if _, ok := fma32Fast(a, b, c); !ok {
			slow++
		}
		got, want := fma32(a, b, c), exact(a, b, c)
		if got != want {
			t.Fatalf("fma32(%x, %x, %x) = %x, exact %x", math.Float32bits(a), math.Float32bits(b), math.Float32bits(c),
				math.Float32bits(got), math.Float32bits(want))
		}
	}
	t.Logf("%d cases, %d took the slow path", n, slow)
}
