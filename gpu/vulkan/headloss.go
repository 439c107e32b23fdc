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
	// PerRow, for SequenceLogProbsBackward and for CrossEntropyForward
	// with a Seed, makes the rows sequences of PerRow rows (row First
	// being the whole's row First): Seed holds one gradient a sequence,
	// and the gradient is −Seed[seq]·(softmax − onehot(target)).
	PerRow int
}

const (
	xentSoftmax     = 0 // dst = softmax, row losses
	xentSoftmaxGrad = 1 // row losses, dst = the logits' gradient
	xentGradOfProbs = 2 // dst = the gradient from probabilities
	xentSeqGrad     = 3 // dst = the gradient of sequences' summed log-probabilities
	xentSeqSoftmax  = 4 // row losses, dst = that gradient, from the logits
)

// CrossEntropyForward records the row losses of a's rows into RowLoss and
// their softmax into Dst, or, with a.Seed, the logits' gradient into Dst
// instead (LMHeadLoss computes it in the forward pass).
func (ks *Kernels) CrossEntropyForward(r *Recorder, a CrossEntropyArgs) error {
	mode := uint32(xentSoftmax)
	switch {
	case a.Seed != nil && a.PerRow > 0: // the gradient of sequences' log-probabilities, −Seed[seq]·(softmax − onehot)
		if err := seqSeed(a); err != nil {
			return fmt.Errorf("vulkan: CrossEntropyForward %d×%d: %w", a.Rows, a.V, err)
		}
		mode, a.Count = xentSeqSoftmax, 0
	case a.Seed != nil:
		mode = xentSoftmaxGrad
	}
	return ks.crossEntropy(r, "CrossEntropyForward", mode, a)
}

// seqSeed checks Seed's length against the sequences of PerRow rows
// that a's rows (a block of them, from row First) belong to, one
// gradient a sequence.
func seqSeed(a CrossEntropyArgs) error {
	if a.PerRow <= 0 || a.First < 0 || a.Rows < 0 {
		return fmt.Errorf("rows %d from %d in sequences of %d", a.Rows, a.First, a.PerRow)
	}
	n := (a.First + a.Rows + a.PerRow - 1) / a.PerRow
	return extent("Seed", a.Seed, 0, 1, max(n, 1), max(n, 1), 4)
}

// CrossEntropyBackward records the logits' gradient into Dst from the
// probabilities in Src (CrossEntropyForward's Dst); a.Seed is required
// and RowLoss unused.
func (ks *Kernels) CrossEntropyBackward(r *Recorder, a CrossEntropyArgs) error {
	return ks.crossEntropy(r, "CrossEntropyBackward", xentGradOfProbs, a)
}

// SequenceLogProbsBackward records into Dst the gradient of each
// sequence's summed log-probability of its targets, the sequences being
// runs of a.PerRow rows (from row a.First on) and a.Seed holding their
// gradients g: −g[seq]·(softmax − onehot(target)) on kept rows, from the
// probabilities in Src (CrossEntropyForward's Dst). Count and RowLoss
// are unused.
func (ks *Kernels) SequenceLogProbsBackward(r *Recorder, a CrossEntropyArgs) error {
	if a.Seed != nil {
		if err := seqSeed(a); err != nil {
			return fmt.Errorf("vulkan: SequenceLogProbsBackward %d×%d: %w", a.Rows, a.V, err)
		}
	}
	a.Count = 0
	return ks.crossEntropy(r, "SequenceLogProbsBackward", xentSeqGrad, a)
}

// RowSum records out[i] = scale·Σⱼ x[i·cols + j] for rows rows
// (shaders/row_sum.comp), deterministically: the order of the additions
// depends on cols alone. The fp32 sum is within γ_k·Σ|x| of the exact
// one, k = RowSumDepth(cols), plus a rounding for the scale.
func (ks *Kernels) RowSum(r *Recorder, x, out *Buffer, rows, cols int, scale float32) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: RowSum %d×%d: %w", rows, cols, err) }
	if rows < 0 || cols <= 0 || rows*cols > math.MaxUint32 {
		return wrap(fmt.Errorf("bad shape"))
	}
	if rows == 0 {
		return nil
	}
	if err := extent("x", x, 0, rows, cols, cols, 4); err != nil {
		return wrap(err)
	}
	if err := extent("out", out, 0, 1, rows, rows, 4); err != nil {
		return wrap(err)
	}
	k, err := ks.kernel("row_sum.spv", 2, 3*4)
	if err != nil {
		return wrap(err)
	}
	groups := min(uint32(rows), ks.d.Physical.MaxWorkgroupCount[0], 65535)
	if err := r.Dispatch(k, []*Buffer{x, out}, pushWords(rows, cols, scale), groups, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}

// RowSumDepth is the most additions a value passes through in RowSum's
// sum of cols values: its invocation's strided sum, then 8 tree levels.
func RowSumDepth(cols int) int { return (cols+255)/256 + 8 }

func (ks *Kernels) crossEntropy(r *Recorder, name string, mode uint32, a CrossEntropyArgs) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: %s %d×%d: %w", name, a.Rows, a.V, err) }
	if a.Rows < 0 || a.V <= 0 || a.First < 0 || a.Count < 0 || a.Count > math.MaxUint32 {
		return wrap(fmt.Errorf("rows %d, first %d and count %d must be ≥ 0 and V > 0", a.Rows, a.First, a.Count))
	}
	if mode != xentSoftmax && a.Seed == nil || (mode == xentSeqGrad || mode == xentSeqSoftmax) && a.PerRow <= 0 {
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
	if mode != xentGradOfProbs && mode != xentSeqGrad {
		if err := extent("RowLoss", rowLoss, a.First, 1, a.Rows, a.Rows, 4); err != nil {
			return wrap(err)
		}
	} else {
		rowLoss = a.Dst // bound, never written
	}
	if seed == nil {
		seed = a.Src // bound, never read
	} else if err := extent("Seed", seed, 0, 1, 1, 1, 4); err != nil { // SequenceLogProbsBackward checks its length
		return wrap(err)
	}
	k, err := ks.kernel("headloss_rows.spv", 5, 6*4)
	if err != nil {
		return wrap(err)
	}
	push := pushWords(a.Rows, a.V, a.First, mode, a.Count, max(a.PerRow, 1))
	groups := min(uint32(a.Rows), ks.d.Physical.MaxWorkgroupCount[0], 65535)
	if err := r.Dispatch(k, []*Buffer{a.Src, a.Dst, a.Targets, seed, rowLoss}, push, groups, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}
