package model

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
)

// Decoder generates text with a key/value cache: each new token costs one
// row through the model instead of a pass over the whole sequence. It
// reads plain fp32 weights (adapters merged in by the caller) and runs the
// same kernels as the training graph.
type Decoder struct {
	cfg     Config
	w       map[string][]float32
	be      blas.Backend
	invFreq []float32
	rope    nn.RopeTable[float32] // grown to the longest sequence generated, not max_position_embeddings
	// Stop are the ids that end a generation (not returned): the config's
	// eos_token_id, or every end-of-sequence id generation_config.json
	// lists (Llama 3 ends a turn with <|eot_id|> and a document with
	// <|end_of_text|>).
	Stop []int
}

// NewDecoder prepares generation with weights w, by HF name; a nil w uses
// m's own weights.
func NewDecoder(m *Model, w map[string][]float32, be blas.Backend) *Decoder {
	if w == nil {
		w = map[string][]float32{}
		for name, t := range m.Weights {
			w[name] = t.Float32()
		}
	}
	c := m.Config
	return &Decoder{cfg: c, w: w, be: be, invFreq: c.InvFreq(), Stop: []int{c.EOSTokenID}}
}

// Sampling chooses the next token: greedy when Temperature is 0, else
// softmax(logits/Temperature) restricted to the TopK most likely (0: all).
type Sampling struct {
	Temperature float64
	TopK        int
	Seed        uint64
}

// sequence is one generation in flight: its tokens so far and its cache,
// [layer][position · kvDim].
type sequence struct {
	tokens []int
	k, v   [][]float32
	done   bool
}

// Generate continues every prompt until a Stop id, maxNew new tokens, or
// the model's context length, and returns the new tokens (the stop id
// excluded).
func (d *Decoder) Generate(prompts [][]int, maxNew int, s Sampling) ([][]int, error) {
	return d.GenerateContext(context.Background(), prompts, maxNew, s)
}

// GenerateContext is Generate that stops with ctx.Err() before the next
// token once ctx is cancelled.
func (d *Decoder) GenerateContext(ctx context.Context, prompts [][]int, maxNew int, s Sampling) ([][]int, error) {
	c := d.cfg
	seqs := make([]*sequence, len(prompts))
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("prompt %d is empty", i)
		}
		if len(p) >= c.MaxPositionEmbeddings {
			return nil, fmt.Errorf("prompt %d has %d tokens; the model's context is %d", i, len(p), c.MaxPositionEmbeddings)
		}
		for _, id := range p {
			if id < 0 || id >= c.VocabSize {
				return nil, fmt.Errorf("prompt %d: token id %d is outside the vocabulary (size %d)", i, id, c.VocabSize)
			}
		}
		seqs[i] = &sequence{tokens: slices.Clone(p), k: make([][]float32, c.NumHiddenLayers), v: make([][]float32, c.NumHiddenLayers)}
	}
	longest := 0
	for _, p := range prompts {
		longest = max(longest, len(p))
	}
	d.ropeFor(min(longest+maxNew, c.MaxPositionEmbeddings))
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	out := make([][]int, len(prompts))
	// prefill: every prompt token; then one token per live sequence
	fresh := make([][]int, len(seqs))
	for i, q := range seqs {
		fresh[i] = q.tokens
	}
	for step := 0; step < maxNew; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		logits := d.forwardContext(ctx, seqs, fresh)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		live := false
		for i, q := range seqs {
			if q.done {
				fresh[i] = nil
				continue
			}
			next := pick(logits[i], s, rng)
			stop := slices.Contains(d.Stop, next)
			if stop || len(q.tokens)+1 >= c.MaxPositionEmbeddings {
				q.done = true
			}
			if !stop {
				out[i] = append(out[i], next)
				q.tokens = append(q.tokens, next)
			}
			fresh[i] = []int{next}
			if q.done {
				fresh[i] = nil
			} else {
				live = true
			}
		}
		if !live {
			break
		}
	}
	return out, nil
}

// ropeFor makes the rotary table cover n positions: built for the lengths
// generated, not for a 128k context that one generation never reaches.
func (d *Decoder) ropeFor(n int) {
	if len(d.rope.Cos) < n*len(d.invFreq) {
		d.rope = nn.NewRopeTableFreqs[float32](n, d.invFreq)
	}
}

// forward runs the new tokens of every sequence through the model at
// their positions, appending to the caches, and returns each sequence's
// logits after its last new token (nil for a sequence with none).
func (d *Decoder) forward(seqs []*sequence, fresh [][]int) [][]float32 {
	return d.forwardContext(context.Background(), seqs, fresh)
}

