package vulkan

import (
	"fmt"
	"math"
)

// CrossEntropyArgs describe cross-entropy over Rows rows of V logits
// (shaders/headloss_rows.comp): Src and Dst hold [Rows, V] fp32 values
// and may be the same buffer; Targets holds int32 target ids and RowLoss
// fp32 row losses, both read and written from row First on (a block of
// a longer sequence). A target outside [0, V) (nn.IgnoreIndex) is
// ignored: its row's loss and gradient are 0. The kernel cannot report a
// target out of range: callers check the targets on the host.
type CrossEntropyArgs struct {
	Rows, V, First int
	Src, Dst       *Buffer
	Targets        *Buffer
	RowLoss        *Buffer
	// Seed, when not nil, holds the loss's gradient in its first value,
	// and Count the number of kept targets of the whole loss: the
	// gradient is Seed[0]/Count·(softmax − onehot(target)) on kept rows
	// (0 everywhere when Count is 0).
	Seed  *Buffer
	Count int
}

const (
	xentSoftmax     = 0 // dst = softmax, row losses
	xentSoftmaxGrad = 1 // row losses, dst = the logits' gradient
	xentGradOfProbs = 2 // dst = the gradient from probabilities
)

// CrossEntropyForward records the row losses of a's rows into RowLoss and
// their softmax into Dst, or, with a.Seed, the logits' gradient into Dst
// instead (LMHeadLoss computes it in the forward pass).
func (ks *Kernels) CrossEntropyForward(r *Recorder, a CrossEntropyArgs) error {
	mode := uint32(xentSoftmax)
	if a.Seed != nil {
		mode = xentSoftmaxGrad
	}
	return ks.crossEntropy(r, "CrossEntropyForward", mode, a)
}

// CrossEntropyBackward records the logits' gradient into Dst from the
// probabilities in Src (CrossEntropyForward's Dst); a.Seed is required
// and RowLoss unused.
func (ks *Kernels) CrossEntropyBackward(r *Recorder, a CrossEntropyArgs) error {
	return ks.crossEntropy(r, "CrossEntropyBackward", xentGradOfProbs, a)
}

func (ks *Kernels) crossEntropy(r *Recorder, name string, mode uint32, a CrossEntropyArgs) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: %s %d×%d: %w", name, a.Rows, a.V, err) }
	if a.Rows < 0 || a.V <= 0 || a.First < 0 || a.Count < 0 || a.Count > math.MaxUint32 {
		return wrap(fmt.Errorf("rows %d, first %d and count %d must be ≥ 0 and V > 0", a.Rows, a.First, a.Count))
	}
	if mode != xentSoftmax && a.Seed == nil {
		return wrap(fmt.Errorf("the gradient needs the loss's gradient (Seed)"))
	}
	if a.Rows == 0 {
		return nil
	}
	for _, c := range []struct {
		name      string
		b         *Buffer
		off, rows int
		cols      int
	}{
		{"Src", a.Src, 0, a.Rows, a.V},
		{"Dst", a.Dst, 0, a.Rows, a.V},
		{"Targets", a.Targets, a.First, 1, a.Rows},
	} {
		if err := extent(c.name, c.b, c.off, c.rows, c.cols, c.cols, 4); err != nil {
			return wrap(err)
		}
	}
	rowLoss, seed := a.RowLoss, a.Seed
	if mode != xentGradOfProbs {
		if err := extent("RowLoss", rowLoss, a.First, 1, a.Rows, a.Rows, 4); err != nil {
			return wrap(err)
		}
	} else {
		rowLoss = a.Dst // bound, never written
	}
	if seed == nil {
		seed = a.Src // bound, never read
	} else if err := extent("Seed", seed, 0, 1, 1, 1, 4); err != nil {
		return wrap(err)
	}
	k, err := ks.kernel("headloss_rows.spv", 5, 5*4)
	if err != nil {
		return wrap(err)
	}
	push := pushWords(a.Rows, a.V, a.First, mode, a.Count)
	groups := min(uint32(a.Rows), ks.d.Physical.MaxWorkgroupCount[0], 65535)
	if err := r.Dispatch(k, []*Buffer{a.Src, a.Dst, a.Targets, seed, rowLoss}, push, groups, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}
