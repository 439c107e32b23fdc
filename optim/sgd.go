package optim

import (
	"fmt"
	"math"
)

// SGDConfig holds SGD's hyperparameters. The learning rate is passed to each
// Step so that a Schedule can drive it. Dampening is always 0.
type SGDConfig struct {
	Momentum    float64 // momentum factor, >= 0; 0 disables the momentum buffer
	WeightDecay float64 // L2 penalty added to the gradient (coupled), >= 0
	Nesterov    bool    // Nesterov momentum; requires Momentum > 0
}

// SGD is torch.optim.SGD (dampening=0, maximize=False, foreach=False).
//
// State slots: tensor "<name>.momentum_buffer" when Momentum > 0. As in
// PyTorch, a param's buffer is created on its first step as a copy of its
// (weight-decayed) gradient.
type SGD struct {
	cfg   SGDConfig
	steps int64
	bufs  map[string][]float32
}

// NewSGD returns an SGD optimizer with no state.
func NewSGD(c SGDConfig) (*SGD, error) {
	if !(c.Momentum >= 0) || math.IsInf(c.Momentum, 0) {
		return nil, fmt.Errorf("optim: sgd: momentum %v: must be finite and >= 0", c.Momentum)
	}
	if !(c.WeightDecay >= 0) || math.IsInf(c.WeightDecay, 0) {
		return nil, fmt.Errorf("optim: sgd: weight decay %v: must be finite and >= 0", c.WeightDecay)
	}
	if c.Nesterov && c.Momentum == 0 {
		return nil, fmt.Errorf("optim: sgd: nesterov momentum requires momentum > 0")
	}
	return &SGD{cfg: c, bufs: make(map[string][]float32)}, nil
}

// Name returns "sgd".
func (o *SGD) Name() string { return "sgd" }

// Config returns the optimizer's hyperparameters.
func (o *SGD) Config() SGDConfig { return o.cfg }

// Step applies one SGD update. See Optimizer.Step.
func (o *SGD) Step(params []*Param, lr float64) error {
	if err := checkStep(params, lr); err != nil {
		return fmt.Errorf("optim: sgd: step: %w", err)
	}
	for _, p := range params {
		if buf, ok := o.bufs[p.Name]; ok {
			if err := checkSlotSize(p, "momentum_buffer", buf); err != nil {
				return fmt.Errorf("optim: sgd: step: %w", err)
			}
		}
	}
	for _, p := range params {
		o.update(p, lr)
	}
	o.steps++
	return nil
}

// update mirrors torch.optim.sgd._single_tensor_sgd in float32, fusing the
// multiply-adds that PyTorch's add(other, alpha=a) kernel fuses.
func (o *SGD) update(p *Param, lr float64) {
	var (
		wd    = float32(o.cfg.WeightDecay)
		mom   = float32(o.cfg.Momentum)
		negLR = float32(-lr)
		nest  = o.cfg.Nesterov
		useWD = o.cfg.WeightDecay != 0
	)
	val, grad := p.Value, p.Grad[:len(p.Value)]
	if o.cfg.Momentum == 0 {
		for i, g := range grad {
			if useWD {
				g = fma32(val[i], wd, g) // d_p = grad.add(param, alpha=wd)
			}
			val[i] = fma32(g, negLR, val[i]) // param.add_(d_p, alpha=-lr)
		}
		return
	}
	buf, ok := o.bufs[p.Name]
	if !ok {
		buf = make([]float32, len(val))
		o.bufs[p.Name] = buf
	}
	buf = buf[:len(val)]
	for i, g := range grad {
		if useWD {
			g = fma32(val[i], wd, g)
		}
		if ok {
			buf[i] = float32(buf[i]*mom) + g // buf.mul_(momentum).add_(d_p)
		} else {
			buf[i] = g // first step: buf = clone(d_p)
		}
		d := buf[i]
		if nest {
			d = fma32(buf[i], mom, g) // d_p = d_p.add(buf, alpha=momentum)
		}
		val[i] = fma32(d, negLR, val[i])
	}
}

// State exports the optimizer's state. See Optimizer.State.
func (o *SGD) State() State {
	st := State{
		Step:    o.steps,
		Scalars: map[string]float64{},
		Tensors: make(map[string][]float32, len(o.bufs)),
	}
	for name, buf := range o.bufs {
		st.Tensors[name+".momentum_buffer"] = clone32(buf)
	}
	return st
}

// Load restores state exported by State. See Optimizer.Load.
func (o *SGD) Load(st State) error {
	next, err := o.parseState(st)
	if err != nil {
		return fmt.Errorf("optim: sgd: load: %w", err)
	}
	o.steps, o.bufs = st.Step, next
	return nil
}

func (o *SGD) parseState(st State) (map[string][]float32, error) {
	if st.Step < 0 {
		return nil, fmt.Errorf("step %d is negative", st.Step)
	}
	if len(st.Scalars) > 0 {
		return nil, fmt.Errorf("unknown scalar %q", sortedKeys(st.Scalars)[0])
	}
	next := make(map[string][]float32, len(st.Tensors))
	for _, key := range sortedKeys(st.Tensors) {
		name, slot, ok := splitKey(key)
		if !ok || slot != "momentum_buffer" {
			return nil, fmt.Errorf("unknown tensor %q", key)
		}
		if o.cfg.Momentum == 0 {
			// The buffer would be silently ignored: most likely the state
			// was saved with a different config.
			return nil, fmt.Errorf("tensor %q: momentum is 0, so there is no momentum buffer", key)
		}
		t := st.Tensors[key]
		if cur, ok := o.bufs[name]; ok && len(cur) != len(t) {
			return nil, fmt.Errorf("tensor %q has %d elements, the optimizer's has %d", key, len(t), len(cur))
		}
		next[name] = clone32(t)
	}
	return next, nil
}
