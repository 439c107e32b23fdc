package vkengine

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// The LM head with its cross-entropy ("lm_head_loss", nn.Builder.LMHeadLoss)
// and the unfused cross-entropy ("cross_entropy"). Both compute each
// row's loss as nn does (headloss_rows.comp) and the mean over the kept
// targets with a sum whose order depends on the token count alone
// (Kernels.Sum), so a run's loss does not depend on the device's
// workgroup scheduling. The kept targets are counted on the host, which
// uploads them at every run anyway, and which checks them as the CPU ops
// do: a target outside the vocabulary is an error, not a silent read.
// The loss is left in fp32 whatever spec.Out says, as the CPU ops leave it.

// targetCount counts the kept targets of a host targets node, checking
// each against a vocabulary of v entries.
func targetCount(targets *G.Node, v int) (int, error) {
	val := targets.Value()
	if val == nil {
		return 0, fmt.Errorf("targets %s have no value", targets.Name())
	}
	ts, ok := val.Data().([]int)
	if !ok {
		return 0, fmt.Errorf("targets %s hold %T, want []int", targets.Name(), val.Data())
	}
	count := 0
	for i, t := range ts {
		switch {
		case t == nn.IgnoreIndex:
		case t < 0 || t >= v:
			return 0, fmt.Errorf("target %d at position %d is outside the vocabulary (size %d)", t, i, v)
		default:
			count++
		}
	}
	return count, nil
}

// hostTargets checks that a node the ops read targets from is a graph
// input (uploaded at every run), whose host value the lowerings count.
func hostTargets(n *G.Node) error {
	if n.Op() != nil {
		return fmt.Errorf("targets %s are computed by the graph; the Vulkan engine takes them as an input", n.Name())
	}
	return nil
}

// invCount is the scale of a sum of row losses into their mean: 0 when
// no target is kept (the loss is then 0, as on the CPU).
func invCount(count int) float32 {
	if count == 0 {
		return 0
	}
	return float32(1 / float64(count))
}

// headLoss is one lm_head_loss computation on the device: the forward
// op's, or its backward op's when that computes the blocks again.
type headLoss struct {
	p          *Program
	a          nn.HeadLossAttrs
	b16        bool
	half       vulkan.Half
	x, w       *vulkan.Buffer
	targets    *vulkan.Buffer
	targetNode *G.Node
	// fx, fw and fl are the formats of x's, W's and a block's values
	// (the logits', rounded to LogitsFormat): the GEMMs' operands.
	fx, fw, fl vulkan.Rounding
	block      *vulkan.Buffer // [Chunk, V]: logits, then probabilities or their gradient
	rowLoss    *vulkan.Buffer // [N]
	scratch    *vulkan.Buffer // the loss sum's partials
}

// headGrads are the buffers a pass computes gradients into (nil: not
// needed) and the loss's gradient.
type headGrads struct{ seed, dx, dw *vulkan.Buffer }

// newHeadLoss prepares the computation of forward node fwd (kept
// buffers are shared between the forward and backward lowerings).
func newHeadLoss(p *Program, fwd *node) (*headLoss, error) {
	a := fwd.spec.Attrs.(nn.HeadLossAttrs)
	var b16 bool
	var hf vulkan.Half
	var err error
	if a.W16 {
		if hf, err = half(a.W16Format); err != nil {
			return nil, fmt.Errorf("16-bit head weight: %w", err)
		}
		b16 = true
	}
	if b16 && a.Compute != a.W16Format && a.Compute != amp.FP32 {
		return nil, fmt.Errorf("%v weights computed in %v", a.W16Format, a.Compute)
	}
	if err := hostTargets(fwd.inN[2]); err != nil {
		return nil, err
	}
	h := &headLoss{p: p, a: a, b16: b16, half: hf, x: fwd.in[0], w: fwd.in[1], targets: fwd.in[2], targetNode: fwd.inN[2],
		fx: rounding(fwd.spec.In[0]), fw: rounding(fwd.spec.In[1]), fl: rounding(a.LogitsFormat)}
	if a.W16 { // computed in W16Format or fp32: its values are W16Format's
		h.fw = rounding(a.W16Format)
	}
	id := fwd.spec.ID
	if h.block, err = p.Saved(id, "block", 4*a.Chunk*a.V); err != nil {
		return nil, err
	}
	if h.rowLoss, err = p.Saved(id, "row_loss", 4*a.N); err != nil {
		return nil, err
	}
	if h.scratch, err = p.Saved(id, "loss_partials", 4*vulkan.ReduceScratch(a.N)); err != nil {
		return nil, err
	}
	return h, nil
}

