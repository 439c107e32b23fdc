package nn

// The attributes other engines read for dropout and bias (SwiGLU's
// "silu" needs only PointwiseAttrs' Shape).

// DropoutAttrs are a dropout op's ("dropout", and "dropout.backward"
// through OpSpec.Forward): y = x·keep/(1−P), with the mask keep drawn row
// by row as keepMask draws it. Row r's mask comes from a PCG (Go's
// math/rand/v2) seeded with (key, NoiseID·2³² + uint32(r + RowOffset)),
// key being the run's Pass.Noise (0: the identity), and element j of the
// row is kept when the top 53 bits of the PCG's (j+1)-th Uint64, as a
// fraction of 2⁵³, are at least P.
type DropoutAttrs struct {
	Shape []int
	// Rows is Shape[0] and Cols the product of the rest: the mask's rows.
	Rows, Cols int
	P          float64
	// NoiseID is the op's id as its mask sees it (with a checkpointed
	// layer's offset) and RowOffset the engine's NoiseRowOffset, both as
	// they stand when the spec is read: an engine compiling the graph
	// reads them once, after the trainer has set them.
	NoiseID, RowOffset int
}

func (o *dropoutOp[T]) attrs() any {
	return DropoutAttrs{Shape: o.shape, Rows: o.rows, Cols: o.cols, P: o.p,
		NoiseID: o.id + o.eng.idOffset, RowOffset: o.eng.NoiseRowOffset}
}

// BiasAttrs are a bias op's ("bias": y[N, D] + bias[D] broadcast over the
// rows) and its bias gradient's ("bias.db": the column sums of the
// output's gradient). The CPU sums each column in blocks of RowChunk
// rows, each block from zero in row order, then adds the blocks' sums in
// block order: an engine that keeps that order gets the CPU's bits.
type BiasAttrs struct {
	N, D     int
	RowChunk int
}

func (o *biasOp[T]) attrs() any { return BiasAttrs{N: o.n, D: o.d, RowChunk: reduceChunk} }

func (o *biasGradOp[T]) attrs() any {
	return BiasAttrs{N: o.fwd.n, D: o.fwd.d, RowChunk: reduceChunk}
}
