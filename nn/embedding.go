package nn

import (
	"fmt"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// Embedding looks up rows of table [V, D] for ids [N], giving [N, D].
func (b *Builder) Embedding(ids, table *G.Node) *G.Node {
	is, ts := shapeOf(ids), shapeOf(table)
	check(ids.Dtype() == tensor.Int && len(is) == 1 && len(ts) == 2, "embedding: ids %v (%v) and table %v do not fit", is, ids.Dtype(), ts)
	base := b.newBase("embedding", ids, table)
	base.wrt[0] = false
	if b.Dtype == tensor.Float64 {
		op := &embeddingOp[float64]{opBase: base, n: is[0], v: ts[0], d: ts[1], table: table.Dtype(), buf: newBuffer[float64](is[0], ts[1])}
		b.embeddings = append(b.embeddings, op)
		return b.apply(op, ids, table)
	}
	op := &embeddingOp[float32]{opBase: base, n: is[0], v: ts[0], d: ts[1], table: table.Dtype(), stored: b.format[table], buf: newBuffer[float32](is[0], ts[1])}
	b.embeddings = append(b.embeddings, op)
	return b.apply(op, ids, table)
}

// RowSparse switches grad, the gradient of an embedding table that
// G.Backpropagate returned, to upkeep row by row: each backward pass then
// clears only the rows the previous pass wrote, instead of all V, and
// rows reports the distinct rows the last pass wrote (in first-use order;
// the slice is the op's, valid until the next pass). Every other row of
// grad's value is zero. A caller adding grad into a dense buffer can thus
// touch only those rows.
//
// It refuses (ok false) a node that is not an embedding table's gradient,
// or that some node of the graph reads: a tied table's gradient is summed
// with the LM head's by a gorgonia op that may write its sum over its
// inputs, after which the rows outside the list are no longer zero.
func (b *Builder) RowSparse(grad *G.Node) (rows func() []int, ok bool) {
	if grad == nil || b.G.To(grad.ID()).Len() != 0 {
		return nil, false
	}
	for _, e := range b.embeddings {
		if e.tableGrad() == grad {
			e.setSparse()
			return e.lastRows, true
		}
	}
	return nil, false
}

// rowSparser is an embedding op of either float type, for RowSparse.
type rowSparser interface {
	tableGrad() *G.Node
	setSparse()
	lastRows() []int
}

type embeddingOp[T Float] struct {
	opBase
	n, v, d int
	table   tensor.Dtype // float, or uint16 for a 16-bit table
	stored  amp.Format   // a 16-bit table's format
	buf     buffer[T]
	ids     []int // saved for backward

	grad   *G.Node // the table's gradient node, once SymDiff has built it
	sparse bool    // clear only the rows the last backward pass wrote (RowSparse)
	rows   []int   // the distinct rows the last backward pass wrote
	next   []int   // the rows of the pass under way (swapped with rows)
	listed []bool  // per table row: in next
}

func (o *embeddingOp[T]) tableGrad() *G.Node { return o.grad }
func (o *embeddingOp[T]) setSparse()         { o.sparse = true }
func (o *embeddingOp[T]) lastRows() []int    { return o.rows }

func (o *embeddingOp[T]) Arity() int { return 2 }

// Type is concrete: a 16-bit table's element type says nothing about the
// float rows it produces.
func (o *embeddingOp[T]) Type() hm.Type {
	var out tensor.Dtype = tensor.Float32
	if !isF32[T]() {
		out = tensor.Float64
	}
	return hm.NewFnType(G.TensorType{Dims: 1, Of: tensor.Int}, G.TensorType{Dims: 2, Of: o.table}, G.TensorType{Dims: 2, Of: out})
}
func (o *embeddingOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.n, o.d}, nil
}

func (o *embeddingOp[T]) Do(vs ...G.Value) (G.Value, error) {
	ids := ints(vs[0])
	t, y := o.buf.get()
	o.ids = append(o.ids[:0], ids...)
	for r, id := range ids {
		if id < 0 || id >= o.v {
			return nil, fmt.Errorf("token id %d at position %d is outside the vocabulary (size %d)", id, r, o.v)
		}
	}
	// the rows gathered on the workers; a 16-bit table's widened as
	// FromBits16Slice does it, sixteen at a time where the CPU allows
	table := vs[1].Data()
	o.eng.parallel(len(ids), max(1, (1<<14)/o.d), func(r0, r1 int) {
		for r := r0; r < r1; r++ {
			id, dst := ids[r], y[r*o.d:(r+1)*o.d]
			switch table := table.(type) {
			case []T:
				copy(dst, table[id*o.d:(id+1)*o.d])
			case []uint16:
				if d32, ok := any(dst).([]float32); ok {
					o.stored.FromBits16Slice(d32, table[id*o.d:(id+1)*o.d])
					continue
				}
				for j, bits := range table[id*o.d : (id+1)*o.d] {
					dst[j] = T(o.stored.FromBits16(bits))
				}
			}
		}
	})
	roundAll(o.eng, o.out, y)
	return t, nil
}

// The table's gradient scatter-adds output gradients into the looked-up
// rows. Workers split the columns, never the rows, so repeated ids are
// summed in position order whatever the worker count. Every pass lists
// the rows it writes; a row-sparse gradient (RowSparse) then clears only
// the previous pass's rows, the only nonzero ones, so a pass costs
// O(N·D), not O(V·D).
func (o *embeddingOp[T]) SymDiff(_ G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	shapes := [][]int{{o.n}, {o.v, o.d}}
	grads := fusedBackward(&o.opBase, []*G.Node{grad}, shapes, func(in, grads [][]T) error {
		g, dt := in[0], grads[1]
		if o.listed == nil {
			o.listed = make([]bool, o.v)
		}
		o.next = o.next[:0]
		for _, id := range o.ids {
			if !o.listed[id] {
				o.listed[id] = true
				o.next = append(o.next, id)
			}
		}
		for _, id := range o.next {
			o.listed[id] = false
		}
		prev := o.rows
		o.eng.parallel(o.d, 16, func(lo, hi int) {
			if o.sparse {
				for _, id := range prev {
					clear(dt[id*o.d+lo : id*o.d+hi])
				}
			} else {
				for id := 0; id < o.v; id++ {
					clear(dt[id*o.d+lo : id*o.d+hi])
				}
			}
			for r, id := range o.ids {
				dst, src := dt[id*o.d+lo:id*o.d+hi], g[r*o.d+lo:r*o.d+hi]
				for j := range dst {
					dst[j] += src[j]
				}
			}
		})
		o.rows, o.next = o.next, o.rows
		return nil
	})
	o.grad = grads[1]
	return grads, nil
}
