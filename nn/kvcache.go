package nn

import (
	"errors"
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// KVCache is what decoding keeps between runs of a graph: for every
// sequence, the keys and values each layer has computed for its tokens so
// far. A decoding graph (built with AttentionShape.Cache and RopeCached)
// computes only new tokens: SetRows says, before each run, which sequence
// each of the graph's rows continues; the graph rotates each row at its
// position, and its attention appends the row's key and value to the
// sequence and attends over all the sequence holds. A prompt then costs
// one pass and each generated token one row, with the ops, rounding
// points and kernels of the training graph.
type KVCache struct {
	layers, width int           // width: KVHeads·HeadDim, one cached row
	reserved      int           // Reserve's tokens a sequence, until Reset
	k, v          [][][]float32 // [sequence][layer]: rows of width values
	length        []int         // tokens each sequence holds
	invFreq       []float32
	rope          RopeTable[float32] // covers every position handed out so far

	// the next run's rows: the sequence each continues, its position,
	// and the runs of adjacent rows of one sequence
	seq, pos []int
	segs     []cacheSegment
}

// cacheSegment is rows [row, row+rows) of a run: tokens pos, pos+1, …
// of sequence seq.
type cacheSegment struct{ seq, row, rows, pos int }

// NewKVCache holds sequences of a model with the given layers, width
// (KVHeads·HeadDim) values per cached key or value, and rotary inverse
// frequencies (the rotation's table grows to the positions used).
func NewKVCache(layers, width int, invFreq []float32) *KVCache {
	return &KVCache{layers: layers, width: width, invFreq: invFreq}
}

// Reset forgets every sequence.
func (c *KVCache) Reset() {
	c.k, c.v, c.length, c.reserved = nil, nil, nil, 0
	c.seq, c.pos, c.segs = c.seq[:0], c.pos[:0], c.segs[:0]
}

// Add starts an empty sequence and returns its index.
func (c *KVCache) Add() int {
	c.k = append(c.k, make([][]float32, c.layers))
	c.v = append(c.v, make([][]float32, c.layers))
	c.length = append(c.length, 0)
	return len(c.length) - 1
}

// Reserve says that no sequence will hold more than tokens tokens before
// the next Reset: an engine that keeps the cache in buffers of its own
// (the Vulkan engine's) makes them that large once instead of growing
// them as the sequences grow. The CPU's cache ignores it.
func (c *KVCache) Reserve(tokens int) { c.reserved = max(c.reserved, tokens) }

// Reserved is the most tokens Reserve announced since the last Reset.
func (c *KVCache) Reserved() int { return c.reserved }

// Sequences is the number of sequences Add started since the last Reset.
func (c *KVCache) Sequences() int { return len(c.length) }

// Layers is the number of layers whose keys and values the cache holds.
func (c *KVCache) Layers() int { return c.layers }

// Width is the number of values a token's key (or value) holds in a
// layer: KVHeads·HeadDim.
func (c *KVCache) Width() int { return c.width }

// InvFreq are the rotary inverse frequencies the cache's rotations use.
func (c *KVCache) InvFreq() []float32 { return c.invFreq }

// Run is the next run's rows as SetRows set them: the sequence each row
// continues and its position there. The slices are the cache's own,
// valid until the next SetRows.
func (c *KVCache) Run() (seq, pos []int) { return c.seq, c.pos }

// Len is the number of tokens sequence s holds.
func (c *KVCache) Len(s int) int { return c.length[s] }

// Drop frees the keys and values of sequence s, which is not continued.
func (c *KVCache) Drop(s int) {
	clear(c.k[s])
	clear(c.v[s])
}

// SetRows says which sequence each row of the next run continues: row r
// is the next token of sequence seq[r], after the tokens it holds and the
// run's earlier rows of the same sequence, which must be adjacent. The
// tokens count as the sequences' from now on.
func (c *KVCache) SetRows(seq []int) error {
	c.seq = append(c.seq[:0], seq...)
	c.pos, c.segs = c.pos[:0], c.segs[:0]
	top := 0
	for r, s := range seq {
		if s < 0 || s >= len(c.length) {
			return fmt.Errorf("kv cache: row %d continues sequence %d of %d", r, s, len(c.length))
		}
		if r == 0 || seq[r-1] != s {
			for _, g := range c.segs {
				if g.seq == s {
					return fmt.Errorf("kv cache: the rows of sequence %d are not adjacent (rows %d and %d)", s, g.row+g.rows-1, r)
				}
			}
			c.segs = append(c.segs, cacheSegment{seq: s, row: r, pos: c.length[s]})
		}
		c.segs[len(c.segs)-1].rows++
		c.pos = append(c.pos, c.length[s])
		c.length[s]++
		top = max(top, c.length[s])
	}
	if half := len(c.invFreq); len(c.rope.Cos) < top*half {
		// doubled, so that generating token by token rebuilds it log(n) times
		c.rope = NewRopeTableFreqs[float32](max(top, 2*len(c.rope.Cos)/max(half, 1)), c.invFreq)
	}
	return nil
}

// rows checks that the rows SetRows set fit a run of n.
func (c *KVCache) rows(n int) error {
	if len(c.seq) != n {
		return fmt.Errorf("kv cache: %d rows set for a graph of %d", len(c.seq), n)
	}
	return nil
}

var errDecodeOnly = errors.New("nn: a decoding graph (KVCache) is not differentiated")

// RopeCached is RopeFreqs for a decoding graph: row r of x [rows,
// heads·headDim] is rotated at the position c gives it, with c's table,
// whose angles are those of RopeFreqs's table (each is computed from its
// position alone).
func (b *Builder) RopeCached(x *G.Node, heads int, c *KVCache) *G.Node {
	xs := shapeOf(x)
	check(b.Dtype == tensor.Float32, "rope: a decoding graph is float32")
	check(len(xs) == 2 && xs[1] == heads*2*len(c.invFreq), "rope: x %v does not fit %d heads of dim %d", xs, heads, 2*len(c.invFreq))
	base := b.newBase("rope", x)
	return b.apply(&ropeOp[float32]{opBase: base, shape: xs, heads: heads, seqLen: xs[0], cache: c, buf: newBuffer[float32](xs...)}, x)
}

// attentionCacheOp is Attention over a KVCache: the rows' keys and values
// join their sequences' caches, and each row attends to its sequence's
// tokens up to itself. Per run of adjacent rows of one sequence it makes
// the calls attentionOp makes for one batch row, with the cached tokens
// before them: a whole sequence in one run is the same computation as
// the training graph's, call for call.
type attentionCacheOp struct {
	opBase
	s   AttentionShape
	f   attnFormats
	buf buffer[float32]
}

func (o *attentionCacheOp) Arity() int    { return 3 }
func (o *attentionCacheOp) Type() hm.Type { return fnType(2, 2, 2, 2) }
func (o *attentionCacheOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.s.Batch * o.s.SeqLen, o.s.Heads * o.s.HeadDim}, nil
}
func (o *attentionCacheOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errDecodeOnly
}

