package vkengine

import (
	"fmt"

	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// attrsAs is s's attributes as an A, or an error naming what they are
// (s is nil for a backward op whose forward op has no spec).
func attrsAs[A any](s *nn.OpSpec) (A, error) {
	var a A
	if s == nil {
		return a, fmt.Errorf("no forward op spec")
	}
	a, ok := s.Attrs.(A)
	if !ok {
		return a, fmt.Errorf("%s has attributes %T, want %T", s.Kind, s.Attrs, a)
	}
	return a, nil
}

// thenRound records compute, then the rounding of the node's n output
// values to the op's format: a lowering that reads no Pass. grad says the
// value is a gradient, whose rounding is counted (Program.roundGrad).
func thenRound(p *Program, nd *node, n int, grad bool, compute func(*vulkan.Recorder) error) recordFunc {
	rnd := rounding(nd.spec.Out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := compute(r); err != nil {
			return err
		}
		if grad {
			return p.roundGrad(r, nd.out, n, rnd)
		}
		return p.e.Kernels.Round(r, nd.out, n, rnd)
	}
}

// lowerSwiGLU is y = silu(gate)·up, rounded to the op's format.
func lowerSwiGLU(p *Program, nd *node) (recordFunc, error) {
	a, err := attrsAs[nn.PointwiseAttrs](&nd.spec)
	if err != nil {
		return nil, err
	}
	n := prod(a.Shape)
	return thenRound(p, nd, n, false, func(r *vulkan.Recorder) error {
		return p.e.Kernels.SwiGLU(r, nd.in[0], nd.in[1], nd.out, n)
	}), nil
}

// lowerSwiGLUBackward computes d gate and d up from gate, up and the
// output's gradient (the graph inputs, in that order), each rounded to
// its input's format.
func lowerSwiGLUBackward(p *Program, nd *node) (recordFunc, error) {
	a, err := attrsAs[nn.PointwiseAttrs](nd.spec.Forward)
	if err != nil {
		return nil, err
	}
	n := prod(a.Shape)
	if len(nd.in) != 3 || len(nd.grads) != 2 {
		return nil, fmt.Errorf("%d inputs and %d gradients; want gate, up, g and two", len(nd.in), len(nd.grads))
	}
	if nd.grads[0] == nil && nd.grads[1] == nil {
		return nil, nil
	}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := p.e.Kernels.SwiGLUBackward(r, nd.in[0], nd.in[1], nd.in[2], nd.grads[0], nd.grads[1], n); err != nil {
			return err
		}
		return roundGrads(p, r, nd, n)
	}, nil
}

// roundGrads rounds each of a fused backward op's n-value gradients to
// its input's format.
func roundGrads(p *Program, r *vulkan.Recorder, nd *node, n int) error {
	for i, g := range nd.grads {
		if g != nil {
			if err := p.roundGrad(r, g, n, rounding(nd.spec.In[i])); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropoutMask is the saved mask of dropout op a: the forward pass draws
// it, the backward pass reads it.
func dropoutMask(p *Program, id int, a nn.DropoutAttrs) (*vulkan.Buffer, vulkan.DropoutMask, error) {
	m := vulkan.DropoutMask{Rows: a.Rows, Cols: a.Cols, ID: a.NoiseID, RowOffset: a.RowOffset, P: a.P}
	buf, err := p.Saved(id, "mask", 4*m.Words())
	return buf, m, err
}

// lowerDropout draws the mask for the pass's noise key and applies it:
// x·1/(1−p) where kept, 0 elsewhere, rounded to the op's format. Key 0
// (evaluation) passes x through, as the CPU does.
func lowerDropout(p *Program, nd *node) (recordFunc, error) {
	a, err := attrsAs[nn.DropoutAttrs](&nd.spec)
	if err != nil {
		return nil, err
	}
	mask, m, err := dropoutMask(p, nd.spec.ID, a)
	if err != nil {
		return nil, err
	}
	n, rnd := a.Rows*a.Cols, rounding(nd.spec.Out)
	scale := float32(1 / (1 - a.P)) // the CPU's T(1/(1−p))
	return func(r *vulkan.Recorder, pass nn.Pass) error {
		ks := p.e.Kernels
		if pass.Noise == 0 {
			return ks.Scale(r, nd.in[0], nd.out, n, 1, rnd)
		}
		m.Key = pass.Noise
		if err := ks.Dropout(r, m, mask); err != nil {
			return err
		}
		if err := ks.DropoutApply(r, mask, nd.in[0], nd.out, a.Rows, a.Cols, scale); err != nil {
			return err
		}
		return ks.Round(r, nd.out, n, rnd)
	}, nil
}

// lowerDropoutBackward passes the output's gradient through the forward
// pass's mask with the same scale (through unchanged when the key is 0),
// rounded to x's format.
func lowerDropoutBackward(p *Program, nd *node) (recordFunc, error) {
	a, err := attrsAs[nn.DropoutAttrs](nd.spec.Forward)
	if err != nil {
		return nil, err
	}
	if len(nd.in) != 1 || len(nd.grads) != 1 {
		return nil, fmt.Errorf("%d inputs and %d gradients; want g and one", len(nd.in), len(nd.grads))
	}
	if nd.grads[0] == nil {
		return nil, nil
	}
	mask, _, err := dropoutMask(p, nd.spec.ID, a)
	if err != nil {
		return nil, err
	}
	n, rnd := a.Rows*a.Cols, rounding(nd.spec.In[0])
	scale := float32(1 / (1 - a.P))
	return func(r *vulkan.Recorder, pass nn.Pass) error {
		ks := p.e.Kernels
		if pass.Noise == 0 {
			return p.scaleGrad(r, nd.in[0], nd.grads[0], n, 1, rnd)
		}
		if err := ks.DropoutApply(r, mask, nd.in[0], nd.grads[0], a.Rows, a.Cols, scale); err != nil {
			return err
		}
		return p.roundGrad(r, nd.grads[0], n, rnd)
	}, nil
}

// lowerBias is y + bias broadcast over the rows, rounded to the op's
// format. The gradient of y is the output's, rounded already (no op).
func lowerBias(p *Program, nd *node) (recordFunc, error) {
	a, err := attrsAs[nn.BiasAttrs](&nd.spec)
	if err != nil {
		return nil, err
	}
	return thenRound(p, nd, a.N*a.D, false, func(r *vulkan.Recorder) error {
		return p.e.Kernels.BiasAdd(r, nd.in[0], nd.in[1], nd.out, a.N, a.D)
	}), nil
}

// lowerBiasGrad is the bias's gradient: the column sums of the output's
// gradient in the CPU's order, rounded to the bias's format.
func lowerBiasGrad(p *Program, nd *node) (recordFunc, error) {
	a, err := attrsAs[nn.BiasAttrs](&nd.spec)
	if err != nil {
		return nil, err
	}
	return thenRound(p, nd, a.D, true, func(r *vulkan.Recorder) error {
		return p.e.Kernels.BiasGrad(r, nd.in[0], nd.out, a.N, a.D, a.RowChunk)
	}), nil
}
