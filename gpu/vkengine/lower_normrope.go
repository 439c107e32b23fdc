package vkengine

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// lowerRMSNorm is y = w ⊙ x·rstd per row (RMSNormHeads' rows are heads),
// rounded to the op's format. The CPU sums the squares in float64, the
// kernel in fp32: see gpu/vulkan/shaders/rmsnorm.comp for the bound.
func lowerRMSNorm(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.RMSNormAttrs)
	rnd := rounding(nd.spec.Out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := p.e.Kernels.RMSNorm(r, nd.in[0], nd.in[1], nd.out, a.Rows, a.D, a.Eps); err != nil {
			return err
		}
		return p.e.Kernels.Round(r, nd.out, a.Rows*a.D, rnd)
	}, nil
}

// lowerRMSNormBackward computes dx and dw, each only when needed, rounded
// to x's and w's formats. The graph inputs are x, w and the output's
// gradient g. rstd is recomputed per row, as the CPU does, rather than
// saved by the forward: a row's sums are one pass over values the
// backward reads anyway.
func lowerRMSNormBackward(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Forward.Attrs.(nn.RMSNormAttrs)
	x, w, g := nd.in[0], nd.in[1], nd.in[2]
	dx, dw := nd.grads[0], nd.grads[1]
	rstd, err := p.alloc(4 * a.Rows)
	if err != nil {
		return nil, err
	}
	var part *vulkan.Buffer
	if dw != nil {
		if part, err = p.alloc(4 * vulkan.RMSNormWeightGradScratch(a.Rows, a.D)); err != nil {
			return nil, err
		}
	}
	ks := p.e.Kernels
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := ks.RMSNormBackward(r, x, w, g, dx, rstd, a.Rows, a.D, a.Eps); err != nil {
			return err
		}
		if dx != nil {
			if err := p.roundGrad(r, dx, a.Rows*a.D, rounding(nd.spec.In[0])); err != nil {
				return err
			}
		}
		if dw == nil {
			return nil
		}
		if err := ks.RMSNormWeightGrad(r, x, g, rstd, part, dw, a.Rows, a.D); err != nil {
			return err
		}
		return p.roundGrad(r, dw, a.D, rounding(nd.spec.In[1]))
	}, nil
}

// lowerRope rotates x by its rows' positions, rounded to the op's format.
func lowerRope(p *Program, nd *node) (recordFunc, error) {
	return lowerRotation(p, nd, nd.spec, nd.out, nd.spec.Out, false)
}

// lowerRopeBackward rotates the output's gradient (the one graph input)
// by the opposite angles: the rotation is orthogonal. dx is rounded to
// x's format.
func lowerRopeBackward(p *Program, nd *node) (recordFunc, error) {
	return lowerRotation(p, nd, *nd.spec.Forward, nd.grads[0], nd.spec.In[0], true)
}

// lowerRotation records y = rotate(nd.in[0]) with the table and positions
// of the rope op fwd, rounded to format out.
func lowerRotation(p *Program, nd *node, fwd nn.OpSpec, y *vulkan.Buffer, out amp.Format, inverse bool) (recordFunc, error) {
	a := fwd.Attrs.(nn.RopeAttrs)
	if a.Cache != nil {
		if inverse {
			return nil, fmt.Errorf("rope: a decoding graph is not differentiated")
		}
		return lowerRopeCached(p, nd, a)
	}
	if y == nil {
		return nil, fmt.Errorf("rope: no buffer for the rotated values")
	}
	table, err := ropeTable(p, fwd.ID, a)
	if err != nil {
		return nil, err
	}
	args := vulkan.RopeArgs{Rows: a.Rows, Heads: a.Heads, Half: len(a.InvFreq), SeqLen: a.SeqLen, Inverse: inverse}
	if a.Positions != nil {
		if args.Positions, err = p.HostInts(a.Positions); err != nil {
			return nil, err
		}
	}
	n := a.Rows * a.Heads * 2 * len(a.InvFreq)
	rnd := rounding(out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		for row, q := range a.Positions { // the CPU would index its table out of range
			if q < 0 || q >= a.SeqLen {
				return fmt.Errorf("vkengine: rope: row %d at position %d, outside the table's %d positions", row, q, a.SeqLen)
			}
		}
		if err := p.e.Kernels.Rope(r, nd.in[0], table, y, args); err != nil {
			return err
		}
		if inverse { // the backward: a gradient's rounding, counted
			return p.roundGrad(r, y, n, rnd)
		}
		return p.e.Kernels.Round(r, y, n, rnd)
	}, nil
}