func (o *attentionCacheOp) Do(vs ...G.Value) (G.Value, error) {
	in := vals[float32](vs)
	q, k, v := in[0], in[1], in[2]
	s, c, l := o.s, o.s.Cache, o.s.Layer
	if err := c.rows(s.Batch * s.SeqLen); err != nil {
		return nil, err
	}
	w := c.width
	for _, g := range c.segs {
		kc, vc := c.k[g.seq][l], c.v[g.seq][l]
		if len(kc) < g.pos*w {
			return nil, fmt.Errorf("kv cache: layer %d of sequence %d holds %d tokens, the run continues at %d", l, g.seq, len(kc)/w, g.pos)
		}
		c.k[g.seq][l] = append(kc[:g.pos*w], k[g.row*w:(g.row+g.rows)*w]...)
		c.v[g.seq][l] = append(vc[:g.pos*w], v[g.row*w:(g.row+g.rows)*w]...)
	}
	t, out := o.buf.get()
	qw, group := s.Heads*s.HeadDim, s.Heads/s.KVHeads
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	paths := attnPathsOf[float32](&o.opBase, o.f) // the training graph's
	o.eng.parallel(len(c.segs)*s.KVHeads, 1, func(lo, hi int) {
		var p, pv []float32
		for u := lo; u < hi; u++ {
			g, kh := c.segs[u/s.KVHeads], u%s.KVHeads
			keys := g.pos + g.rows // the sequence's tokens up to the run's last
			if cap(p) < g.rows*keys {
				p = make([]float32, g.rows*keys)
				pv = valuesScratch[float32](o.f, false, g.rows*keys)
			}
			p = p[:g.rows*keys]
			K, V := c.k[g.seq][l][kh*s.HeadDim:], c.v[g.seq][l][kh*s.HeadDim:]
			for h := kh * group; h < (kh+1)*group; h++ {
				qOff := g.row*qw + h*s.HeadDim
				attnGemm(o.eng, paths.scores, false, true, g.rows, keys, s.HeadDim, scale, q[qOff:], qw, K, w, 0, p, keys)
				round(o.f.scores, p)
				for i := 0; i < g.rows; i++ {
					at, first := g.pos+i, 0
					if s.Window > 0 {
						first = max(0, at-s.Window+1)
					}
					causalSoftmaxRow(p[i*keys:(i+1)*keys], first, at)
				}
				round(o.f.softmax, p)
				attnGemm(o.eng, paths.values, false, false, g.rows, s.HeadDim, keys, 1, asValues(o.f, p, pv), keys, V, w, 0, out[qOff:], qw)
			}
		}
	})
	roundAll(o.eng, o.out, out)
	return t, nil
}

// Rows picks rows of x [N, D] by idx [M] (an int input), giving [M, D]
// in x's format: a decoding graph applies the head to each sequence's
// last new token only.
func (b *Builder) Rows(x, idx *G.Node) *G.Node {
	xs, is := shapeOf(x), shapeOf(idx)
	check(b.Dtype == tensor.Float32 && len(xs) == 2 && idx.Dtype() == tensor.Int && len(is) == 1,
		"rows: x %v and indices %v (%v) do not fit", xs, is, idx.Dtype())
	base := b.newBase("rows", x, idx)
	base.out = b.format[x]
	return b.apply(&rowsOp{opBase: base, n: xs[0], d: xs[1], buf: newBuffer[float32](is[0], xs[1])}, x, idx)
}

type rowsOp struct {
	opBase
	n, d int
	buf  buffer[float32]
}

func (o *rowsOp) Arity() int    { return 2 }
func (o *rowsOp) Type() hm.Type { return fnType(2, -1, 2) }
func (o *rowsOp) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape(o.buf.shape).Clone(), nil
}
func (o *rowsOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) { return nil, errDecodeOnly }

func (o *rowsOp) Do(vs ...G.Value) (G.Value, error) {
	x := vs[0].Data().([]float32)
	t, y := o.buf.get()
	for i, r := range ints(vs[1]) {
		if r < 0 || r >= o.n {
			return nil, fmt.Errorf("rows: index %d of %d rows", r, o.n)
		}
		copy(y[i*o.d:(i+1)*o.d], x[r*o.d:(r+1)*o.d])
	}
	return t, nil
}
