package vkengine

import (
	"fmt"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/quant"
)

// lowerFunc compiles one node: it may allocate what the node keeps
// (Program.Saved) and returns what to record at each run (nil: nothing).
type lowerFunc func(p *Program, nd *node) (recordFunc, error)

// lowering is the lowering of an op kind (nn.OpSpec.Kind).
func lowering(kind string) (lowerFunc, bool) {
	if strings.HasSuffix(kind, ".grad_in") {
		return lowerRound, true
	}
	switch kind {
	case "cast", "share":
		return lowerRound, true
	case "cast.backward":
		return lowerCastBackward, true
	case "sum":
		return lowerSum, true
	case "add":
		return lowerAdd, true
	case "add.backward":
		return lowerAddBackward, true
	case "linear":
		return lowerLinear, true
	case "linear.dx":
		return lowerLinearDX, true
	case "linear.dw":
		return lowerLinearDW, true
	// rmsnorm, rope, embedding
	case "rmsnorm":
		return lowerRMSNorm, true
	case "rmsnorm.backward":
		return lowerRMSNormBackward, true
	case "rope":
		return lowerRope, true
	case "rope.backward":
		return lowerRopeBackward, true
	case "embedding":
		return lowerEmbedding, true
	case "embedding.backward":
		return lowerEmbeddingBackward, true
	// lm_head_loss, cross_entropy
	case "lm_head_loss":
		return lowerHeadLoss, true
	case "lm_head_loss.backward":
		return lowerHeadLossBackward, true
	case "cross_entropy":
		return lowerCrossEntropy, true
	case "cross_entropy.backward":
		return lowerCrossEntropyBackward, true
	// a checkpointed layer
	case "layer":
		return lowerLayer, true
	case "layer.backward":
		return lowerLayerBackward, true
	// sequence_logprobs, host_loss
	case "sequence_logprobs":
		return lowerSequenceLogProbs, true
	case "sequence_logprobs.backward":
		return lowerSequenceLogProbsBackward, true
	case "host_loss":
		return lowerHostLoss, true
	case "host_loss.backward":
		return lowerHostLossBackward, true
	// dora
	case "dora_norm":
		return lowerDoRANorm, true
	case "dora":
		return lowerDoRA, true
	case "dora.backward":
		return lowerDoRABackward, true
	// attention
	case "attention":
		return lowerAttention, true
	case "attention.backward":
		return lowerAttentionBackward, true
	// decoding: attention over a key/value cache, a head on some rows
	case "attention_cache":
		return lowerAttentionCache, true
	case "rows":
		return lowerRows, true
	// silu, dropout, bias
	case "silu":
		return lowerSwiGLU, true
	case "silu.backward":
		return lowerSwiGLUBackward, true
	case "dropout":
		return lowerDropout, true
	case "dropout.backward":
		return lowerDropoutBackward, true
	case "bias":
		return lowerBias, true
	case "bias.db":
		return lowerBiasGrad, true
	}
	return nil, false
}

// lowerSum is gorgonia's elementwise + (gradients of a node read twice).
func lowerSum(p *Program, nd *node) (recordFunc, error) {
	n := prod(nd.n.Shape())
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		return p.e.Kernels.AddScaled(r, nd.in[0], nd.in[1], nd.out, n, 1, false, vulkan.NoRounding)
	}, nil
}

// lowerAdd is x + s·y, PEFT's rounding of the scaled branch included.
func lowerAdd(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.PointwiseAttrs)
	n := prod(a.Shape)
	rnd := rounding(nd.spec.Out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		return p.e.Kernels.AddScaled(r, nd.in[0], nd.in[1], nd.out, n, float32(a.Scale), true, rnd)
	}, nil
}

// lowerAddBackward: dx = g, dy = s·g, each rounded to its input's format.
// The graph inputs are x, y and the output's gradient g. A gradient the
// graph hands on as g itself (wanted, not computed here: g is already a
// value of its format) counts as rounded, as the CPU counts it.
func lowerAddBackward(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Forward.Attrs.(nn.PointwiseAttrs)
	n := prod(a.Shape)
	g := nd.in[len(nd.in)-1]
	passed := 0
	for i, w := range nd.spec.Forward.Wrt {
		if w && nd.grads[i] == nil && nd.spec.In[i] != amp.FP32 {
			passed += n
		}
	}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		for i, s := range []float32{1, float32(a.Scale)} {
			if nd.grads[i] != nil {
				if err := p.scaleGrad(r, g, nd.grads[i], n, s, rounding(nd.spec.In[i])); err != nil {
					return err
				}
			}
		}
		p.countPassed(passed)
		return nil
	}, nil
}

