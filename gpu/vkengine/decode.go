package vkengine

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// DecodeCache is an nn.KVCache's keys and values on the device: decoding
// graphs of every shape a Decoder builds (the prompt's, the steps') read
// and extend the same cache, so they share one DecodeCache (WithCache).
// The nn.KVCache keeps the bookkeeping, which sequence each row of a run
// continues and at which position; the device holds the values, each
// layer's as [slots, capacity, KVHeads·HeadDim] float32, slot s for
// sequence s. Before each run (Program.Run) the cache grows to hold the
// run's rows, copying what it held, and the rows' slots and positions go
// up, as does the rotation table when the capacity grows.
type DecodeCache struct {
	e          *Engine
	c          *nn.KVCache
	slots, cap int
	k, v       []*vulkan.Buffer // per layer
	// the run's rows: each one's slot and position, and how many the
	// buffers hold
	slot, pos *vulkan.Buffer
	rows      int
	scratch   *vulkan.Buffer // attention's scores, rows × heads × cap
	table     *vulkan.Buffer // rope's cos and sin for cap positions
	// prefill: the run starts every sequence it holds (prefillRun), so
	// attention runs on the training kernel over the run's own keys, its
	// statistics in stats, with no scores buffer; noPrefill (tests) keeps
	// every run on the cache kernel, to compare
	prefill, noPrefill bool
	stats              *vulkan.Buffer
}

// NewDecodeCache keeps c's keys and values on e's device.
func NewDecodeCache(e *Engine, c *nn.KVCache) *DecodeCache {
	return &DecodeCache{e: e, c: c}
}

// WithCache compiles a decoding graph (model.Build with a Cache) whose
// attention and rotations read and extend dc, whose nn.KVCache must be the
// graph's.
func WithCache(dc *DecodeCache) CompileOption {
	return func(p *Program) { p.cache = dc }
}

// Close frees the cache's buffers.
func (dc *DecodeCache) Close() {
	for _, b := range append(append([]*vulkan.Buffer{dc.slot, dc.pos, dc.scratch, dc.table, dc.stats}, dc.k...), dc.v...) {
		if b != nil {
			b.Free()
		}
	}
	dc.k, dc.v, dc.slot, dc.pos, dc.scratch, dc.table, dc.stats = nil, nil, nil, nil, nil, nil, nil
	dc.slots, dc.cap, dc.rows = 0, 0, 0
}

// prepare readies the cache for the run SetRows set: room for every
// sequence and position the run reaches (Reserve's tokens at least, so
// that a generation grows it once), the run's slots and positions on the
// device, and for attention of heads heads either scores for every row
// over the capacity (the cache kernel) or, for a run that starts its
// sequences (prefillRun) where tiled allows the training kernel, each
// row's statistics. It runs between runs, when the device is idle.
func (dc *DecodeCache) prepare(heads int, tiled bool) error {
	seq, pos := dc.c.Run()
	top := 0
	for _, p := range pos {
		top = max(top, p+1)
	}
	slots := dc.c.Sequences()
	if slots == 0 || len(seq) == 0 {
		return fmt.Errorf("vkengine: decoding run with no rows set (KVCache.SetRows)")
	}
	if top > dc.cap || slots > dc.slots {
		capacity := dc.cap
		if top > capacity {
			capacity = max(top, dc.c.Reserved(), 2*dc.cap)
		}
		if err := dc.grow(max(slots, dc.slots), capacity); err != nil {
			return err
		}
	}
	rows := len(seq)
	if rows > dc.rows {
		for _, b := range []*vulkan.Buffer{dc.slot, dc.pos} {
			if b != nil {
				b.Free()
			}
		}
		dc.slot, dc.pos, dc.rows = nil, nil, 0
		var err error
		if dc.slot, err = dc.e.Device.NewBuffer(4 * rows); err != nil {
			return err
		}
		if dc.pos, err = dc.e.Device.NewBuffer(4 * rows); err != nil {
			return err
		}
		dc.rows = rows
	}
	dc.prefill = tiled && !dc.noPrefill && prefillRun(seq, pos)
	scratch, need := &dc.scratch, 4*rows*heads*dc.cap // every row's scores over the capacity
	if dc.prefill {
		scratch, need = &dc.stats, 4*rows*heads*2 // every row's maximum and sum
	}
	if *scratch == nil || (*scratch).Size() < need {
		if *scratch != nil {
			(*scratch).Free()
			*scratch = nil
		}
		var err error
		if *scratch, err = dc.e.Device.NewBuffer(need); err != nil {
			return err
		}
	}
	if err := writeInt32(dc.slot, seq); err != nil {
		return err
	}
	return writeInt32(dc.pos, pos)
}

