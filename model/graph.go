package model

import (
	"fmt"
	"maps"
	"strings"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/nn"
)

// LinearFunc computes a linear module of the model. module is its HF path
// ("model.layers.0.self_attn.q_proj"), x is [N, in] and w the frozen or
// trainable base weight [out, in]. Adapters supply their own to add a
// low-rank branch; the default is b.Linear(x, w).
type LinearFunc func(b *nn.Builder, module string, x, w, bias *G.Node) *G.Node

// GraphConfig says what to build: the micro-batch shape, which weights
// train, and how linear modules are computed.
type GraphConfig struct {
	Batch, SeqLen int
	Trainable     func(name string) bool // nil: every base weight frozen
	Linear        LinearFunc             // nil: plain matmul
	// Positions, when set, is the caller's buffer of each token's position
	// in its document (Batch·SeqLen values, refilled per micro-batch):
	// packed rows, whose documents each attend only to themselves with
	// rotary positions from 0. nil: one document per row.
	Positions []int
	// FusedHead computes the LM head and the loss together, HeadChunk
	// tokens at a time (nn.LMHeadLoss): the [Batch·SeqLen, vocab] logits,
	// 4.9 GB in fp32 for 8k tokens of a 152k vocabulary, are never held,
	// and Graph.Logits is nil. Training and evaluation graphs set it.
	// Unset, the head is the linear + cross-entropy pair with
	// Graph.Logits, which tests compare with PyTorch; the fused head is
	// that pair's computation, rounding point for rounding point. The head
	// is never an adapter target (PEFT leaves the output layer out), so
	// the fused head does not go through Linear.
	FusedHead bool
	HeadChunk int // tokens per block of the fused head; 0: nn.HeadChunk(vocab)
	// LossGrad, with FusedHead, is the node the caller will differentiate
	// Graph.Loss with (G.Backpropagate's gradOutputs): its value is then
	// known in the forward pass, where the fused head computes its
	// gradients from each block of logits instead of computing the blocks
	// again in the backward pass.
	LossGrad *G.Node
	// CheckpointLayers runs each decoder layer on a graph of its own and
	// recomputes its forward pass in the backward pass (nn.Checkpoint):
	// the graph holds one layer's activations, not every layer's, for
	// about a third more compute. Gradients are bit-identical.
	CheckpointLayers bool
	// Cache, when set, builds a decoding graph: its Batch·SeqLen rows are
	// new tokens of Cache's sequences, at the positions Cache.SetRows gives
	// them, attending to their sequences' earlier tokens through the cache
	// (nn.KVCache). It has Logits and no loss; Positions, FusedHead and
	// CheckpointLayers are not used with it. Decoder builds these graphs
	// with SeqLen 1.
	Cache *nn.KVCache
	// Outputs, with Cache and between 1 and Batch·SeqLen−1, is how many
	// rows the head computes: those Graph.Outputs lists, each sequence's
	// last new token. 0 computes every row.
	Outputs int
	// SequenceLogProbs computes Graph.LogProbs, each row's summed
	// log-probability of its targets: with FusedHead in blocks of
	// HeadChunk tokens (nn.SequenceLogProbsHead, no Graph.Logits), else
	// through the unfused head (nn.SequenceLogProbs); with SequenceLoss
	// unset the graph has no loss (a preference objective's reference pass).
	SequenceLogProbs bool
	// SequenceLoss, when set, is the loss as a function of Graph.LogProbs
	// (nn.HostLoss): the preference objectives. It implies
	// SequenceLogProbs.
	SequenceLoss nn.VectorLoss
}

// Graph is a built model graph. Inputs are set per micro-batch; Loss is
// the mean cross-entropy over non-ignored targets.
type Graph struct {
	B       *nn.Builder
	IDs     *G.Node // [Batch·SeqLen] token ids
	Targets *G.Node // [Batch·SeqLen] next-token targets, nn.IgnoreIndex for no loss
	Logits  *G.Node // [Batch·SeqLen, vocab]; nil with GraphConfig.FusedHead; [Outputs, vocab] with GraphConfig.Outputs
	Loss    *G.Node // scalar; nil with GraphConfig.Cache
	Outputs *G.Node // [GraphConfig.Outputs] rows the head computes; nil without
	// LogProbs [Batch] is each row's summed target log-probability, with
	// GraphConfig.SequenceLogProbs or SequenceLoss.
	LogProbs *G.Node
	Params   map[string]*G.Node
}