// ropeTable is the op's cos and sin table on the device, shared by its
// forward and backward: nn.NewRopeTableFreqs computes it on the host, so
// the angles are the CPU engine's bit for bit (a GPU's cos and sin are
// not correctly rounded), and it goes up once, at compile time.
func ropeTable(p *Program, id int, a nn.RopeAttrs) (*vulkan.Buffer, error) {
	const name = "rope.table"
	_, uploaded := p.saved[savedKey{id, name}] // by the forward, for the backward
	b, err := p.Saved(id, name, 4*vulkan.RopeTableLen(a.SeqLen, len(a.InvFreq)))
	if err != nil || uploaded {
		return b, err
	}
	vals := ropeTableValues(a.SeqLen, a.InvFreq)
	p.Transfers.Up += int64(4 * len(vals))
	if err := b.WriteFloat32(0, vals); err != nil {
		return nil, fmt.Errorf("rope table: %w", err)
	}
	return b, nil
}

// ropeTableValues is nn.NewRopeTableFreqs's table for seqLen positions
// as the kernel reads it: the cosines, then the sines.
func ropeTableValues(seqLen int, invFreq []float32) []float32 {
	t := nn.NewRopeTableFreqs[float32](seqLen, invFreq)
	return append(append(make([]float32, 0, 2*len(t.Cos)), t.Cos...), t.Sin...)
}

// lowerEmbedding gathers the table's rows (fp32, or 16-bit widened
// exactly) by the token ids, rounded to the op's format.
func lowerEmbedding(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Attrs.(nn.EmbeddingAttrs)
	t := vulkan.EmbeddingTable{Buf: nd.in[1], V: a.V, D: a.D, B16: a.Table16}
	if a.Table16 {
		switch a.TableFormat {
		case amp.BF16:
			t.Half = vulkan.BF16
		case amp.FP16:
			t.Half = vulkan.FP16
		default:
			return nil, fmt.Errorf("16-bit table of format %v", a.TableFormat)
		}
	}
	ids := nd.inN[0]
	rnd := rounding(nd.spec.Out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := checkIDs(ids, a.V); err != nil {
			return err
		}
		if err := p.e.Kernels.Embedding(r, nd.in[0], t, nd.out, a.N); err != nil {
			return err
		}
		return p.e.Kernels.Round(r, nd.out, a.N*a.D, rnd)
	}, nil
}

// checkIDs refuses token ids outside the vocabulary, as the CPU's
// embedding does, before the kernel would read outside the table.
func checkIDs(n *G.Node, vocab int) error {
	ids, err := intsOf(n, "embedding")
	if err != nil {
		return err
	}
	for r, id := range ids {
		if id < 0 || id >= vocab {
			return fmt.Errorf("vkengine: embedding: token id %d at position %d is outside the vocabulary (size %d)", id, r, vocab)
		}
	}
	return nil
}

// intsOf is the []int value of an int input of op.
func intsOf(n *G.Node, op string) ([]int, error) {
	v := n.Value()
	if v == nil {
		return nil, fmt.Errorf("vkengine: %s: %s has no value", op, n.Name())
	}
	xs, ok := v.Data().([]int)
	if !ok {
		return nil, fmt.Errorf("vkengine: %s: %s holds %T, not []int", op, n.Name(), v.Data())
	}
	return xs, nil
}

// lowerEmbeddingBackward scatter-adds the output's gradient (the one
// graph input) into the table's rows in position order, the CPU's sums
// bit for bit; rows never looked up are 0, the values the CPU's
// row-sparse upkeep leaves. The ids are the forward's input.
func lowerEmbeddingBackward(p *Program, nd *node) (recordFunc, error) {
	a := nd.spec.Forward.Attrs.(nn.EmbeddingAttrs)
	dt := nd.grads[1]
	if dt == nil { // ids never get a gradient, a frozen table none
		return nil, nil
	}
	fwd, err := p.forward(nd.spec)
	if err != nil {
		return nil, err
	}
	head, err := p.alloc(4 * a.V)
	if err != nil {
		return nil, err
	}
	next, err := p.alloc(4 * a.N)
	if err != nil {
		return nil, err
	}
	args := vulkan.EmbeddingGradArgs{N: a.N, V: a.V, D: a.D, IDs: fwd.in[0], G: nd.in[0], DTable: dt, Head: head, Next: next}
	rnd := rounding(nd.spec.In[1])
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := p.e.Kernels.EmbeddingGrad(r, args); err != nil {
			return err
		}
		return p.roundGrad(r, dt, a.V*a.D, rnd)
	}, nil
}
