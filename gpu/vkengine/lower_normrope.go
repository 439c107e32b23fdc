package vkengine

import (
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// lowerRMSNorm is y = w ⊙ x·rstd per row (RMSNormHeads' rows are heads),
// rounded to the op's format. The CPU sums the squares in float64, the
// kernel in fp32: see gpu/vulkan/shaders/rmsnorm.comp for the bound.
func lowerRMSNorm(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.RMSNormAttrs)
	rnd := rounding(nd.spec.Out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := p.e.Kernels.RMSNorm(r, nd.in[0], nd.in[1], nd.out, a.Rows, a.D, a.Eps); err != nil {
			return err
		}
		return p.e.Kernels.Round(r, nd.out, a.Rows*a.D, rnd)
	}, nil
}

// lowerRMSNormBackward computes dx and dw, each only when needed, rounded
// to x's and w's formats. The graph inputs are x, w and the output's
// gradient g. rstd is recomputed per row, as the CPU does, rather than
// saved by the forward: a row's sums are one pass over values the
// backward reads anyway.
func lowerRMSNormBackward(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Forward.Attrs.(nn.RMSNormAttrs)
	x, w, g := nd.in[0], nd.in[1], nd.in[2]
	dx, dw := nd.grads[0], nd.grads[1]
	rstd, err := p.alloc(4 * a.Rows)
	if err != nil {
		return nil, err
	}
	var part *vulkan.Buffer
	if dw != nil {
		if part, err = p.alloc(4 * vulkan.RMSNormWeightGradScratch(a.Rows, a.D)); err != nil {
			return nil, err
		}
	}
	ks := p.e.Kernels
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := ks.RMSNormBackward(r, x, w, g, dx, rstd, a.Rows, a.D, a.Eps); err != nil {
			return err
		}
		if dx != nil {
			if err := ks.Round(r, dx, a.Rows*a.D, rounding(nd.spec.In[0])); err != nil {
				return err
			}
		}
		if dw == nil {
			return nil
		}
		if err := ks.RMSNormWeightGrad(r, x, g, rstd, part, dw, a.Rows, a.D); err != nil {
			return err
		}
		return ks.Round(r, dw, a.D, rounding(nd.spec.In[1]))
	}, nil
}
