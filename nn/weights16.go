package nn

import (
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// Param16 adds a frozen weight kept as 16-bit values (bf16 or fp16 bits):
// two bytes per parameter in memory instead of four. Ops that read it
// convert it to float32 block by block as they go.
func (b *Builder) Param16(name string, shape []int, bits []uint16, f amp.Format) *G.Node {
	check(f == amp.BF16 || f == amp.FP16, "param16 %s: format %v is not 16-bit", name, f)
	check(b.Dtype == tensor.Float32, "param16 %s: 16-bit weights need a float32 graph", name)
	t := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(bits))
	n := G.NewTensor(b.G, tensor.Uint16, len(shape), G.WithShape(shape...), G.WithName(name), G.WithValue(t))
	b.isParam[n], b.is16[n] = true, true
	b.format[n] = f
	return n
}

// weightBlock is how many weight rows are converted at a time: large
// enough for an efficient matmul, small enough that the scratch stays in
// cache and never approaches the size of the weight itself.
const weightBlock = 64

// weights16 converts 16-bit weight rows for a matmul computing in compute.
type weights16 struct {
	on              bool // the weight is 16-bit
	stored, compute amp.Format
	scratch         []float32
}

// blocks calls fn for consecutive blocks of rows [r0, r1) of a rows×cols
// 16-bit weight, with the block converted to float32 (and rounded to the
// compute format when that is a different 16-bit format).
func (w *weights16) blocks(bits []uint16, rows, cols int, fn func(r0, r1 int, block []float32)) {
	if len(w.scratch) < weightBlock*cols {
		w.scratch = make([]float32, weightBlock*cols)
	}
	for r0 := 0; r0 < rows; r0 += weightBlock {
		r1 := min(r0+weightBlock, rows)
		blk := w.scratch[:(r1-r0)*cols]
		src := bits[r0*cols : r1*cols]
		for i, v := range src {
			blk[i] = w.stored.FromBits16(v)
		}
		if w.compute != amp.FP32 && w.compute != w.stored {
			w.compute.RoundSlice(blk)
		}
		fn(r0, r1, blk)
	}
}
