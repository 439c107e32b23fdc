package optim

import (
	"fmt"
	"math"
	"sort"
)

// AdamWConfig holds AdamW's hyperparameters. The learning rate is passed to
// each Step so that a Schedule can drive it.
type AdamWConfig struct {
	Beta1, Beta2 float64 // moment decay rates, in [0, 1); PyTorch default 0.9, 0.999
	Eps          float64 // added to the denominator, > 0; PyTorch default 1e-8
	WeightDecay  float64 // decoupled weight decay, >= 0; PyTorch default 0.01
}

// AdamW is torch.optim.AdamW (amsgrad=False, maximize=False, foreach=False).
//
// State slots: tensors "<name>.exp_avg" and "<name>.exp_avg_sq" (the first and
// second moments) and scalar "<name>.step", the param's own step count, which
// like PyTorch's per-param step drives its bias correction.
type AdamW struct {
	cfg   AdamWConfig
	steps int64
	state map[string]*adamSlot
}

type adamSlot struct {
	step          int64
	expAvg, expSq []float32
}

// NewAdamW returns an AdamW optimizer with no state.
func NewAdamW(c AdamWConfig) (*AdamW, error) {
	if !(c.Beta1 >= 0 && c.Beta1 < 1) {
		return nil, fmt.Errorf("optim: adamw: beta1 %v: must be in [0, 1)", c.Beta1)
	}
	if !(c.Beta2 >= 0 && c.Beta2 < 1) {
		return nil, fmt.Errorf("optim: adamw: beta2 %v: must be in [0, 1)", c.Beta2)
	}
	if !(c.Eps > 0) || math.IsInf(c.Eps, 0) {
		return nil, fmt.Errorf("optim: adamw: eps %v: must be finite and > 0", c.Eps)
	}
	if !(c.WeightDecay >= 0) || math.IsInf(c.WeightDecay, 0) {
		return nil, fmt.Errorf("optim: adamw: weight decay %v: must be finite and >= 0", c.WeightDecay)
	}
	return &AdamW{cfg: c, state: make(map[string]*adamSlot)}, nil
}

// Name returns "adamw".
func (o *AdamW) Name() string { return "adamw" }

// Config returns the optimizer's hyperparameters.
func (o *AdamW) Config() AdamWConfig { return o.cfg }

// Step applies one AdamW update. See Optimizer.Step.
func (o *AdamW) Step(params []*Param, lr float64) error {
	if err := checkStep(params, lr); err != nil {
		return fmt.Errorf("optim: adamw: step: %w", err)
	}
	for _, p := range params {
		if s := o.state[p.Name]; s != nil {
			if err := checkSlotSize(p, "exp_avg", s.expAvg); err != nil {
				return fmt.Errorf("optim: adamw: step: %w", err)
			}
			if err := checkSlotSize(p, "exp_avg_sq", s.expSq); err != nil {
				return fmt.Errorf("optim: adamw: step: %w", err)
			}
		}
	}
	for _, p := range params {
		s := o.state[p.Name]
		if s == nil {
			s = &adamSlot{expAvg: make([]float32, len(p.Value)), expSq: make([]float32, len(p.Value))}
			o.state[p.Name] = s
		}
		s.step++
		o.update(p, s, lr)
	}
	o.steps++
	return nil
}

// update mirrors torch.optim.adamw._single_tensor_adamw. Python-side scalars
// are computed in float64 exactly as PyTorch does and rounded to float32 where
// a float32 kernel receives them; each tensor op rounds to float32, except
// that the multiply-adds PyTorch's CPU kernels fuse (add_ with alpha, addcmul_)
// are fused here too, via fma32. Explicit float32 conversions keep the Go
// compiler from fusing anything else (it may on arm64, ppc64 and s390x).
func (o *AdamW) update(p *Param, s *adamSlot, lr float64) {
	c := o.cfg
	bc1 := 1 - powInt(c.Beta1, s.step)
	bc2 := 1 - powInt(c.Beta2, s.step)
	var (
		decay    = float32(1 - lr*c.WeightDecay)
		b1       = float32(c.Beta1)
		a1       = float32(1 - c.Beta1)
		b2       = float32(c.Beta2)
		a2       = float32(1 - c.Beta2)
		negStep  = float32(-(lr / bc1))
		bc2Sqrt  = float32(math.Sqrt(bc2))
		eps      = float32(c.Eps)
		applyDec = c.WeightDecay != 0 // multiplying by 1 is the identity, even for NaN
	)
	val, grad := p.Value, p.Grad
	m, v := s.expAvg[:len(val)], s.expSq[:len(val)]
	for i, g := range grad[:len(val)] {
		x := val[i]
		if applyDec {
			x *= decay // param.mul_(1 - lr*wd)
		}
		// exp_avg.mul_(beta1).add_(grad, alpha=1-beta1): two kernels, the
		// second a fused self + alpha*other (unfused, a third of the fixture's
		// exp_avg values come out 1 ulp off). fma32 is spelled out because
		// this is the hot loop and fma32 is too big to inline.
		mb := float32(m[i] * b1)
		mi, ok := fma32Fast(g, a1, mb)
		if !ok {
			mi = fma32Slow(g, a1, mb)
		}
		m[i] = mi
		// exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2): the
		// compiled kernel evaluates self + (value*t1)*t2 with the final
		// multiply-add fused (unfused, a fifth of the fixture's exp_avg_sq
		// values come out 1 ulp off).
		vb, ag := float32(v[i]*b2), float32(a2*g)
		vi, ok := fma32Fast(ag, g, vb)
		if !ok {
			vi = fma32Slow(ag, g, vb)
		}
		v[i] = vi
		// denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
		den := float32(math.Sqrt(float64(v[i])))/bc2Sqrt + eps
		// param.addcdiv_(exp_avg, denom, value=-step_size): self + value*t1/t2
		val[i] = x + float32(negStep*m[i])/den
	}
}

