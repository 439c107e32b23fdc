package nn

import (
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// RMSNormAttrs are an "rmsnorm" op's and its backward's: each of Rows rows
// of D values of x is normalized on its own, y = w ⊙ x·rstd with rstd =
// 1/sqrt(mean(x²) + Eps); RMSNormHeads' rows are the heads' slices of x's
// rows, so Rows = N·heads and D is the head dimension. Shape is x's
// (and y's) shape.
type RMSNormAttrs struct {
	Rows, D int
	Shape   []int
	Eps     float64
}

func (o *rmsNormOp[T]) attrs() any {
	return RMSNormAttrs{Rows: o.n, D: o.d, Shape: o.shape, Eps: o.eps}
}

// RopeAttrs are a "rope" op's and its backward's: x [Rows, Heads·2·len(InvFreq)]
// is rotated head by head (HF's rotate_half pairing) by the angles
// pos·InvFreq[i], whose cos and sin NewRopeTableFreqs(SeqLen, InvFreq)
// tabulates; row r is at position Positions[r] (a slice the graph's owner
// refills between runs) or, when Positions is nil, r mod SeqLen. The
// backward rotates the gradient by the opposite angles.
type RopeAttrs struct {
	Rows, Heads, SeqLen int
	InvFreq             []float32
	Positions           []int
	// Cache is set for a decoding graph's rope: row r is at the position
	// the cache's next run gives it (KVCache.Run), and the table covers
	// every position the cache holds; Positions and SeqLen do not apply.
	Cache *KVCache
}

func (o *ropeOp[T]) attrs() any {
	inv := o.invFreq
	if o.cache != nil {
		inv = o.cache.invFreq
	}
	return RopeAttrs{Rows: o.shape[0], Heads: o.heads, SeqLen: o.seqLen, InvFreq: inv,
		Positions: o.positions, Cache: o.cache}
}

// EmbeddingAttrs are an "embedding" op's and its backward's: y[N, D] =
// table[ids[r], :] for N int ids below V; the table's gradient is the
// scatter-add of the output's gradient rows into the looked-up rows, in
// position order (rows never looked up are 0). Table16 is set when the
// table holds 16-bit values of format TableFormat (Builder.Param16).
type EmbeddingAttrs struct {
	N, V, D     int
	Table16     bool
	TableFormat amp.Format
}

func (o *embeddingOp[T]) attrs() any {
	a := EmbeddingAttrs{N: o.n, V: o.v, D: o.d, Table16: o.table == tensor.Uint16}
	if a.Table16 {
		a.TableFormat = o.stored
	}
	return a
}