// prefillRun reports whether a run's rows (each one's sequence and
// position) start every sequence they hold: each sequence's rows one
// after another, at positions 0, 1, …, and no sequence twice. Its
// attention is then causal attention over packed documents, each row over
// its own sequence's rows of the run, which the training kernel computes
// tile by tile (memory for rows, not for rows × capacity); a generation's
// prompts are such a run.
func prefillRun(seq, pos []int) bool {
	if len(seq) == 0 || pos[0] != 0 { // a decoding step: no set to make
		return false
	}
	seen := map[int]bool{}
	for i := range seq {
		if i > 0 && seq[i] == seq[i-1] {
			if pos[i] != pos[i-1]+1 {
				return false
			}
			continue
		}
		if pos[i] != 0 || seen[seq[i]] {
			return false
		}
		seen[seq[i]] = true
	}
	return len(seq) > 0
}

// grow remakes the cache with room for slots sequences of capacity
// tokens, the values it held copied over, and the rotation table for
// capacity positions.
func (dc *DecodeCache) grow(slots, capacity int) error {
	w := 4 * dc.c.Width()
	k := make([]*vulkan.Buffer, dc.c.Layers())
	v := make([]*vulkan.Buffer, dc.c.Layers())
	free := func() {
		for _, b := range append(k, v...) {
			if b != nil {
				b.Free()
			}
		}
	}
	for l := range k {
		var err error
		if k[l], err = dc.e.Device.NewBuffer(slots * capacity * w); err != nil {
			free()
			return fmt.Errorf("vkengine: key/value cache of %d sequences × %d tokens: %w", slots, capacity, err)
		}
		if v[l], err = dc.e.Device.NewBuffer(slots * capacity * w); err != nil {
			free()
			return fmt.Errorf("vkengine: key/value cache of %d sequences × %d tokens: %w", slots, capacity, err)
		}
	}
	if dc.slots > 0 {
		err := dc.e.Submit(func(r *vulkan.Recorder) error {
			for l := range k {
				for s := range dc.slots {
					old, now := uint64(s*dc.cap*w), uint64(s*capacity*w)
					if err := r.Copy(k[l], now, dc.k[l], old, uint64(dc.cap*w)); err != nil {
						return err
					}
					if err := r.Copy(v[l], now, dc.v[l], old, uint64(dc.cap*w)); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			free()
			return err
		}
	}
	if capacity != dc.cap {
		vals := ropeTableValues(capacity, dc.c.InvFreq())
		table, err := dc.e.Device.NewBuffer(4 * len(vals))
		if err != nil {
			free()
			return err
		}
		if err := table.WriteFloat32(0, vals); err != nil {
			table.Free()
			free()
			return err
		}
		if dc.table != nil {
			dc.table.Free()
		}
		dc.table = table
	}
	for _, b := range append(dc.k, dc.v...) {
		b.Free()
	}
	dc.k, dc.v, dc.slots, dc.cap = k, v, slots, capacity
	return nil
}

// shape is the device shape of a run of the attention op a.
func (dc *DecodeCache) shape(a nn.AttentionCacheAttrs) vulkan.CacheShape {
	return vulkan.CacheShape{Rows: a.Rows, Slots: dc.slots, Cap: dc.cap, Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim,
		Window: a.Window, Slot: dc.slot, Pos: dc.pos}
}

func writeInt32(b *vulkan.Buffer, src []int) error { return b.Write(0, int32Bytes(src)) }

// lowerAttentionCache appends the run's keys and values to the layer's
// cache, then attends each row over its sequence's tokens.
func lowerAttentionCache(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.AttentionCacheAttrs)
	dc := p.top().cache
	if dc == nil || dc.c != a.Cache {
		return nil, fmt.Errorf("%w: a decoding graph's attention needs its KV cache on the device (WithCache)", ErrUnsupported)
	}
	if a.Layer < 0 || a.Layer >= dc.c.Layers() || a.KVHeads*a.HeadDim != dc.c.Width() {
		return nil, fmt.Errorf("attention cache: layer %d of %d, %d×%d values a token for a cache of %d", a.Layer, dc.c.Layers(), a.KVHeads, a.HeadDim, dc.c.Width())
	}
	p.top().cacheHeads = max(p.top().cacheHeads, a.Heads)
	if a.HeadDim > vulkan.AttentionMaxHeadDim { // wider than the training kernel's builds
		p.top().cacheUntiled = true
	}
	f := vulkan.CacheFormats{Scores: rounding(a.Scores), Softmax: rounding(a.Softmax), Values: rounding(a.Values), Out: rounding(nd.spec.Out)}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		s := dc.shape(a)
		if err := p.e.Kernels.CacheAppend(r, s, nd.in[1], nd.in[2], dc.k[a.Layer], dc.v[a.Layer]); err != nil {
			return err
		}
		if dc.prefill {
			// the run's rows are its sequences whole: each a document, the
			// positions its rows' places in it
			as := vulkan.AttentionShape{Batch: 1, SeqLen: a.Rows, Heads: a.Heads, KVHeads: a.KVHeads, HeadDim: a.HeadDim, Window: a.Window,
				Positions: dc.pos, Scores: f.Scores, Softmax: f.Softmax, Values: f.Values}
			return p.e.Kernels.AttentionForward(r, as, nd.in[0], nd.in[1], nd.in[2], dc.stats, nd.out, f.Out)
		}
		return p.e.Kernels.CacheAttention(r, s, nd.in[0], dc.k[a.Layer], dc.v[a.Layer], dc.scratch, nd.out, f)
	}, nil
}

// lowerRopeCached rotates each row at its position in its sequence, with
// the cache's table (the CPU's angles, computed on the host).
func lowerRopeCached(p *Program, nd *node, a nn.RopeAttrs) (recordFunc, error) {
	dc := p.top().cache
	if dc == nil || dc.c != a.Cache {
		return nil, fmt.Errorf("%w: a decoding graph's rope reads its positions from a KV cache on the device (WithCache)", ErrUnsupported)
	}
	n := a.Rows * a.Heads * 2 * len(a.InvFreq)
	rnd := rounding(nd.spec.Out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		args := vulkan.RopeArgs{Rows: a.Rows, Heads: a.Heads, Half: len(a.InvFreq), SeqLen: dc.cap, Positions: dc.pos}
		if err := p.e.Kernels.Rope(r, nd.in[0], dc.table, nd.out, args); err != nil {
			return err
		}
		return p.e.Kernels.Round(r, nd.out, n, rnd)
	}, nil
}

// lowerRows gathers the rows the int input picks (each sequence's last
// new token, for the head).
func lowerRows(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.RowsAttrs)
	idx := nd.inN[1]
	t := vulkan.EmbeddingTable{Buf: nd.in[0], V: a.N, D: a.D}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := checkRows(idx, a.N); err != nil {
			return err
		}
		return p.e.Kernels.Embedding(r, nd.in[1], t, nd.out, a.M)
	}, nil
}