// linearWeight is a linear's W as its GEMM reads it: the graph's buffer
// (fp32 values, or 16-bit ones the GEMM widens exactly), or, for a 16-bit
// weight computed in the other 16-bit format (fp16 weights under a bf16
// policy, or the reverse), an fp32 copy widened and rounded to the compute
// format at each run, as nn's weights16 converts it. The copy is kept per
// weight, shared by the linear and its dx: both write the same values.
// A 4-bit weight is its blob as uploaded, which the GEMM reads in place,
// dequantizing each element as it loads a tile (q4).
type linearWeight struct {
	buf     *vulkan.Buffer
	b16     bool
	half    vulkan.Half
	q4      *vulkan.Q4Weight
	prepare func(r *vulkan.Recorder) error // nil: nothing to convert
}

func newLinearWeight(p *Program, nd *node, a nn.LinearAttrs) (linearWeight, error) {
	lw := linearWeight{buf: nd.in[1]}
	if a.W4 {
		q4, err := q4Weight(nd.inN[1], rounding(a.Compute))
		if err != nil {
			return lw, err
		}
		if q4.Elements != a.Out*a.In {
			return lw, fmt.Errorf("4-bit weight %s: %d elements for a %d×%d linear", nd.inN[1].Name(), q4.Elements, a.Out, a.In)
		}
		lw.q4 = q4
		return lw, nil
	}
	if !a.W16 {
		return lw, nil
	}
	h, err := half(a.W16Format)
	if err != nil {
		return lw, fmt.Errorf("16-bit weight: %w", err)
	}
	lw.half = h
	if a.Compute == amp.FP32 || a.Compute == a.W16Format {
		lw.b16 = true // the GEMM widens the bits exactly
		return lw, nil
	}
	n := a.Out * a.In
	wide, err := p.Saved(-1-int(nd.inN[1].ID()), "widened to "+a.Compute.String(), 4*n)
	if err != nil {
		return lw, err
	}
	bits, hf, rnd := lw.buf, lw.half, rounding(a.Compute)
	lw.buf = wide
	lw.prepare = func(r *vulkan.Recorder) error { return p.e.Kernels.Widen16(r, hf, bits, wide, n, rnd) }
	return lw, nil
}

// sharedOperands is the 16-bit format both of a product's operands have
// (their values were rounded there), which lets the GEMM run it on that
// format's tensor cores; NoRounding, the fp32 kernel, otherwise.
func sharedOperands(a nn.LinearAttrs) vulkan.Rounding {
	return shared(rounding(a.Operands[0]), rounding(a.Operands[1]))
}

// shared is the format of two operands when they have the same one.
func shared(a, b vulkan.Rounding) vulkan.Rounding {
	if a != b {
		return vulkan.NoRounding
	}
	return a
}

// lowerLinear is y[N, Out] = x[N, In]·Wᵀ, rounded to the op's format.
func lowerLinear(p *Program, nd *node) (recordFunc, error) {
	return lowerWeightProduct(p, nd, func(a nn.LinearAttrs) vulkan.GemmArgs {
		return vulkan.GemmArgs{M: a.N, N: a.Out, K: a.In, TransB: true, Lda: a.In, Ldb: a.In, Ldc: a.Out}
	})
}

// lowerLinearDX is dx[N, In] = g[N, Out]·W[Out, In], rounded to x's format.
func lowerLinearDX(p *Program, nd *node) (recordFunc, error) {
	return lowerWeightProduct(p, nd, func(a nn.LinearAttrs) vulkan.GemmArgs {
		return vulkan.GemmArgs{M: a.N, N: a.In, K: a.Out, Lda: a.Out, Ldb: a.In, Ldc: a.In}
	})
}