// Build adds the model to b. Shapes, with N = Batch·SeqLen, D = hidden,
// H/Hkv the query/key-value heads of dimension hd, F = intermediate:
//
//	x   = embed[ids]                               [N, D]
//	per layer:
//	  h = rmsnorm(x)                               [N, D]
//	  q = rope(h·Wqᵀ) [N, H·hd]; k = rope(h·Wkᵀ), v = h·Wvᵀ  [N, Hkv·hd]
//	  x = x + attention(q, k, v)·Woᵀ               [N, D]
//	  h = rmsnorm(x)
//	  x = x + (silu(h·Wgᵀ) ⊙ h·Wuᵀ)·Wdᵀ            [N, F] → [N, D]
//	logits = rmsnorm(x)·Wheadᵀ                     [N, V]  (in blocks of tokens with FusedHead)
//
// Training, evaluation and decoding all run this graph: decoding builds it
// with a key/value cache (GraphConfig.Cache) and feeds it new tokens only.
func (m *Model) Build(b *nn.Builder, gc GraphConfig) (*Graph, error) {
	c := m.Config
	if gc.Batch < 1 || gc.SeqLen < 1 {
		return nil, fmt.Errorf("build graph: batch %d and sequence length %d must be positive", gc.Batch, gc.SeqLen)
	}
	if gc.SeqLen > c.MaxPositionEmbeddings {
		return nil, fmt.Errorf("build graph: sequence length %d exceeds max_position_embeddings %d", gc.SeqLen, c.MaxPositionEmbeddings)
	}
	linear := gc.Linear
	if linear == nil {
		linear = func(b *nn.Builder, _ string, x, w, bias *G.Node) *G.Node { return b.LinearBias(x, w, bias) }
	}
	g := &Graph{B: b, Params: map[string]*G.Node{}}
	param := func(name string) *G.Node {
		n := m.param(b, gc, name)
		g.Params[name] = n
		return n
	}
	n := gc.Batch * gc.SeqLen
	if gc.Positions != nil && len(gc.Positions) != n {
		return nil, fmt.Errorf("build graph: %d positions for %d tokens", len(gc.Positions), n)
	}
	decode := gc.Cache != nil
	if decode && (gc.Positions != nil || gc.FusedHead || gc.CheckpointLayers || gc.Outputs < 0 || gc.Outputs >= n) {
		return nil, fmt.Errorf("build graph: a decoding graph of %d rows with %d outputs has no positions, fused head or checkpointing", n, gc.Outputs)
	}
	g.IDs = b.IntInput("input_ids", n)
	if !decode {
		g.Targets = b.IntInput("targets", n)
	}
	embed := param("model.embed_tokens.weight")
	x := b.Embedding(g.IDs, embed)
	for i := 0; i < c.NumHiddenLayers; i++ {
		if !gc.CheckpointLayers {
			x = m.layer(b, gc, linear, param, i, x)
			continue
		}
		// the layer's weights are bound to its own graph's params; only
		// the trainable ones are nodes of this graph
		sameAs := func(name string) string { return strings.Replace(name, LayerPrefix(i), "layers.*.", 1) }
		var trained map[string]*G.Node
		x, trained = b.Checkpoint(x, sameAs, func(lb *nn.Builder, x *G.Node) *G.Node {
			return m.layer(lb, gc, linear, func(name string) *G.Node { return m.param(lb, gc, name) }, i, x)
		})
		maps.Copy(g.Params, trained)
	}
	if decode && gc.Outputs > 0 {
		g.Outputs = b.IntInput("outputs", gc.Outputs)
		x = b.Rows(x, g.Outputs)
	}
	x = b.RMSNorm(x, param("model.norm.weight"), c.RMSNormEps)
	head := embed
	if !c.TieWordEmbeddings {
		head = param("lm_head.weight")
	}
	if decode {
		g.Logits = linear(b, "lm_head", x, head, nil)
		return g, nil
	}
	if gc.SequenceLogProbs || gc.SequenceLoss != nil {
		if gc.FusedHead { // the logits in blocks, never [N, vocab] at once
			g.LogProbs = b.SequenceLogProbsHead(x, head, g.Targets, gc.Batch, gc.HeadChunk)
		} else {
			g.Logits = linear(b, "lm_head", x, head, nil)
			g.LogProbs = b.SequenceLogProbs(g.Logits, g.Targets, gc.Batch)
		}
		if gc.SequenceLoss != nil {
			g.Loss = b.HostLoss(g.LogProbs, gc.SequenceLoss)
		}
		return g, nil
	}
	if gc.FusedHead {
		g.Loss = b.LMHeadLoss(x, head, g.Targets, gc.LossGrad, gc.HeadChunk)
		return g, nil
	}
	g.Logits = linear(b, "lm_head", x, head, nil)
	g.Loss = b.CrossEntropy(g.Logits, g.Targets)
	return g, nil
}

