package model

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
)

// Decoder generates text with the model's one graph (Build) in its
// decoding form: a key/value cache (nn.KVCache) keeps every layer's keys
// and values, so a prompt costs one pass and each new token one row, and
// each step runs the ops, kernels and rounding points of the training
// forward, under the same precision policy and adapter modules
// (DecodeConfig). A Decoder serves one generation at a time.
type Decoder struct {
	m      *Model
	eng    *nn.Engine
	cfg    DecodeConfig
	cache  *nn.KVCache
	graphs []*decodeGraph // built graphs, the most recently used first
	// maxRows caps the rows one run computes: a decoding graph holds every
	// op's output, so its memory grows with its rows times the layers.
	maxRows int
	// Stop are the ids that end a generation (not returned): the config's
	// eos_token_id, or every end-of-sequence id generation_config.json
	// lists (Llama 3 ends a turn with <|eot_id|> and a document with
	// <|end_of_text|>).
	Stop []int
}

// DecodeConfig is how a Decoder computes, as a training graph would: a
// precision policy (nil or fp32: everything in fp32) and the linear
// modules' function (nil: plain matmuls; an adapter's, unmerged).
type DecodeConfig struct {
	Policy *amp.Policy
	Linear LinearFunc
	// Device, when set, runs the graphs on another engine than the CPU's
	// (the Vulkan engine, which keeps the cache on its device); they are
	// built exactly as for the CPU.
	Device DecodeDevice
}

// DecodeDevice compiles a decoding graph, b's, whose logits are node
// logits, for another engine (vkengine.Decoding.Compile). cache is the
// Decoder's: its SetRows says, before each run, which sequence each row
// continues.
type DecodeDevice func(logits *G.Node, b *nn.Builder, cache *nn.KVCache) (DecodeProgram, error)

// DecodeProgram is one decoding graph compiled for a DecodeDevice.
type DecodeProgram interface {
	Run(nn.Pass) error                   // computes the rows the cache's SetRows set
	Read(n *G.Node, dst []float32) error // reads a node's values (the logits)
	Close()
}

// decodeBudget is the activation memory one decoding run may take; it
// sets Decoder.maxRows (at least minDecodeRows, at most maxDecodeRows) and
// so how many prompt tokens are computed together.
const (
	decodeBudget  = 512 << 20
	minDecodeRows = 16
	maxDecodeRows = 1024
	// keptGraphs is how many graphs of different shapes a Decoder keeps:
	// the prompt's and the steps', and one spare as sequences finish.
	keptGraphs = 3
)

// NewDecoder prepares fp32 generation with weights w, by HF name, in
// place of m's own (merged adapters: see NewDecoderWith for unmerged
// ones); names w lacks, or all with a nil w, keep m's weights.
func NewDecoder(m *Model, w map[string][]float32, be blas.Backend) *Decoder {
	return NewDecoderWith(WithWeights(m, w), nn.NewEngine(be), DecodeConfig{})
}

// WithWeights is m with weights w, by HF name, in place of its own (fp32
// values of the same shapes: merged adapters); names w lacks keep m's.
// m itself is not changed.
func WithWeights(m *Model, w map[string][]float32) *Model {
	if w == nil {
		return m
	}
	mw := &Model{Config: m.Config, Weights: maps.Clone(m.Weights)}
	for name, data := range w {
		if t, ok := m.Weights[name]; ok {
			mw.Weights[name] = &Tensor{Shape: t.Shape, Data: data}
		}
	}
	return mw
}

// NewDecoderWith prepares generation with m's weights on eng, computing as
// cfg says.
func NewDecoderWith(m *Model, eng *nn.Engine, cfg DecodeConfig) *Decoder {
	c := m.Config
	hd := c.HeadDimension()
	// every op's output per row, with room for casts and biases
	perRow := 4 * (c.NumHiddenLayers*(8*c.HiddenSize+4*(c.NumAttentionHeads+c.NumKeyValueHeads)*hd+3*c.IntermediateSize) + c.VocabSize)
	return &Decoder{m: m, eng: eng, cfg: cfg, cache: nn.NewKVCache(c.NumHiddenLayers, c.NumKeyValueHeads*hd, c.InvFreq()),
		maxRows: min(max(decodeBudget/max(perRow, 1), minDecodeRows), maxDecodeRows), Stop: []int{c.EOSTokenID}}
}

// Sampling chooses the next token: greedy when Temperature is 0, else
// softmax(logits/Temperature) restricted to the TopK most likely (0: all).
type Sampling struct {
	Temperature float64
	TopK        int
	Seed        uint64
}

// Generate continues every prompt until a Stop id, maxNew new tokens, or
// the model's context length, and returns the new tokens (the stop id
// excluded).
func (d *Decoder) Generate(prompts [][]int, maxNew int, s Sampling) ([][]int, error) {
	return d.GenerateContext(context.Background(), prompts, maxNew, s)
}