// forwardContext is forward that gives up between layers once ctx is
// cancelled (a prefill of many prompts takes seconds), returning nil and
// leaving the caches part filled: the caller must check ctx.
func (d *Decoder) forwardContext(ctx context.Context, seqs []*sequence, fresh [][]int) [][]float32 {
	c := d.cfg
	D, hd := c.HiddenSize, c.HeadDimension()
	qw, kw := c.NumAttentionHeads*hd, c.NumKeyValueHeads*hd
	// rows of all sequences' new tokens, stacked: row r belongs to seq owner[r] at position pos[r]
	var owner, pos, ids []int
	for i, f := range fresh {
		start := len(seqs[i].k[0]) / kw // tokens already in the cache
		for j, id := range f {
			owner, pos, ids = append(owner, i), append(pos, start+j), append(ids, id)
		}
	}
	n := len(ids)
	if n == 0 {
		return make([][]float32, len(seqs))
	}
	add := func(dst, src []float32) {
		for i := range dst {
			dst[i] += src[i]
		}
	}
	x := make([]float32, n*D)
	emb := d.w["model.embed_tokens.weight"]
	for r, id := range ids {
		copy(x[r*D:(r+1)*D], emb[id*D:(id+1)*D])
	}
	h := make([]float32, n*D)
	q, k, v := make([]float32, n*qw), make([]float32, n*kw), make([]float32, n*kw)
	att := make([]float32, n*qw)
	f := c.IntermediateSize
	g, u := make([]float32, n*f), make([]float32, n*f)
	linear := func(y, in []float32, path string, out, inF int) {
		blas.Gemm(d.be, false, true, n, out, inF, 1, in, inF, d.w[path+".weight"], inF, 0, y, out)
		if bias, ok := d.w[path+".bias"]; ok {
			for r := 0; r < n; r++ {
				add(y[r*out:(r+1)*out], bias)
			}
		}
	}
	d.ropeFor(slices.Max(pos) + 1)
	at := func(r int) int { return pos[r] }
	for l := 0; l < c.NumHiddenLayers; l++ {
		if ctx.Err() != nil {
			return nil
		}
		p := LayerPrefix(l)
		nn.RMSNormRows(h, x, d.w[p+"input_layernorm.weight"], D, c.RMSNormEps)
		linear(q, h, ModulePath(l, "q_proj"), qw, D)
		linear(k, h, ModulePath(l, "k_proj"), kw, D)
		linear(v, h, ModulePath(l, "v_proj"), kw, D)
		if c.QKNorm {
			nn.RMSNormRows(q, q, d.w[p+"self_attn.q_norm.weight"], hd, c.RMSNormEps)
			nn.RMSNormRows(k, k, d.w[p+"self_attn.k_norm.weight"], hd, c.RMSNormEps)
		}
		d.rope.RotateRows(q, c.NumAttentionHeads, at, 1)
		d.rope.RotateRows(k, c.NumKeyValueHeads, at, 1)
		for r := 0; r < n; r++ {
			s := seqs[owner[r]]
			s.k[l] = append(s.k[l], k[r*kw:(r+1)*kw]...)
			s.v[l] = append(s.v[l], v[r*kw:(r+1)*kw]...)
		}
		d.attend(att, q, seqs, owner, pos, l)
		linear(h, att, ModulePath(l, "o_proj"), D, qw)
		add(x, h)
		nn.RMSNormRows(h, x, d.w[p+"post_attention_layernorm.weight"], D, c.RMSNormEps)
		linear(g, h, ModulePath(l, "gate_proj"), f, D)
		linear(u, h, ModulePath(l, "up_proj"), f, D)
		nn.SwiGLUInto(g, g, u)
		linear(h, g, ModulePath(l, "down_proj"), D, f)
		add(x, h)
	}
	// logits only for each sequence's last new row
	head := d.w["lm_head.weight"]
	if c.TieWordEmbeddings {
		head = emb
	}
	out := make([][]float32, len(seqs))
	for r := 0; r < n; r++ {
		if r+1 < n && owner[r+1] == owner[r] {
			continue
		}
		hr := make([]float32, D)
		nn.RMSNormRows(hr, x[r*D:(r+1)*D], d.w["model.norm.weight"], D, c.RMSNormEps)
		lg := make([]float32, c.VocabSize)
		blas.Gemm(d.be, false, true, 1, c.VocabSize, D, 1, hr, D, head, D, 0, lg, c.VocabSize)
		out[owner[r]] = lg
	}
	return out
}

