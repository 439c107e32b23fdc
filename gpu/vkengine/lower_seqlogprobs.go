package vkengine

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// The preference objectives' head (model.GraphConfig.SequenceLoss): each
// sequence's summed log-probability of its targets ("sequence_logprobs",
// nn.Builder.SequenceLogProbs), and a loss over those few numbers that
// the host computes ("host_loss", nn.Builder.HostLoss).
//
// host_loss is the one op that needs the device's values before the run
// goes on: its forward lowering submits what is recorded so far, waits
// for it, reads the log-probabilities (a handful of floats), calls the
// loss on the host in float64 as the CPU op does, and writes the loss up;
// its backward lowering writes the loss's gradient, scaled by the loss's
// own gradient (a graph input, so a host value at recording), into its
// output. Both writes go to buffers no command still in flight reads: the
// forward waited for every earlier command, and only later ones read them.

// lowerSequenceLogProbs is the forward op: the tokens' cross-entropies
// (headloss_rows.comp, the softmax kept for the backward op) and, for
// each sequence, minus their sum (row_sum.comp).
func lowerSequenceLogProbs(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.SequenceLogProbsAttrs)
	if a.Rows <= 0 || a.N%a.Rows != 0 {
		return nil, fmt.Errorf("%d tokens in %d sequences", a.N, a.Rows)
	}
	if err := hostTargets(nd.inN[1]); err != nil {
		return nil, err
	}
	probs, err := p.Saved(nd.spec.ID, "probs", 4*a.N*a.V)
	if err != nil {
		return nil, err
	}
	tokLoss, err := p.Saved(nd.spec.ID, "token_loss", 4*a.N)
	if err != nil {
		return nil, err
	}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if _, err := targetCount(nd.inN[1], a.V); err != nil {
			return err
		}
		if err := p.e.Kernels.CrossEntropyForward(r, vulkan.CrossEntropyArgs{Rows: a.N, V: a.V,
			Src: nd.in[0], Dst: probs, Targets: nd.in[1], RowLoss: tokLoss}); err != nil {
			return err
		}
		return p.e.Kernels.RowSum(r, tokLoss, nd.out, a.Rows, a.N/a.Rows, -1)
	}, nil
}

// lowerSequenceLogProbsBackward is d logps/d logits: −g[seq]·(softmax −
// onehot(target)) on kept tokens, rounded to the logits' format; its one
// graph input is the sequences' gradient g.
func lowerSequenceLogProbsBackward(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Forward.Attrs.(nn.SequenceLogProbsAttrs)
	return softmaxBackward(p, nd, a.N, a.V, func(r *vulkan.Recorder, fwd *node, probs *vulkan.Buffer) error {
		return p.e.Kernels.SequenceLogProbsBackward(r, vulkan.CrossEntropyArgs{Rows: a.N, V: a.V, PerRow: a.N / a.Rows,
			Src: probs, Dst: nd.grads[0], Targets: fwd.in[1], Seed: nd.in[0]})
	})
}

// lowerHostLoss is the forward op: the device's values of x come down,
// the loss is computed on the host, and the loss goes up.
func lowerHostLoss(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.HostLossAttrs)
	if a.Loss == nil || a.N <= 0 {
		return nil, fmt.Errorf("host loss of %d values without a function", a.N)
	}
	grad := p.hostLossGrad(nd.spec.ID, a.N)
	x32, x := make([]float32, a.N), make([]float64, a.N)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := r.Submit(); err != nil { // x's values, and everything before them, computed
			return err
		}
		p.Transfers.Down += int64(4 * a.N)
		if err := nd.in[0].ReadFloat32(0, x32); err != nil {
			return err
		}
		for i, v := range x32 {
			x[i] = float64(v)
		}
		y, err := a.Loss.Loss(x, grad)
		if err != nil {
			return err
		}
		p.Transfers.Up += 4
		return nd.out.WriteFloat32(0, []float32{float32(y)})
	}, nil
}

// lowerHostLossBackward writes s·∂loss/∂x into its output, s the loss's
// gradient: the graph input the training loop sets (its loss weight and
// scale), read on the host.
func lowerHostLossBackward(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Forward.Attrs.(nn.HostLossAttrs)
	if _, err := p.forward(nd.spec); err != nil {
		return nil, err
	}
	seed := nd.inN[0]
	if seed.Op() != nil || !seed.IsScalar() {
		return nil, fmt.Errorf("the gradient of host loss %s is computed by the graph; the Vulkan engine takes it as a scalar input", seed.Name())
	}
	if nd.grads[0] == nil {
		return nil, nil
	}
	grad, g32 := p.hostLossGrad(nd.spec.ID, a.N), make([]float32, a.N)
	return func(*vulkan.Recorder, nn.Pass) error {
		s, err := hostScalar(seed)
		if err != nil {
			return err
		}
		for i, d := range grad {
			g32[i] = float32(s * d)
		}
		p.Transfers.Up += int64(4 * a.N)
		return nd.grads[0].WriteFloat32(0, g32)
	}, nil
}

// hostScalar is a scalar input's host value.
func hostScalar(n *G.Node) (float64, error) {
	v := n.Value()
	if v == nil {
		return 0, fmt.Errorf("input %s has no value", n.Name())
	}
	switch x := v.Data().(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("input %s holds %T, want a float", n.Name(), v.Data())
}

// hostLossGrad is where host_loss op id's forward lowering leaves the
// last run's ∂loss/∂x for its backward one (made on first use).
func (p *Program) hostLossGrad(id, n int) []float64 {
	if g, ok := p.hosts[id]; ok {
		return g
	}
	if p.hosts == nil {
		p.hosts = map[int][]float64{}
	}
	p.hosts[id] = make([]float64, n)
	return p.hosts[id]
}