// logitsArgs is the product of the logits of rows r0 … r0+rows-1.
func (h *headLoss) logitsArgs(r0, rows int) vulkan.GemmArgs {
	a := h.a
	return vulkan.GemmArgs{M: rows, N: a.V, K: a.D, TransB: true, Alpha: 1,
		A: h.x, Lda: a.D, AOff: r0 * a.D, B: h.w, Ldb: a.D, C: h.block, Ldc: a.V, B16: h.b16, BHalf: h.half,
		Operands: shared(h.fx, h.fw)}
}

// dxArgs is the product of those rows' dx from the logits' gradient (C
// left for the caller).
func (h *headLoss) dxArgs(r0, rows int) vulkan.GemmArgs {
	a := h.a
	return vulkan.GemmArgs{M: rows, N: a.D, K: a.V, Alpha: 1,
		A: h.block, Lda: a.V, B: h.w, Ldb: a.D, Ldc: a.D, COff: r0 * a.D, B16: h.b16, BHalf: h.half,
		Operands: shared(h.fl, h.fw)}
}

// dwArgs is the product adding those rows' share of dW (C left for the
// caller): the first block's sets it.
func (h *headLoss) dwArgs(r0, rows int) vulkan.GemmArgs {
	a := h.a
	beta := float32(1)
	if r0 == 0 {
		beta = 0
	}
	return vulkan.GemmArgs{M: a.V, N: a.D, K: rows, TransA: true, Alpha: 1, Beta: beta,
		A: h.block, Lda: a.V, B: h.x, Ldb: a.D, BOff: r0 * a.D, Ldc: a.D, Operands: shared(h.fl, h.fx)}
}

// noteProducts counts the products a record with gradients g records
// (Program.Products).
func (h *headLoss) noteProducts(g *headGrads) {
	for r0 := 0; r0 < h.a.N; r0 += h.a.Chunk {
		rows := min(h.a.Chunk, h.a.N-r0)
		h.p.noteProduct(h.logitsArgs(r0, rows))
		if g != nil && g.dx != nil {
			h.p.noteProduct(h.dxArgs(r0, rows))
		}
		if g != nil && g.dw != nil {
			h.p.noteProduct(h.dwArgs(r0, rows))
		}
	}
}

