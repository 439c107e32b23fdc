package vulkan

import (
	"fmt"
	"math"
)

// The optimizer's kernels beside AdamW and GradStats: deterministic sums
// (a loss's mean, a sum of squares) and SGD.

// reduceGroups caps the workgroups of a sum's first pass: the second
// pass adds at most reduceGroups/256 = 16 partials per invocation.
const reduceGroups = 4096

// reduceShape is the first pass's workgroup count G and span L for n
// values: a function of n alone, so the summation order is too.
func reduceShape(n int) (groups, span int) {
	groups = min(reduceGroups, max(1, (n+255)/256))
	span = (n + groups - 1) / groups
	return groups, span
}

// ReduceScratch is the number of fp32 values the scratch buffer of a
// sum of n values (Sum, SumSquares) must hold: one partial per workgroup.
func ReduceScratch(n int) int {
	g, _ := reduceShape(n)
	return g
}

// ReduceDepth is the most additions any value passes through in a sum of
// n values (shaders/optim_reduce.comp): the fp32 sum is within
// γ_k·Σ|terms| of the exact one, k = ReduceDepth(n) (plus one rounding
// for a square and one for a scale).
func ReduceDepth(n int) int {
	g, l := reduceShape(n)
	return (l+255)/256 + (g+255)/256 + 16
}

// Sum records out[at] = scale·Σ x[i] over n fp32 values, with scratch
// holding ReduceScratch(n) values, deterministically: the order of the
// additions depends on n alone.
func (ks *Kernels) Sum(r *Recorder, x *Buffer, n int, scale float32, scratch, out *Buffer, at int) error {
	return ks.reduce(r, "Sum", false, x, n, scale, scratch, out, at)
}

// SumSquares records out[at] = Σ x[i]² over n fp32 values, as Sum does:
// a parameter's share of the global gradient norm's square.
func (ks *Kernels) SumSquares(r *Recorder, x *Buffer, n int, scratch, out *Buffer, at int) error {
	return ks.reduce(r, "SumSquares", true, x, n, 1, scratch, out, at)
}

func (ks *Kernels) reduce(r *Recorder, name string, square bool, x *Buffer, n int, scale float32, scratch, out *Buffer, at int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: %s of %d values: %w", name, n, err) }
	if n < 0 || n > math.MaxUint32-256 || at < 0 {
		return wrap(fmt.Errorf("bad count or output index %d", at))
	}
	groups, span := reduceShape(n)
	if err := extent("x", x, 0, 1, max(n, 1), max(n, 1), 4); err != nil {
		return wrap(err)
	}
	if err := extent("scratch", scratch, 0, 1, groups, groups, 4); err != nil {
		return wrap(err)
	}
	if err := extent("out", out, at, 1, 1, 1, 4); err != nil {
		return wrap(err)
	}
	if scratch == x || scratch == out {
		return wrap(fmt.Errorf("scratch must be a buffer of its own"))
	}
	k, err := ks.kernel("optim_reduce.spv", 3, 7*4)
	if err != nil {
		return wrap(err)
	}
	bufs := []*Buffer{x, scratch, out}
	for pass := range 2 {
		push := pushWords(n, pass, square, groups, span, at, scale)
		gx := uint32(groups)
		if pass == 1 {
			gx = 1
		}
		if err := r.Dispatch(k, bufs, push, gx, 1, 1); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// SGDStep is one SGD step's hyperparameters, as optim.SGDConfig and the
// learning rate. First is set on a parameter's first step with momentum,
// when the momentum buffer starts as a copy of the (decayed) gradient.
type SGDStep struct {
	LR, Momentum, WeightDecay float64
	Nesterov, First           bool
}

// SGD records one SGD step over n fp32 parameters param with gradients
// grad, updating param and the momentum buffer (nil when Momentum is 0)
// in place, in the order and with the fused multiply-adds of optim.SGD
// (to an ulp of each product: Vulkan may leave fma unfused).
func (ks *Kernels) SGD(r *Recorder, s SGDStep, param, grad, momentum *Buffer, n int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: SGD over %d values: %w", n, err) }
	if n < 0 || n > math.MaxUint32 {
		return wrap(fmt.Errorf("bad count"))
	}
	if !(s.Momentum >= 0) || math.IsInf(s.Momentum, 0) || !(s.WeightDecay >= 0) || math.IsInf(s.WeightDecay, 0) {
		return wrap(fmt.Errorf("momentum %g and weight decay %g must be finite and ≥ 0", s.Momentum, s.WeightDecay))
	}
	if s.Nesterov && s.Momentum == 0 {
		return wrap(fmt.Errorf("nesterov momentum requires momentum > 0"))
	}
	useMomentum := s.Momentum != 0
	if useMomentum == (momentum == nil) {
		return wrap(fmt.Errorf("a momentum buffer is needed exactly when momentum is not 0 (momentum %g)", s.Momentum))
	}
	if n == 0 {
		return nil
	}
	bufs := []*Buffer{param, grad, momentum}
	if !useMomentum {
		bufs[2] = grad // bound, never written
	}
	for i, b := range bufs {
		if err := extent([]string{"param", "grad", "momentum"}[i], b, 0, 1, n, n, 4); err != nil {
			return wrap(err)
		}
	}
	if param == grad || (useMomentum && (momentum == param || momentum == grad)) {
		return wrap(fmt.Errorf("param, grad and the momentum buffer must be separate buffers"))
	}
	k, err := ks.kernel("optim_sgd.spv", 3, 8*4)
	if err != nil {
		return wrap(err)
	}
	push := pushWords(n, s.WeightDecay != 0, useMomentum, s.First, s.Nesterov,
		float32(s.WeightDecay), float32(s.Momentum), float32(-s.LR))
	if err := r.Dispatch(k, bufs, push, ks.groups1D(n), 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}