// checkSlotSize reports a state tensor whose size does not match its param.
func checkSlotSize(p *Param, slot string, t []float32) error {
	if len(t) != len(p.Value) {
		return fmt.Errorf("state tensor %q has %d elements, param has %d", p.Name+"."+slot, len(t), len(p.Value))
	}
	return nil
}

// State exports the optimizer's state. See Optimizer.State.
func (o *AdamW) State() State {
	st := State{
		Step:    o.steps,
		Scalars: make(map[string]float64, len(o.state)),
		Tensors: make(map[string][]float32, 2*len(o.state)),
	}
	for name, s := range o.state {
		st.Scalars[name+".step"] = float64(s.step)
		st.Tensors[name+".exp_avg"] = clone32(s.expAvg)
		st.Tensors[name+".exp_avg_sq"] = clone32(s.expSq)
	}
	return st
}

// Load restores state exported by State. See Optimizer.Load.
func (o *AdamW) Load(st State) error {
	next, err := o.parseState(st)
	if err != nil {
		return fmt.Errorf("optim: adamw: load: %w", err)
	}
	o.steps, o.state = st.Step, next
	return nil
}

func (o *AdamW) parseState(st State) (map[string]*adamSlot, error) {
	if st.Step < 0 {
		return nil, fmt.Errorf("step %d is negative", st.Step)
	}
	next := make(map[string]*adamSlot)
	slot := func(name string) *adamSlot {
		s := next[name]
		if s == nil {
			s = &adamSlot{}
			next[name] = s
		}
		return s
	}
	// Sorted keys make the first error reported deterministic.
	for _, key := range sortedKeys(st.Scalars) {
		name, kind, ok := splitKey(key)
		if !ok || kind != "step" {
			return nil, fmt.Errorf("unknown scalar %q", key)
		}
		x := st.Scalars[key]
		if !(x >= 1 && x <= 1<<53) || x != math.Trunc(x) {
			return nil, fmt.Errorf("scalar %q = %v: must be a whole number >= 1", key, x)
		}
		slot(name).step = int64(x)
	}
	for _, key := range sortedKeys(st.Tensors) {
		name, kind, ok := splitKey(key)
		t := clone32(st.Tensors[key])
		switch {
		case ok && kind == "exp_avg":
			slot(name).expAvg = t
		case ok && kind == "exp_avg_sq":
			slot(name).expSq = t
		default:
			return nil, fmt.Errorf("unknown tensor %q", key)
		}
	}
	for _, name := range sortedKeys(next) {
		s := next[name]
		switch {
		case s.step == 0:
			return nil, fmt.Errorf("scalar %q is missing", name+".step")
		case s.expAvg == nil:
			return nil, fmt.Errorf("tensor %q is missing", name+".exp_avg")
		case s.expSq == nil:
			return nil, fmt.Errorf("tensor %q is missing", name+".exp_avg_sq")
		case len(s.expSq) != len(s.expAvg):
			return nil, fmt.Errorf("tensor %q has %d elements, %q has %d",
				name+".exp_avg_sq", len(s.expSq), name+".exp_avg", len(s.expAvg))
		}
		if cur := o.state[name]; cur != nil && len(cur.expAvg) != len(s.expAvg) {
			return nil, fmt.Errorf("tensor %q has %d elements, the optimizer's has %d",
				name+".exp_avg", len(s.expAvg), len(cur.expAvg))
		}
	}
	return next, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// AdamWBiasCorrections are the bias corrections 1 − β1^t and 1 − β2^t
// of a param at its step t, computed as Step computes them (β^t in
// double-double), for an optimizer that runs AdamW's update elsewhere (on
// a GPU) and must scale its steps as this one does.
func AdamWBiasCorrections(c AdamWConfig, t int64) (bc1, bc2 float64) {
	return 1 - powInt(c.Beta1, t), 1 - powInt(c.Beta2, t)
}