// attend computes causal attention of each new row against its
// sequence's cache, which already holds the row's own key and value.
func (d *Decoder) attend(out, q []float32, seqs []*sequence, owner, pos []int, layer int) {
	c := d.cfg
	hd := c.HeadDimension()
	qw, kw := c.NumAttentionHeads*hd, c.NumKeyValueHeads*hd
	group := c.NumAttentionHeads / c.NumKeyValueHeads
	scale := 1 / math.Sqrt(float64(hd))
	var scores []float64
	for r := range owner {
		K, V := seqs[owner[r]].k[layer], seqs[owner[r]].v[layer]
		if len(scores) <= pos[r] {
			scores = make([]float64, pos[r]+1)
		}
		first := 0 // a sliding window sees the window's tokens only
		if c.SlidingWindow > 0 {
			first = max(0, pos[r]-c.SlidingWindow+1)
		}
		for h := 0; h < c.NumAttentionHeads; h++ {
			qh := q[r*qw+h*hd : r*qw+(h+1)*hd]
			kv := (h / group) * hd
			m := math.Inf(-1)
			for j := first; j <= pos[r]; j++ {
				var dot float64
				kj := K[j*kw+kv : j*kw+kv+hd]
				for e := range qh {
					dot += float64(qh[e]) * float64(kj[e])
				}
				scores[j] = dot * scale
				m = max(m, scores[j])
			}
			var z float64
			for j := first; j <= pos[r]; j++ {
				scores[j] = math.Exp(scores[j] - m)
				z += scores[j]
			}
			o := out[r*qw+h*hd : r*qw+(h+1)*hd]
			clear(o)
			for j := first; j <= pos[r]; j++ {
				wj := float32(scores[j] / z)
				vj := V[j*kw+kv : j*kw+kv+hd]
				for e := range o {
					o[e] += wj * vj[e]
				}
			}
		}
	}
}

// pick chooses the next token from logits.
func pick(logits []float32, s Sampling, rng *rand.Rand) int {
	if s.Temperature <= 0 {
		best := 0
		for i, l := range logits {
			if l > logits[best] {
				best = i
			}
		}
		return best
	}
	idx := make([]int, len(logits))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case logits[a] > logits[b]:
			return -1
		case logits[a] < logits[b]:
			return 1
		}
		return 0
	})
	if s.TopK > 0 && s.TopK < len(idx) {
		idx = idx[:s.TopK]
	}
	probs := make([]float64, len(idx))
	m := float64(logits[idx[0]])
	var z float64
	for i, id := range idx {
		probs[i] = math.Exp((float64(logits[id]) - m) / s.Temperature)
		z += probs[i]
	}
	u := rng.Float64() * z
	for i, p := range probs {
		if u -= p; u < 0 {
			return idx[i]
		}
	}
	return idx[len(idx)-1]
}

// LogProbs returns the log-probability the model gives each token of
// tokens after the ones before it: element i is log p(tokens[i+1] |
// tokens[:i+1]), computed in float64 from the fp32 logits, feeding one
// token at a time through the cache as generation does. Exports compare
// their readers' probabilities against these.
func (d *Decoder) LogProbs(tokens []int) ([]float64, error) {
	c := d.cfg
	if len(tokens) < 2 {
		return nil, fmt.Errorf("log-probabilities need at least 2 tokens, got %d", len(tokens))
	}
	if len(tokens) > c.MaxPositionEmbeddings {
		return nil, fmt.Errorf("%d tokens are more than the model's context (%d)", len(tokens), c.MaxPositionEmbeddings)
	}
	for _, id := range tokens {
		if id < 0 || id >= c.VocabSize {
			return nil, fmt.Errorf("token id %d is outside the vocabulary (size %d)", id, c.VocabSize)
		}
	}
	d.ropeFor(len(tokens))
	s := &sequence{k: make([][]float32, c.NumHiddenLayers), v: make([][]float32, c.NumHiddenLayers)}
	out := make([]float64, len(tokens)-1)
	for i := range out {
		logits := d.forward([]*sequence{s}, [][]int{{tokens[i]}})[0]
		out[i] = logSoftmaxAt(logits, tokens[i+1])
	}
	return out, nil
}

// logSoftmaxAt is log softmax(logits)[id] in float64.
func logSoftmaxAt(logits []float32, id int) float64 {
	m := math.Inf(-1)
	for _, l := range logits {
		m = math.Max(m, float64(l))
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l) - m)
	}
	return float64(logits[id]) - m - math.Log(sum)
}
