package nn

import "github.com/mixtune/mixtune/amp"

// DoRANormAttrs are a "dora_norm" op's (Builder.DoRANorm): Norm[o] =
// max(‖W[o] + Scale·B[o]·A‖₂, DoRANormFloor) for W [Out, In], A [R, In]
// and B [Out, R]. W16 is set when W is a frozen 16-bit weight of format
// W16Format (Builder.Param16). The op is detached: it has no backward.
type DoRANormAttrs struct {
	Out, In, R int
	Scale      float64
	W16        bool
	W16Format  amp.Format
}

func (o *doraNormOp[T]) attrs() any {
	return DoRANormAttrs{Out: o.out, In: o.in, R: o.r, Scale: o.s, W16: o.w16, W16Format: o.stored}
}

// DoRAAttrs are a "dora" op's (Builder.DoRA) and its fused backward's:
// inputs (base, lora, m, norm), or (base, baseD, lora, m, norm) when
// Dropout is set, with base, baseD and lora [N, Out] and m, norm [Out].
type DoRAAttrs struct {
	N, Out  int
	Scale   float64
	Dropout bool
}

func (o *doraOp[T]) attrs() any {
	return DoRAAttrs{N: o.n, Out: o.outF, Scale: o.s, Dropout: o.dropout}
}
