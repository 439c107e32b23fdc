package nn

import "github.com/mixtune/mixtune/amp"

// AttentionAttrs are an attention op's ("attention", and the Forward of
// "attention.backward"): causal grouped-query softmax(Q·Kᵀ/√HeadDim)·V
// over Batch rows of SeqLen tokens, q [Batch·SeqLen, Heads·HeadDim], k
// and v [Batch·SeqLen, KVHeads·HeadDim], with the rounding points of
// mixed precision. Query row i of batch row b attends to keys start..i,
// where start is 0, or i − Positions[b·SeqLen+i] (its document's first
// token) when Positions is set, raised to i − Window + 1 when Window > 0.
//
// Forward: S = round(Scores, QKᵀ/√d); P = round(Softmax, softmax(S));
// O = round(Out, round(Values, P)·V). Backward, per head:
// dV = round(Values, P)ᵀ·dO; dP = round(Softmax, round(Values, dO·Vᵀ));
// dS = round(Scores, P ⊙ (dP − rowsum(P ⊙ dP))); dQ = dS·K/√d;
// dK = dSᵀ·Q/√d. With Heads > KVHeads and a 16-bit K (or V) input format,
// each head's dK (dV) is rounded to that format before the group's fp32
// sum; every gradient is rounded to its input's format at the end.
type AttentionAttrs struct {
	Batch, SeqLen  int
	Heads, KVHeads int
	HeadDim        int
	Window         int
	// Positions is the graph owner's slice itself (not a copy), refilled
	// between runs; nil is one document per row.
	Positions []int
	// Scores, Softmax and Values are the formats of the scores, of the
	// softmax's probabilities, and of the probabilities as the values
	// matmul reads them.
	Scores, Softmax, Values amp.Format
}

func attentionAttrs(s AttentionShape, f attnFormats) AttentionAttrs {
	return AttentionAttrs{Batch: s.Batch, SeqLen: s.SeqLen, Heads: s.Heads, KVHeads: s.KVHeads, HeadDim: s.HeadDim,
		Window: s.Window, Positions: s.Positions, Scores: f.scores, Softmax: f.softmax, Values: f.values}
}

func (o *attentionOp[T]) attrs() any      { return attentionAttrs(o.s, o.f) }
func (o *attentionTiledOp[T]) attrs() any { return attentionAttrs(o.s, o.f) }