// GenerateContext is Generate that stops with ctx.Err() before the next
// token, and between the runs of a long prefill, once ctx is cancelled.
func (d *Decoder) GenerateContext(ctx context.Context, prompts [][]int, maxNew int, s Sampling) ([][]int, error) {
	c := d.m.Config
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("prompt %d is empty", i)
		}
		if len(p) >= c.MaxPositionEmbeddings {
			return nil, fmt.Errorf("prompt %d has %d tokens; the model's context is %d", i, len(p), c.MaxPositionEmbeddings)
		}
		if err := d.inVocabulary(p); err != nil {
			return nil, fmt.Errorf("prompt %d: %w", i, err)
		}
	}
	d.cache.Reset()
	longest := 0
	for _, p := range prompts {
		d.cache.Add()
		longest = max(longest, len(p))
	}
	d.cache.Reserve(min(longest+maxNew, c.MaxPositionEmbeddings))
	rng := rand.New(rand.NewPCG(s.Seed, 0x5eed))
	out := make([][]int, len(prompts))
	// prefill: every prompt token; then one token per live sequence
	fresh := slices.Clone(prompts)
	for step := 0; step < maxNew; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		logits, err := d.feed(ctx, fresh)
		if err != nil {
			return nil, err
		}
		live := false
		for i, lg := range logits {
			if lg == nil { // finished
				fresh[i] = nil
				continue
			}
			next := pick(lg, s, rng)
			stop := slices.Contains(d.Stop, next)
			if !stop {
				out[i] = append(out[i], next)
			}
			if stop || d.cache.Len(i)+1 >= c.MaxPositionEmbeddings {
				fresh[i] = nil
				d.cache.Drop(i)
				continue
			}
			fresh[i] = []int{next}
			live = true
		}
		if !live {
			break
		}
	}
	return out, nil
}

// decodeRow is one token of a run: the sequence it continues, and whether
// the run returns its logits.
type decodeRow struct {
	seq, id int
	logits  bool
}

// feed runs the new tokens of every sequence through the model and
// returns each sequence's logits after its last new token (nil for a
// sequence with none). Cancelling ctx stops it between runs with
// ctx.Err(), the cache part filled: the caller must not go on.
func (d *Decoder) feed(ctx context.Context, fresh [][]int) ([][]float32, error) {
	var rows []decodeRow
	for i, f := range fresh {
		for j, id := range f {
			rows = append(rows, decodeRow{seq: i, id: id, logits: j == len(f)-1})
		}
	}
	logits, err := d.runRows(ctx, rows)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(fresh))
	for _, r := range rows {
		if r.logits {
			out[r.seq], logits = logits[0], logits[1:]
		}
	}
	return out, nil
}

// runRows puts rows through the model in runs of at most maxRows and
// returns the logits of the rows that ask for them, in order. Cancelling
// ctx stops it between runs with ctx.Err().
func (d *Decoder) runRows(ctx context.Context, rows []decodeRow) ([][]float32, error) {
	var out [][]float32
	for len(rows) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(len(rows), d.maxRows)
		logits, err := d.run(rows[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, logits...)
		rows = rows[n:]
	}
	return out, nil
}

// Logits returns the logits after each token of tokens, fed through the
// cache as Generate feeds a prompt and its continuation: the first
// prefill tokens in one run (all of them, up to the rows a run holds, when
// prefill ≥ len(tokens)), then one token per run. The logits at every
// position are what the training graph's forward computes on the same
// tokens, to the order of fp32 sums; a whole sequence in one run of one
// sequence is that forward's computation, call for call, and gives its
// bits.
func (d *Decoder) Logits(tokens []int, prefill int) ([][]float32, error) {
	c := d.m.Config
	if len(tokens) == 0 || len(tokens) > c.MaxPositionEmbeddings {
		return nil, fmt.Errorf("%d tokens: the model takes 1 to %d (its context)", len(tokens), c.MaxPositionEmbeddings)
	}
	if err := d.inVocabulary(tokens); err != nil {
		return nil, err
	}
	d.cache.Reset()
	d.cache.Add()
	d.cache.Reserve(len(tokens))
	var out [][]float32
	for p := 0; p < len(tokens); {
		n := 1
		if p == 0 {
			n = min(max(prefill, 1), len(tokens))
		}
		rows := make([]decodeRow, n)
		for i := range rows {
			rows[i] = decodeRow{id: tokens[p+i], logits: true}
		}
		logits, err := d.runRows(context.Background(), rows)
		if err != nil {
			return nil, err
		}
		out = append(out, logits...)
		p += n
	}
	return out, nil
}

// inVocabulary checks that every id is a token of the model's vocabulary.
func (d *Decoder) inVocabulary(ids []int) error {
	for _, id := range ids {
		if id < 0 || id >= d.m.Config.VocabSize {
			return fmt.Errorf("token id %d is outside the vocabulary (size %d)", id, d.m.Config.VocabSize)
		}
	}
	return nil
}

