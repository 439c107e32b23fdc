package optim

import (
	"fmt"
	"math"
)

// ClipGlobalNorm computes the L2 norm over all grads, as if they were one
// vector, and, if maxNorm > 0 and norm > maxNorm, scales every grad by
// maxNorm/(norm+1e-6) like PyTorch's clip_grad_norm_. It returns the norm
// before clipping. A non-finite norm (an Inf or NaN gradient) is returned as
// is and nothing is scaled, so the caller can skip the step (AMP loss scaling
// relies on this) instead of finding every gradient poisoned. Nil params are
// skipped.
//
// Squares are summed in float64 in param then element order: every float32
// square is exact in float64 and the order is fixed, so the result does not
// depend on how the caller parallelises anything else. PyTorch accumulates
// in float32, so its norm can be an ulp (of float32) off this one.
func ClipGlobalNorm(params []*Param, maxNorm float64) float64 {
	var sum float64
	for _, p := range params {
		if p == nil {
			continue
		}
		for _, g := range p.Grad {
			x := float64(g)
			sum += x * x
		}
	}
	norm := math.Sqrt(sum)
	if !(maxNorm > 0) || !(norm > maxNorm) || math.IsInf(norm, 0) {
		return norm
	}
	n32 := float32(norm) + float32(1e-6)
	if math.IsInf(float64(n32), 0) {
		// The norm is finite only in float64 (PyTorch's float32 norm would
		// be Inf and zero every grad): scale in float64, since the float32
		// factor would be subnormal and imprecise.
		coef := maxNorm / (norm + 1e-6)
		for _, p := range params {
			if p != nil {
				for i, g := range p.Grad {
					p.Grad[i] = float32(float64(g) * coef)
				}
			}
		}
		return norm
	}
	// maxNorm/(norm+1e-6) evaluated the way clip_grad_norm_ evaluates it, on
	// a float32 norm tensor, where max_norm / t is t.reciprocal() * max_norm.
	// Given the same float32 norm this scales grads bit-identically to
	// PyTorch; a float64 factor would be up to 2 ulp off per grad.
	coef := float32(1/n32) * float32(maxNorm)
	if coef >= 1 {
		return norm // PyTorch clamps to 1 and multiplies: x*1 == x
	}
	for _, p := range params {
		if p != nil {
			for i, g := range p.Grad {
				p.Grad[i] = g * coef
			}
		}
	}
	return norm
}

// Accumulate adds src into dst element-wise, e.g. one micro-batch's gradient
// into the accumulated gradient. The sum is rounded to float32 per element.
func Accumulate(dst, src []float32) error {
	if len(dst) != len(src) {
		return fmt.Errorf("optim: accumulate: dst has %d elements, src has %d", len(dst), len(src))
	}
	for i, x := range src {
		dst[i] += x
	}
	return nil
}

// Zero sets every param's gradient to zero, keeping its storage. Nil params
// are skipped.
func Zero(params []*Param) {
	for _, p := range params {
		if p != nil {
			clear(p.Grad)
		}
	}
}
