package vkengine

import (
	"fmt"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// attentionShape is the device shape of an attention op (either CPU
// kernel, nn.AttentionFull or nn.AttentionTiled: both compute the same
// function with the same rounding points), with its positions uploaded
// at every run when the graph packs documents.
func attentionShape(p *Program, spec nn.OpSpec) (vulkan.AttentionShape, error) {
	a, ok := spec.Attrs.(nn.AttentionAttrs)
	if !ok {
		return vulkan.AttentionShape{}, fmt.Errorf("attention attributes are %T", spec.Attrs)
	}
	if a.HeadDim > vulkan.AttentionMaxHeadDim {
		return vulkan.AttentionShape{}, fmt.Errorf("%w: attention's head dimension %d (the kernels take up to %d)", ErrUnsupported, a.HeadDim, vulkan.AttentionMaxHeadDim)
	}
	s := vulkan.AttentionShape{Batch: a.Batch, SeqLen: a.SeqLen, Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim,
		Window: a.Window, Scores: rounding(a.Scores), Softmax: rounding(a.Softmax), Values: rounding(a.Values)}
	// The products may run on tensor cores (vulkan's tensor-core attention,
	// where the device has one) when every operand is a value of one 16-bit
	// format: q and k of the scores', v of the values', the same format,
	// and dO rounded to the output's (nn's gradIn rounds the gradient an op
	// receives to its output format); P and dS are then rounded to it too.
	if a.Scores == a.Values && a.Scores != amp.FP32 && len(spec.In) == 3 &&
		spec.In[0] == a.Scores && spec.In[1] == a.Scores && spec.In[2] == a.Values && spec.Out == a.Values {
		s.Operands = rounding(a.Scores)
	}
	if a.Positions != nil {
		b, err := p.HostInts(a.Positions)
		if err != nil {
			return s, fmt.Errorf("positions: %w", err)
		}
		s.Positions = b
	}
	return s, nil
}

// attentionStats is the buffer the forward op fills with each query
// row's softmax max and reciprocal sum, for its backward op.
func attentionStats(p *Program, id int, s vulkan.AttentionShape) (*vulkan.Buffer, error) {
	return p.Saved(id, "attention.stats", 4*s.StatsLen())
}

// lowerAttention is causal grouped-query attention; the inputs are q, k
// and v, already in their formats (the graph casts them).
func lowerAttention(p *Program, nd *node) (recordFunc, error) {
	s, err := attentionShape(p, nd.spec)
	if err != nil {
		return nil, err
	}
	stats, err := attentionStats(p, nd.spec.ID, s)
	if err != nil {
		return nil, err
	}
	out := rounding(nd.spec.Out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		return p.e.Kernels.AttentionForward(r, s, nd.in[0], nd.in[1], nd.in[2], stats, nd.out, out)
	}, nil
}

// lowerAttentionBackward computes dQ, dK and dV (those wanted) from the
// forward's stats; the inputs are q, k, v and the output's gradient.
// With grouped-query attention each head's dK and dV are rounded to
// their input's format before the group's sum when that format is
// 16-bit, as the CPU kernels do.
func lowerAttentionBackward(p *Program, nd *node) (recordFunc, error) {
	in := nd.spec.In
	if len(in) != 3 || len(nd.in) != 4 || len(nd.grads) != 3 {
		return nil, fmt.Errorf("attention backward with %d formats, %d inputs and %d gradients (want 3, 4, 3)", len(in), len(nd.in), len(nd.grads))
	}
	s, err := attentionShape(p, *nd.spec.Forward)
	if err != nil {
		return nil, err
	}
	stats, err := attentionStats(p, nd.spec.ID, s)
	if err != nil {
		return nil, err
	}
	rowSum, err := p.alloc(4 * s.RowSumLen())
	if err != nil {
		return nil, err
	}
	grouped := s.Heads > s.KVHeads
	var headGrads *vulkan.Buffer
	if n := s.HeadGradsLen(); n > 0 {
		// Scratch within one dispatch sequence: the backward ops of a
		// program run one after another, so those of one shape share it.
		if headGrads, err = p.Saved(-1, fmt.Sprintf("attention.headgrads.%d", n), 4*n); err != nil {
			return nil, err
		}
	}
	g := vulkan.AttentionGrads{DO: nd.in[3], RowSum: rowSum, HeadGrads: headGrads, DQ: nd.grads[0], DK: nd.grads[1], DV: nd.grads[2],
		DQRound: rounding(in[0]), DKRound: rounding(in[1]), DVRound: rounding(in[2]),
		RoundHeadsK: grouped && in[1] != amp.FP32, RoundHeadsV: grouped && in[2] != amp.FP32}
	// Counting, the gradients are rounded after the kernels, each rounding
	// counted: the same values.
	g.Unrounded = p.top().counts != nil
	if g.DK != nil && g.DV != nil { // the dK/dV kernel's work: joint or split
		top := p.top()
		top.attentions = vulkan.AddAttention(top.attentions, s)
	}
	sizes := []int{s.Batch * s.SeqLen * s.Heads * s.HeadDim, s.Batch * s.SeqLen * s.KVHeads * s.HeadDim, s.Batch * s.SeqLen * s.KVHeads * s.HeadDim}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := p.e.Kernels.AttentionBackward(r, s, nd.in[0], nd.in[1], nd.in[2], stats, g); err != nil {
			return err
		}
		if !g.Unrounded {
			return nil
		}
		for i, d := range nd.grads {
			if d != nil {
				if err := p.roundGrad(r, d, sizes[i], rounding(in[i])); err != nil {
					return err
				}
			}
		}
		return nil
	}, nil
}