// decodeGraph is a decoding graph of one shape: rows new tokens, of which
// outputs get logits; ids and picks are its inputs' backing.
type decodeGraph struct {
	rows, outputs int
	g             *Graph
	vm            G.VM          // on the CPU engine, or
	prog          DecodeProgram // on a DecodeDevice, reading its logits into logits
	logits        []float32
	ids, picks    []int
}

func (dg *decodeGraph) close() {
	if dg.prog != nil {
		dg.prog.Close()
		return
	}
	dg.vm.Close()
}

// run puts rows, adjacent for each sequence, through a graph of their
// shape, appending to the cache, and returns the logits of the rows that
// ask for them, in order (each slice its own).
func (d *Decoder) run(rows []decodeRow) ([][]float32, error) {
	var seqs, picks []int
	for i, r := range rows {
		seqs = append(seqs, r.seq)
		if r.logits {
			picks = append(picks, i)
		}
	}
	asked := len(picks)
	if asked == 0 { // a piece of a long prompt: the head on one row, unread, not on all
		picks = []int{len(rows) - 1}
	}
	dg, err := d.graph(len(rows), len(picks))
	if err != nil {
		return nil, err
	}
	for i, r := range rows {
		dg.ids[i] = r.id
	}
	copy(dg.picks, picks)
	if err := d.cache.SetRows(seqs); err != nil {
		return nil, err
	}
	var all []float32
	if dg.prog != nil {
		if err := dg.prog.Run(nn.Pass{}); err != nil {
			return nil, fmt.Errorf("decode %d tokens: %w", len(rows), err)
		}
		if err := dg.prog.Read(dg.g.Logits, dg.logits); err != nil {
			return nil, fmt.Errorf("decode %d tokens: %w", len(rows), err)
		}
		all = dg.logits
	} else {
		dg.vm.Reset()
		if err := dg.vm.RunAll(); err != nil {
			return nil, fmt.Errorf("decode %d tokens: %w", len(rows), err)
		}
		all = dg.g.Logits.Value().Data().([]float32)
	}
	V := d.m.Config.VocabSize
	out := make([][]float32, asked)
	for i := range out {
		out[i] = slices.Clone(all[i*V : (i+1)*V])
	}
	return out, nil
}

// graph returns the decoding graph for rows tokens with outputs logits,
// built on first use; the least recently used beyond keptGraphs is let go.
func (d *Decoder) graph(rows, outputs int) (*decodeGraph, error) {
	for i, dg := range d.graphs {
		if dg.rows == rows && dg.outputs == outputs {
			copy(d.graphs[1:i+1], d.graphs[:i])
			d.graphs[0] = dg
			return dg, nil
		}
	}
	b := nn.NewBuilder(d.eng, tensor.Float32)
	if p := d.cfg.Policy; p != nil && p.Low != amp.FP32 {
		b.Policy = p
	}
	gc := GraphConfig{Batch: rows, SeqLen: 1, Linear: d.cfg.Linear, Cache: d.cache}
	if outputs < rows {
		gc.Outputs = outputs
	}
	g, err := d.m.Build(b, gc)
	if err != nil {
		return nil, err
	}
	dg := &decodeGraph{rows: rows, outputs: outputs, g: g, ids: make([]int, rows), picks: make([]int, outputs)}
	if err := G.Let(g.IDs, tensor.New(tensor.WithShape(rows), tensor.WithBacking(dg.ids))); err != nil {
		return nil, err
	}
	if g.Outputs != nil {
		if err := G.Let(g.Outputs, tensor.New(tensor.WithShape(outputs), tensor.WithBacking(dg.picks))); err != nil {
			return nil, err
		}
	}
	if d.cfg.Device != nil {
		if dg.prog, err = d.cfg.Device(g.Logits, b, d.cache); err != nil {
			return nil, err
		}
		dg.logits = make([]float32, g.Logits.Shape().TotalSize())
	} else {
		dg.vm = nn.NewTapeMachine(b.Eng, b.G)
	}
	d.graphs = append([]*decodeGraph{dg}, d.graphs...)
	if len(d.graphs) > keptGraphs {
		d.graphs[keptGraphs].close()
		d.graphs = d.graphs[:keptGraphs]
	}
	return dg, nil
}

// Close lets go of the graphs the Decoder built (a DecodeDevice's
// buffers); it may not be used after.
func (d *Decoder) Close() {
	for _, dg := range d.graphs {
		dg.close()
	}
	d.graphs = nil
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
	if len(tokens) < 2 {
		return nil, fmt.Errorf("log-probabilities need at least 2 tokens, got %d", len(tokens))
	}
	if c := d.m.Config; len(tokens) > c.MaxPositionEmbeddings {
		return nil, fmt.Errorf("%d tokens are more than the model's context (%d)", len(tokens), c.MaxPositionEmbeddings)
	}
	if err := d.inVocabulary(tokens); err != nil {
		return nil, err
	}
	logits, err := d.Logits(tokens[:len(tokens)-1], 1)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(logits))
	for i, lg := range logits {
		out[i] = logSoftmaxAt(lg, tokens[i+1])
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
