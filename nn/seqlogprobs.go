package nn

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// SequenceLogProbs returns, for logits [rows·T, V] and targets [rows·T],
// each row's summed log-probability of its non-ignored targets,
// Σₜ log softmax(logits[t])[target[t]], as a [rows] vector: the
// log-likelihood of a completion given its prompt when the prompt's
// targets are IgnoreIndex. Preference objectives (DPO and its kin) are
// functions of these sums. The softmax is computed in fp32 as
// CrossEntropy's, and the op's format is cross_entropy's under a policy.
func (b *Builder) SequenceLogProbs(logits, targets *G.Node, rows int) *G.Node {
	ls, ts := shapeOf(logits), shapeOf(targets)
	check(len(ls) == 2 && targets.Dtype() == tensor.Int && len(ts) == 1 && ts[0] == ls[0],
		"sequence log-probs: logits %v and targets %v (%v) do not fit", ls, ts, targets.Dtype())
	check(rows > 0 && ls[0]%rows == 0, "sequence log-probs: %d tokens do not split into %d rows", ls[0], rows)
	base := b.newBase("cross_entropy", logits, targets) // formatted as cross_entropy under a policy
	base.kind = "sequence_logprobs"                     // but an op of its own to other engines
	base.wrt[1] = false
	if b.Dtype == tensor.Float64 {
		return b.apply(&seqLogProbsOp[float64]{opBase: base, n: ls[0], v: ls[1], rows: rows, out: newBuffer[float64](rows)}, logits, targets)
	}
	return b.apply(&seqLogProbsOp[float32]{opBase: base, n: ls[0], v: ls[1], rows: rows, out: newBuffer[float32](rows)}, logits, targets)
}

type seqLogProbsOp[T Float] struct {
	opBase
	n, v, rows int
	probs      []T   // saved for backward: softmax of each token's logits
	targets    []int // saved for backward
	tokLogp    []float64
	out        buffer[T]
}

func (o *seqLogProbsOp[T]) Arity() int    { return 2 }
func (o *seqLogProbsOp[T]) Type() hm.Type { return fnType(2, -1, 1) }
func (o *seqLogProbsOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.rows}, nil
}

func (o *seqLogProbsOp[T]) Do(vs ...G.Value) (G.Value, error) {
	logits, targets := vals[T](vs)[0], ints(vs[1])
	if len(o.probs) != o.n*o.v {
		o.probs, o.tokLogp = make([]T, o.n*o.v), make([]float64, o.n)
	}
	o.targets = append(o.targets[:0], targets...)
	for r, t := range targets {
		if t != IgnoreIndex && (t < 0 || t >= o.v) {
			return nil, fmt.Errorf("target %d at position %d is outside the vocabulary (size %d)", t, r, o.v)
		}
	}
	o.eng.parallel(o.n, 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			l, p := logits[r*o.v:(r+1)*o.v], o.probs[r*o.v:(r+1)*o.v]
			lse := softmaxRow(p, l)
			o.tokLogp[r] = 0
			if t := targets[r]; t != IgnoreIndex {
				o.tokLogp[r] = float64(l[t]) - lse
			}
		}
	})
	t, out := o.out.get()
	per := o.n / o.rows
	for r := range out { // in token order: the same bits for any worker count
		var sum float64
		for _, x := range o.tokLogp[r*per : (r+1)*per] {
			sum += x
		}
		out[r] = T(sum)
	}
	return t, nil
}

// d out[r] / d logits[t] = onehot(target[t]) − softmax(logits[t]) for the
// kept tokens t of row r.
func (o *seqLogProbsOp[T]) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	shapes := [][]int{{o.n, o.v}, {o.n}}
	per := o.n / o.rows
	return fusedBackward(&o.opBase, []*G.Node{grad}, shapes, func(in, grads [][]T) error {
		g := in[0]
		// log p = −cross-entropy: the cross-entropy's gradient scaled by −g[row]
		softmaxGrad(o.eng, grads[0], o.probs, o.targets, o.v, func(r int) T { return -g[r/per] })
		return nil
	}), nil
}

// VectorLoss is a scalar function of a short vector with its gradient,
// computed on the host in float64: a loss over per-sequence quantities
// (SequenceLogProbs' sums), whose inputs are a handful of numbers.
type VectorLoss interface {
	// Loss returns f(x) and writes ∂f/∂x into grad (len(x) values).
	Loss(x, grad []float64) (float64, error)
}

// HostLoss returns the scalar f(x) for a vector x, differentiable through
// f's own gradient; f is called once per forward pass.
func (b *Builder) HostLoss(x *G.Node, f VectorLoss) *G.Node {
	xs := shapeOf(x)
	check(len(xs) == 1, "host loss: input %v is not a vector", xs)
	base := b.newBase("host_loss", x)
	if b.Dtype == tensor.Float64 {
		return b.apply(&hostLossOp[float64]{opBase: base, f: f, n: xs[0]}, x)
	}
	return b.apply(&hostLossOp[float32]{opBase: base, f: f, n: xs[0]}, x)
}

type hostLossOp[T Float] struct {
	opBase
	f       VectorLoss
	n       int
	x, grad []float64 // the last forward pass's input and ∂f/∂x
}

func (o *hostLossOp[T]) Arity() int    { return 1 }
func (o *hostLossOp[T]) Type() hm.Type { return fnType(1, 0) }
func (o *hostLossOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}

func (o *hostLossOp[T]) Do(vs ...G.Value) (G.Value, error) {
	in := vals[T](vs)[0]
	if len(o.x) != o.n {
		o.x, o.grad = make([]float64, o.n), make([]float64, o.n)
	}
	for i, v := range in {
		o.x[i] = float64(v)
	}
	y, err := o.f.Loss(o.x, o.grad)
	if err != nil {
		return nil, err
	}
	return scalarValue(T(y)), nil
}

func (o *hostLossOp[T]) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	return fusedBackward(&o.opBase, []*G.Node{grad}, [][]int{{o.n}}, func(in, grads [][]T) error {
		s := float64(in[0][0])
		for i, d := range o.grad {
			grads[0][i] = T(s * d)
		}
		return nil
	}), nil
}
