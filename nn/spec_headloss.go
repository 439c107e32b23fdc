package nn

import "github.com/mixtune/mixtune/amp"

// HeadLossAttrs are "lm_head_loss"'s (Builder.LMHeadLoss): the mean
// cross-entropy over non-ignored targets of the logits x[N, D]·Wᵀ (W
// [V, D]), computed Chunk tokens at a time. The graph inputs are x, W,
// the targets and, when Seeded, the loss's gradient (a scalar).
type HeadLossAttrs struct {
	N, D, V, Chunk int
	// LogitsFormat is the format each block of logits and of its
	// gradient is rounded to (the linear op's output format).
	LogitsFormat amp.Format
	// W16 is set when W is a frozen 16-bit weight (uint16 values of
	// format W16Format, computed in Compute), as LinearAttrs has it.
	W16       bool
	W16Format amp.Format
	Compute   amp.Format
	// Seeded: input 3 is the loss's gradient.
	Seeded bool
	// GradsInForward: the forward op computes the gradients of x and W
	// (unrounded) from each block's softmax, and the backward op
	// ("lm_head_loss.backward", whose inputs are then the loss and its
	// gradient) only rounds them to their inputs' formats and hands them
	// on. Otherwise the backward op computes every block again from its
	// inputs x, W (absent when W16) and the loss's gradient.
	GradsInForward bool
	// SeqRows, when not 0, makes the op SequenceLogProbsHead's: its
	// output is each of SeqRows sequences' (N/SeqRows tokens each) summed
	// target log-probability, and the backward op's last input their
	// gradients, [SeqRows].
	SeqRows int
}

func (o *headLossOp[T]) attrs() any {
	return HeadLossAttrs{N: o.n, D: o.d, V: o.v, Chunk: o.chunk, LogitsFormat: o.logitsFm,
		W16: o.w16.on, W16Format: o.w16.stored, Compute: o.w16.compute,
		Seeded: o.seeded, GradsInForward: o.early != nil, SeqRows: o.seqRows}
}

// CrossEntropyAttrs are "cross_entropy"'s (Builder.CrossEntropy): the mean
// over non-ignored targets of −log softmax(logits[N, V])[target]. Its
// backward op ("cross_entropy.backward") reads only the loss's gradient
// and computes g·(softmax − onehot(target))/count from what the forward
// op kept.
type CrossEntropyAttrs struct{ N, V int }

func (o *crossEntropyOp[T]) attrs() any { return CrossEntropyAttrs{N: o.n, V: o.v} }

// SequenceLogProbsAttrs are "sequence_logprobs"'s (Builder.SequenceLogProbs):
// logits [N, V] whose N tokens are Rows sequences of N/Rows, and each
// sequence's summed log-probability of its non-ignored targets, [Rows].
// Its backward op ("sequence_logprobs.backward") reads the [Rows]
// gradient g and computes −g[row]·(softmax − onehot(target)) on kept
// tokens from what the forward op kept.
type SequenceLogProbsAttrs struct{ N, V, Rows int }

func (o *seqLogProbsOp[T]) attrs() any { return SequenceLogProbsAttrs{N: o.n, V: o.v, Rows: o.rows} }

// HostLossAttrs are "host_loss"'s (Builder.HostLoss): Loss, a function of
// the N values of its input computed on the host in float64, with its
// gradient. Its backward op ("host_loss.backward") scales that gradient
// by the loss's gradient, its one graph input.
type HostLossAttrs struct {
	N    int
	Loss VectorLoss
}

func (o *hostLossOp[T]) attrs() any { return HostLossAttrs{N: o.n, Loss: o.f} }