// record records the pass: the loss into loss and, with g, the unrounded
// gradients of x and W, block by block as headLossOp.pass computes them.
// dW adds its blocks' products in block order (Beta 1 after the first).
func (h *headLoss) record(r *vulkan.Recorder, loss *vulkan.Buffer, g *headGrads) error {
	a, ks := h.a, h.p.e.Kernels
	count, err := targetCount(h.targetNode, a.V)
	if err != nil {
		return err
	}
	logitsRnd := rounding(a.LogitsFormat)
	for r0 := 0; r0 < a.N; r0 += a.Chunk {
		rows := min(a.Chunk, a.N-r0)
		if err := ks.Gemm(r, h.logitsArgs(r0, rows)); err != nil {
			return err
		}
		if err := ks.Round(r, h.block, rows*a.V, logitsRnd); err != nil {
			return err
		}
		xe := vulkan.CrossEntropyArgs{Rows: rows, V: a.V, First: r0, Src: h.block, Dst: h.block,
			Targets: h.targets, RowLoss: h.rowLoss, Count: count}
		if g != nil {
			xe.Seed = g.seed
			if a.SeqRows > 0 { // the sequences' gradients, one each
				xe.PerRow = a.N / a.SeqRows
			}
		}
		if err := ks.CrossEntropyForward(r, xe); err != nil {
			return err
		}
		if g == nil {
			continue
		}
		if err := h.p.roundGrad(r, h.block, rows*a.V, logitsRnd); err != nil { // the logits' gradient, in their format
			return err
		}
		if g.dx != nil {
			dx := h.dxArgs(r0, rows)
			dx.C = g.dx
			if err := ks.Gemm(r, dx); err != nil {
				return err
			}
		}
		if g.dw != nil {
			dw := h.dwArgs(r0, rows)
			dw.C = g.dw
			if err := ks.Gemm(r, dw); err != nil {
				return err
			}
		}
	}
	if a.SeqRows > 0 { // each sequence's log-probability: minus its tokens' losses, summed
		return ks.RowSum(r, h.rowLoss, loss, a.SeqRows, a.N/a.SeqRows, -1)
	}
	return ks.Sum(r, h.rowLoss, a.N, invCount(count), h.scratch, loss, 0)
}

// lowerHeadLoss is the forward op. When it computes the gradients
// (GradsInForward: the loss's gradient is its input 3), it writes them
// unrounded into buffers kept for the backward op, which rounds them
// into its own (lowerHeadLossBackward), as the CPU's backward op rounds
// the buffers its forward op filled.
func lowerHeadLoss(p *Program, nd *node) (recordFunc, error) {
	h, err := newHeadLoss(p, nd)
	if err != nil {
		return nil, err
	}
	var g *headGrads
	if h.a.GradsInForward {
		if g, err = keptHeadGrads(p, nd.spec, nd.in[3]); err != nil {
			return nil, err
		}
	}
	h.noteProducts(g)
	return func(r *vulkan.Recorder, _ nn.Pass) error { return h.record(r, nd.out, g) }, nil
}

