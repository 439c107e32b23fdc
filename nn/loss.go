package nn

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// IgnoreIndex marks a target that contributes no loss, as in PyTorch.
const IgnoreIndex = -100

// CrossEntropy returns the mean over non-ignored rows of −log softmax(logits)[target]
// for logits [N, V] and targets [N]; 0 when every target is ignored.
func (b *Builder) CrossEntropy(logits, targets *G.Node) *G.Node {
	ls, ts := shapeOf(logits), shapeOf(targets)
	check(len(ls) == 2 && targets.Dtype() == tensor.Int && len(ts) == 1 && ts[0] == ls[0],
		"cross-entropy: logits %v and targets %v (%v) do not fit", ls, ts, targets.Dtype())
	base := b.newBase("cross_entropy", logits, targets)
	base.wrt[1] = false
	if b.Dtype == tensor.Float64 {
		return b.apply(&crossEntropyOp[float64]{opBase: base, n: ls[0], v: ls[1]}, logits, targets)
	}
	return b.apply(&crossEntropyOp[float32]{opBase: base, n: ls[0], v: ls[1]}, logits, targets)
}

type crossEntropyOp[T Float] struct {
	opBase
	n, v    int
	probs   []T   // saved for backward: softmax of each row
	targets []int // saved for backward
	count   int   // non-ignored targets in the last forward pass
	rowLoss []float64
}

func (o *crossEntropyOp[T]) Arity() int    { return 2 }
func (o *crossEntropyOp[T]) Type() hm.Type { return fnType(2, -1, 0) }
func (o *crossEntropyOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.ScalarShape(), nil
}

func (o *crossEntropyOp[T]) Do(vs ...G.Value) (G.Value, error) {
	logits, targets := vals[T](vs)[0], ints(vs[1])
	if len(o.probs) != o.n*o.v {
		o.probs, o.rowLoss = make([]T, o.n*o.v), make([]float64, o.n)
	}
	o.targets = append(o.targets[:0], targets...)
	o.count = 0
	for r, t := range targets {
		switch {
		case t == IgnoreIndex:
		case t < 0 || t >= o.v:
			return nil, fmt.Errorf("target %d at position %d is outside the vocabulary (size %d)", t, r, o.v)
		default:
			o.count++
		}
	}
	o.eng.parallel(o.n, 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			l, p := logits[r*o.v:(r+1)*o.v], o.probs[r*o.v:(r+1)*o.v]
			lse := softmaxRow(p, l)
			o.rowLoss[r] = 0
			if t := targets[r]; t != IgnoreIndex {
				o.rowLoss[r] = lse - float64(l[t])
			}
		}
	})
	if o.count == 0 {
		return scalarValue(T(0)), nil
	}
	var sum float64 // in row order: the same bits for any worker count
	for _, x := range o.rowLoss {
		sum += x
	}
	return scalarValue(T(sum / float64(o.count))), nil
}

// softmaxRow writes softmax(l) into p and returns log Σ exp(l).
func softmaxRow[T Float](p, l []T) float64 {
	m := maxSlice(l)
	expSub(p[:len(l)], l, m)
	sum := sum8[float64](p[:len(l)]) // in float64: the loss's own precision
	scaleSlice(p, p, T(1/sum))
	return float64(m) + math.Log(sum)
}

// d loss / d logits = g·(softmax − onehot(target)) / count on kept rows.
func (o *crossEntropyOp[T]) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	shapes := [][]int{{o.n, o.v}, {o.n}}
	return fusedBackward(&o.opBase, []*G.Node{grad}, shapes, func(in, grads [][]T) error {
		dl := grads[0]
		if o.count == 0 {
			clear(dl)
			return nil
		}
		scale := in[0][0] / T(o.count)
		softmaxGrad(o.eng, dl, o.probs, o.targets, o.v, func(int) T { return scale })
		return nil
	}), nil
}

// softmaxGrad writes d = scale(r)·(softmax − onehot(target)) into each row
// r of dl [N, v] from the saved probabilities, 0 on ignored rows: the
// gradient of scale(r)·(−log softmax(logits)[target]) with respect to
// the logits.
func softmaxGrad[T Float](e *Engine, dl, probs []T, targets []int, v int, scale func(row int) T) {
	e.parallel(len(targets), 8, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			d, p := dl[r*v:(r+1)*v], probs[r*v:(r+1)*v]
			t := targets[r]
			if t == IgnoreIndex {
				clear(d)
				continue
			}
			s := scale(r)
			for j, x := range p {
				d[j] = s * x
			}
			d[t] -= s
		}
	})
}

// sum8 is Σ x in a fixed order: element j into partial sum j mod 8, then
// the partial sums pairwise ((0+1)+(2+3))+((4+5)+(6+7)), each in A (T, or
// float64 for a wider sum; a float32 is exact in float64). Eight sums in
// flight instead of one chain, which cost one add latency per element;
// the loss softmax's sum over the vocabulary. The order depends on the
// row alone, never on threads. float32 summed in float64 takes AVX-512
// where the CPU has it: the eight partial sums are a register's lanes,
// each in its own order, so the same bits.
func sum8[A, T Float](x []T) A {
	var s [8]A
	j := 0
	if x32, ok := any(x).([]float32); ok {
		if s64, ok := any(&s).(*[8]float64); ok {
			j = sum8Fast(x32, s64)
		}
	}
	for ; j+8 <= len(x); j += 8 {
		c := x[j : j+8 : j+8]
		s[0] += A(c[0])
		s[1] += A(c[1])
		s[2] += A(c[2])
		s[3] += A(c[3])
		s[4] += A(c[4])
		s[5] += A(c[5])
		s[6] += A(c[6])
		s[7] += A(c[7])
	}
	for k := j % 8; j < len(x); j, k = j+1, k+1 {
		s[k] += A(x[j])
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))
}
