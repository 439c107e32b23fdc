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

// AttentionCacheAttrs are a decoding graph's attention's
// ("attention_cache"): q [Rows, Heads·HeadDim] and the run's new keys and
// values k, v [Rows, KVHeads·HeadDim] join Cache's sequences as layer
// Layer (KVCache.Run says which sequence each row continues, at which
// position), and each row attends to its sequence's tokens up to itself
// (its last Window when Window > 0), with AttentionAttrs's rounding
// points: S = round(Scores, QKᵀ/√d); P = round(Softmax, softmax(S));
// O = round(Out, round(Values, P)·V).
type AttentionCacheAttrs struct {
	Rows, Heads, KVHeads, HeadDim int
	Window, Layer                 int
	Cache                         *KVCache
	Scores, Softmax, Values       amp.Format
}

func (o *attentionCacheOp) attrs() any {
	s := o.s
	return AttentionCacheAttrs{Rows: s.Batch * s.SeqLen, Heads: s.Heads, KVHeads: s.KVHeads, HeadDim: s.HeadDim,
		Window: s.Window, Layer: s.Layer, Cache: s.Cache, Scores: o.f.scores, Softmax: o.f.softmax, Values: o.f.values}
}

// RowsAttrs are a "rows" op's: y [M, D] = x[idx[i], :] for x [N, D] and M
// int indices below N (a decoding graph's head reads each sequence's
// last row).
type RowsAttrs struct{ N, D, M int }

func (o *rowsOp) attrs() any { return RowsAttrs{N: o.n, D: o.d, M: o.buf.shape[0]} }