// checkRows refuses a row index outside [0, n), as the CPU's op does.
func checkRows(n *G.Node, rows int) error {
	idx, err := intsOf(n, "rows")
	if err != nil {
		return err
	}
	for i, r := range idx {
		if r < 0 || r >= rows {
			return fmt.Errorf("vkengine: rows: index %d (at %d) of %d rows", r, i, rows)
		}
	}
	return nil
}

// Weights are weights on the device by name, uploaded once and read by
// every program compiled with Share(w.Buffer): a Decoder's graphs of
// different shapes then hold one copy of the model between them.
type Weights struct {
	d    *vulkan.Device
	bufs map[string]*vulkan.Buffer
	// Up counts the bytes uploaded.
	Up int64
}

// NewWeights is an empty set of weights on d.
func NewWeights(d *vulkan.Device) *Weights {
	return &Weights{d: d, bufs: map[string]*vulkan.Buffer{}}
}

// Add uploads each weight of g (isParam) that w does not hold yet, by
// its node's name, but those elsewhere has (nil: none).
func (w *Weights) Add(g *G.ExprGraph, isParam func(*G.Node) bool, elsewhere func(name string) *vulkan.Buffer) error {
	for _, n := range g.AllNodes() {
		if n.Op() != nil || !isParam(n) || w.bufs[n.Name()] != nil || elsewhere != nil && elsewhere(n.Name()) != nil {
			continue
		}
		v := n.Value()
		if v == nil {
			return fmt.Errorf("vkengine: weight %s has no value", n.Name())
		}
		b, err := w.d.NewBuffer(max(4, (bytesOf(n)+3)&^3))
		if err != nil {
			return fmt.Errorf("vkengine: weight %s: %w", n.Name(), err)
		}
		up, err := writeValue(b, v)
		w.Up += up
		if err != nil {
			b.Free()
			return fmt.Errorf("vkengine: weight %s: %w", n.Name(), err)
		}
		w.bufs[n.Name()] = b
	}
	return nil
}