// param adds the weight name to b: 16- and 4-bit weights frozen by construction,
// fp32 ones trainable as gc says.
func (m *Model) param(b *nn.Builder, gc GraphConfig, name string) *G.Node {
	w, ok := m.Weights[name]
	if !ok {
		panic("model: no weight " + name) // Specs and Load guarantee every name
	}
	if w.Bits != nil {
		return b.Param16(name, w.Shape, w.Bits, w.Format)
	}
	if w.Q4 != nil {
		return b.Param4(name, w.Q4)
	}
	return b.Param(name, w.Shape, w.Data, gc.Trainable != nil && gc.Trainable(name))
}

// layer adds decoder layer i to b, reading the residual stream x [N, D]
// and returning it updated.
func (m *Model) layer(b *nn.Builder, gc GraphConfig, linear LinearFunc, param func(string) *G.Node, i int, x *G.Node) *G.Node {
	c := m.Config
	attn := nn.AttentionShape{Batch: gc.Batch, SeqLen: gc.SeqLen, Heads: c.NumAttentionHeads, KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDimension(),
		Positions: gc.Positions, Window: c.SlidingWindow, Cache: gc.Cache, Layer: i}
	invFreq := c.InvFreq()
	rope := func(x *G.Node, heads int) *G.Node {
		if gc.Cache != nil { // each row at its place in its sequence
			return b.RopeCached(x, heads, gc.Cache)
		}
		return b.RopeFreqs(x, heads, gc.SeqLen, invFreq, gc.Positions)
	}
	p := LayerPrefix(i)
	lin := func(short string, in *G.Node) *G.Node {
		mod := ModulePath(i, short)
		var bias *G.Node
		if c.Bias(short) {
			bias = param(mod + ".bias")
		}
		return linear(b, mod, in, param(mod+".weight"), bias)
	}
	h := b.RMSNorm(x, param(p+"input_layernorm.weight"), c.RMSNormEps)
	q, k := lin("q_proj", h), lin("k_proj", h)
	if c.QKNorm { // qwen3: each head of q and k normalized before the rotation
		q = b.RMSNormHeads(q, param(p+"self_attn.q_norm.weight"), c.NumAttentionHeads, c.RMSNormEps)
		k = b.RMSNormHeads(k, param(p+"self_attn.k_norm.weight"), c.NumKeyValueHeads, c.RMSNormEps)
	}
	q, k = rope(q, c.NumAttentionHeads), rope(k, c.NumKeyValueHeads)
	v := lin("v_proj", h)
	x = b.Add(x, lin("o_proj", b.Attention(q, k, v, attn)))

	h = b.RMSNorm(x, param(p+"post_attention_layernorm.weight"), c.RMSNormEps)
	return b.Add(x, lin("down_proj", b.SwiGLU(lin("gate_proj", h), lin("up_proj", h))))
}