// lowerWeightProduct lowers a product of the node's first input with a
// linear's weight W, its second, as shape gives it (sizes, transposes and
// leading dimensions), rounded to the op's format; W is read as
// newLinearWeight prepares it.
func lowerWeightProduct(p *Program, nd *node, shape func(nn.LinearAttrs) vulkan.GemmArgs) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.LinearAttrs)
	w, err := newLinearWeight(p, nd, a)
	if err != nil {
		return nil, err
	}
	g := shape(a)
	g.Alpha, g.A, g.B, g.C, g.B16, g.BHalf, g.Q4 = 1, nd.in[0], w.buf, nd.out, w.b16, w.half, w.q4
	g.Operands = sharedOperands(a)
	p.noteProduct(g)
	rnd := rounding(nd.spec.Out)
	round := p.e.Kernels.Round
	if nd.spec.Kind == "linear.dx" { // a gradient's rounding, counted
		round = func(r *vulkan.Recorder, x *vulkan.Buffer, n int, rnd vulkan.Rounding) error {
			return p.roundGrad(r, x, n, rnd)
		}
	}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if w.prepare != nil {
			if err := w.prepare(r); err != nil {
				return err
			}
		}
		if err := p.e.Kernels.Gemm(r, g); err != nil {
			return err
		}
		return round(r, nd.out, g.M*g.N, rnd)
	}, nil
}

// lowerLinearDW is dW[Out, In] = gᵀ·x, rounded to W's format.
func lowerLinearDW(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.LinearAttrs)
	rnd := rounding(nd.spec.Out)
	g := vulkan.GemmArgs{M: a.Out, N: a.In, K: a.N, TransA: true, Alpha: 1,
		A: nd.in[0], Lda: a.Out, B: nd.in[1], Ldb: a.In, C: nd.out, Ldc: a.In, Operands: sharedOperands(a)}
	p.noteProduct(g)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := p.e.Kernels.Gemm(r, g); err != nil {
			return err
		}
		return p.roundGrad(r, nd.out, a.Out*a.In, rnd)
	}, nil
}

// lowerRound is y = x rounded to the op's format: a cast, a gradient's
// rounding to its op's output format, or a plain copy (share, fp32).
// The CPU caches a weight's cast until the weights change; this engine
// casts at every run, the same values.
func lowerRound(p *Program, nd *node) (recordFunc, error) {
	n := prod(nd.spec.Attrs.(nn.ShapeAttrs).Shape)
	rnd := rounding(nd.spec.Out)
	if strings.HasSuffix(nd.spec.Kind, ".grad_in") { // a gradient's rounding, counted
		return func(r *vulkan.Recorder, _ nn.Pass) error {
			return p.scaleGrad(r, nd.in[0], nd.out, n, 1, rnd)
		}, nil
	}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		return p.e.Kernels.Scale(r, nd.in[0], nd.out, n, 1, rnd)
	}, nil
}

// lowerCastBackward hands the gradient on, rounded to the source's format.
func lowerCastBackward(p *Program, nd *node) (recordFunc, error) {
	n := prod(nd.spec.Forward.Attrs.(nn.ShapeAttrs).Shape)
	rnd := rounding(nd.spec.In[0])
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		return p.scaleGrad(r, nd.in[0], nd.grads[0], n, 1, rnd)
	}, nil
}

// q4Weight is where the parts of the 4-bit weight n's blob (its value:
// nn.Builder.Param4) lie, for the GEMM that reads it in place, its values
// rounded to rnd (the product's compute format). The layout is the one of
// the value n holds at compile time, which the program uploads.
func q4Weight(n *G.Node, rnd vulkan.Rounding) (*vulkan.Q4Weight, error) {
	v := n.Value()
	if v == nil {
		return nil, fmt.Errorf("4-bit weight %s has no value", n.Name())
	}
	blob, ok := v.Data().([]uint8)
	if !ok {
		return nil, fmt.Errorf("4-bit weight %s holds %T, not a blob", n.Name(), v.Data())
	}
	q, l, err := quant.Layout(blob)
	if err != nil {
		return nil, fmt.Errorf("4-bit weight %s: %w", n.Name(), err)
	}
	return &vulkan.Q4Weight{Elements: q.Numel(), Code: l.Code, Absmax: l.Absmax, NestedCode: l.NestedCode,
		NestedAbsmax: l.NestedAbsmax, AbsmaxCodes: l.AbsmaxCodes, Packed: l.Packed, Block: q.BlockSize,
		NestedBlock: q.NestedBlock, Nested: q.Nested, Offset: q.Offset, Round: rnd}, nil
}