// keptHeadGrads are the buffers the forward op fills with the gradients
// of x and W for its backward op (spec is the forward op's).
func keptHeadGrads(p *Program, spec nn.OpSpec, seed *vulkan.Buffer) (*headGrads, error) {
	a := spec.Attrs.(nn.HeadLossAttrs)
	g := &headGrads{seed: seed}
	var err error
	if spec.Wrt[0] {
		if g.dx, err = p.Saved(spec.ID, "dx", 4*a.N*a.D); err != nil {
			return nil, err
		}
	}
	if spec.Wrt[1] {
		if g.dw, err = p.Saved(spec.ID, "dw", 4*a.V*a.D); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// lowerHeadLossBackward hands the gradients on, rounded to x's and W's
// formats: from the forward op's kept buffers, or, when the forward op
// did not compute them, from every block computed again with the loss's
// gradient (the op's last input).
func lowerHeadLossBackward(p *Program, nd *node) (recordFunc, error) {
	fwd, err := p.forward(nd.spec)
	if err != nil {
		return nil, err
	}
	a := nd.spec.Forward.Attrs.(nn.HeadLossAttrs)
	sizes := []int{a.N * a.D, a.V * a.D}
	roundGrads := func(r *vulkan.Recorder, src []*vulkan.Buffer) error {
		for i, s := range src {
			if nd.grads[i] == nil {
				continue
			}
			if s == nil {
				return fmt.Errorf("gradient %d of lm_head_loss was not computed", i)
			}
			if err := p.scaleGrad(r, s, nd.grads[i], sizes[i], 1, rounding(nd.spec.In[i])); err != nil {
				return err
			}
		}
		return nil
	}
	if a.GradsInForward {
		g, err := keptHeadGrads(p, *nd.spec.Forward, nil)
		if err != nil {
			return nil, err
		}
		return func(r *vulkan.Recorder, _ nn.Pass) error {
			return roundGrads(r, []*vulkan.Buffer{g.dx, g.dw})
		}, nil
	}
	h, err := newHeadLoss(p, fwd)
	if err != nil {
		return nil, err
	}
	loss, err := p.Saved(nd.spec.ID, "loss_again", 4*max(1, a.SeqRows))
	if err != nil {
		return nil, err
	}
	g := &headGrads{seed: nd.in[len(nd.in)-1], dx: nd.grads[0], dw: nd.grads[1]}
	h.noteProducts(g)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := h.record(r, loss, g); err != nil {
			return err
		}
		for i, b := range []*vulkan.Buffer{g.dx, g.dw} {
			if b != nil {
				if err := p.roundGrad(r, b, sizes[i], rounding(nd.spec.In[i])); err != nil {
					return err
				}
			}
		}
		return nil
	}, nil
}

// lowerCrossEntropy is the unfused cross-entropy over logits [N, V]: it
// keeps the probabilities for its backward op, as crossEntropyOp does.
func lowerCrossEntropy(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.CrossEntropyAttrs)
	if err := hostTargets(nd.inN[1]); err != nil {
		return nil, err
	}
	probs, err := p.Saved(nd.spec.ID, "probs", 4*a.N*a.V)
	if err != nil {
		return nil, err
	}
	rowLoss, err := p.Saved(nd.spec.ID, "row_loss", 4*a.N)
	if err != nil {
		return nil, err
	}
	scratch, err := p.Saved(nd.spec.ID, "loss_partials", 4*vulkan.ReduceScratch(a.N))
	if err != nil {
		return nil, err
	}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		count, err := targetCount(nd.inN[1], a.V)
		if err != nil {
			return err
		}
		if err := p.e.Kernels.CrossEntropyForward(r, vulkan.CrossEntropyArgs{Rows: a.N, V: a.V,
			Src: nd.in[0], Dst: probs, Targets: nd.in[1], RowLoss: rowLoss}); err != nil {
			return err
		}
		return p.e.Kernels.Sum(r, rowLoss, a.N, invCount(count), scratch, nd.out, 0)
	}, nil
}

// lowerCrossEntropyBackward is d loss/d logits = g·(softmax −
// onehot(target))/count on kept rows, rounded to the logits' format;
// its one graph input is the loss's gradient g.
func lowerCrossEntropyBackward(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Forward.Attrs.(nn.CrossEntropyAttrs)
	return softmaxBackward(p, nd, a.N, a.V, func(r *vulkan.Recorder, fwd *node, probs *vulkan.Buffer) error {
		count, err := targetCount(fwd.inN[1], a.V)
		if err != nil {
			return err
		}
		return p.e.Kernels.CrossEntropyBackward(r, vulkan.CrossEntropyArgs{Rows: a.N, V: a.V,
			Src: probs, Dst: nd.grads[0], Targets: fwd.in[1], Seed: nd.in[0], Count: count})
	})
}

// softmaxBackward lowers the backward op nd of a loss over logits [n, v]
// whose forward op kept their softmax ("probs"): grad records the logits'
// gradient into nd.grads[0] from it, which is then rounded to the
// logits' format. Nothing is recorded when that gradient is not asked for.
func softmaxBackward(p *Program, nd *node, n, v int, grad func(r *vulkan.Recorder, fwd *node, probs *vulkan.Buffer) error) (recordFunc, error) {
	fwd, err := p.forward(nd.spec)
	if err != nil {
		return nil, err
	}
	probs, err := p.Saved(nd.spec.ID, "probs", 4*n*v)
	if err != nil {
		return nil, err
	}
	if nd.grads[0] == nil {
		return nil, nil
	}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := grad(r, fwd, probs); err != nil {
			return err
		}
		return p.roundGrad(r, nd.grads[0], n*v, rounding(nd.spec.In[0]))
	}, nil
}