// Buffer is the weight named name, or nil.
func (w *Weights) Buffer(name string) *vulkan.Buffer { return w.bufs[name] }

// Close frees the weights.
func (w *Weights) Close() {
	for _, b := range w.bufs {
		b.Free()
	}
	clear(w.bufs)
}

// Decoding compiles a Decoder's graphs (model.DecodeConfig.Device): the
// weights go up once for every graph shape the Decoder builds, and the
// key/value cache lives on the device, so a generated token costs one
// run of one row a sequence, its ids going up and its logits coming
// down.
type Decoding struct {
	e       *Engine
	weights *Weights
	cache   *DecodeCache
	share   func(name string) *vulkan.Buffer
}

// NewDecoding prepares decoding on e. share, when not nil, gives weights
// another program holds (a training run's: its base and its adapter as
// they train), read in place; the others go up once.
func NewDecoding(e *Engine, share func(name string) *vulkan.Buffer) *Decoding {
	return &Decoding{e: e, weights: NewWeights(e.Device), share: share}
}

// weight is the buffer of the weight named name: another program's, or
// one of d's.
func (d *Decoding) weight(name string) *vulkan.Buffer {
	if d.share != nil {
		if b := d.share(name); b != nil {
			return b
		}
	}
	return d.weights.Buffer(name)
}

// Compile compiles a decoding graph whose logits are node logits, its op
// values planned (only the logits are read), reading and extending
// cache, the graph's.
func (d *Decoding) Compile(logits *G.Node, b *nn.Builder, cache *nn.KVCache) (*Program, error) {
	if d.cache == nil {
		d.cache = NewDecodeCache(d.e, cache)
	}
	if d.cache.c != cache {
		return nil, fmt.Errorf("vkengine: decoding graphs of two KV caches on one Decoding")
	}
	if err := d.weights.Add(b.G, b.IsParam, d.share); err != nil {
		return nil, err
	}
	return d.e.Compile(b.G, b.IsParam, Share(d.weight), WithCache(d.cache), PlanMemory(logits))
}

// Close frees the weights and the cache; the programs Compile made must
// be closed first.
func (d *Decoding) Close() {
	if d.cache != nil {
		d.cache.Close()
	}
	d.weights.Close()
}
