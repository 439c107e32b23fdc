package nn

import (
	"fmt"
	"math"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
)

// DoRA (weight-decomposed low-rank adaptation) rescales each output row of
// an adapted linear module: with the low-rank update s·B·A,
//
//	out = g ⊙ (W·x + s·B·A·x),   g = m / ‖W + s·B·A‖₂ (one norm per row of W)
//
// where the magnitude m [out] is trained and the norm is detached, as in
// PEFT: no gradient flows through it. Two ops make it: DoRANorm computes the
// norms, DoRA joins the branches.
//
// A row whose norm is below DoRANormFloor (real checkpoints have rows of
// zeros: Llama-3.1-8B's o_proj has hundreds, which give PEFT NaN, its issue
// #2049) is divided by the floor instead. Its magnitude starts at the floor,
// so g is 1 and the row is W's own, zero for a zero row; it then trains as
// DoRA does, direction through A and B, size through m. Rows above the
// floor are computed exactly as PEFT computes them.

// DoRANormFloor is the least norm DoRA divides by.
const DoRANormFloor = 1e-6

// DoRANorm returns ‖W[o] + s·B[o]·A‖₂ for every row o of W [out, in], with
// A [r, in] and B [out, r], as an [out] vector. It is computed in float64
// from the weights' stored values (fp32 masters or 16-bit bits, whatever
// the precision policy) and rounded once, exactly as DoRARowNorms computes
// a magnitude at initialization, so that g is exactly 1 before training.
//
// The result is detached: it never needs or passes a gradient. It depends
// only on weights, which change only at optimizer steps, so it is
// recomputed only after Engine.WeightsChanged, not once per micro-batch. module names the adapted module in errors.
func (b *Builder) DoRANorm(w, a, bm *G.Node, s float64, module string) *G.Node {
	ws, as, bs := shapeOf(w), shapeOf(a), shapeOf(bm)
	check(len(ws) == 2 && len(as) == 2 && len(bs) == 2 && as[1] == ws[1] && bs[0] == ws[0] && bs[1] == as[0],
		"dora norm %s: W %v, A %v and B %v do not fit (want [out,in], [r,in], [out,r])", module, ws, as, bs)
	base := b.newBase("dora_norm", w, a, bm)
	base.out = amp.FP32
	clear(base.wrt)
	var n *G.Node
	if b.Dtype == tensor.Float64 {
		check(!b.is16[w], "dora norm %s: 16-bit weights need a float32 graph", module)
		n = b.apply(&doraNormOp[float64]{opBase: base, out: ws[0], in: ws[1], r: as[0], s: s, module: module, buf: newBuffer[float64](ws[0])}, w, a, bm)
	} else {
		op := &doraNormOp[float32]{opBase: base, out: ws[0], in: ws[1], r: as[0], s: s, module: module, buf: newBuffer[float32](ws[0])}
		if b.is16[w] {
			op.w16, op.stored = true, b.format[w]
		}
		n = b.apply(op, w, a, bm)
	}
	b.needsGrad[n] = false // detached, like PEFT's weight_norm.detach()
	return n
}

type doraNormOp[T Float] struct {
	opBase
	out, in, r int
	s          float64
	module     string
	w16        bool       // W is 16-bit bits
	stored     amp.Format // their format
	buf        buffer[T]
	version    uint64
	binds      uint64 // the engine's binds the norms were computed under
	valid      bool
}

func (o *doraNormOp[T]) Arity() int { return 3 }
func (o *doraNormOp[T]) Type() hm.Type {
	var act tensor.Dtype = tensor.Float32
	if !isF32[T]() {
		act = tensor.Float64
	}
	w := act
	if o.w16 {
		w = tensor.Uint16
	}
	return hm.NewFnType(G.TensorType{Dims: 2, Of: w}, G.TensorType{Dims: 2, Of: act}, G.TensorType{Dims: 2, Of: act}, G.TensorType{Dims: 1, Of: act})
}
func (o *doraNormOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.out}, nil
}
func (o *doraNormOp[T]) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("nn: %v is detached: it has no gradient", o)
}

func (o *doraNormOp[T]) Do(vs ...G.Value) (G.Value, error) {
	t, norms := o.buf.get()
	if o.valid && o.version == o.eng.weights && o.binds == o.eng.binds {
		return t, nil
	}
	a, bm := vs[1].Data().([]T), vs[2].Data().([]T)
	var row func(r int, dst []float64)
	switch w := vs[0].Data().(type) {
	case []T:
		row = func(r int, dst []float64) {
			for j, v := range w[r*o.in : (r+1)*o.in] {
				dst[j] = float64(v)
			}
		}
	case []uint16:
		row = func(r int, dst []float64) {
			for j, v := range w[r*o.in : (r+1)*o.in] {
				dst[j] = float64(o.stored.FromBits16(v))
			}
		}
	}
	o.eng.parallel(o.out, 16, func(lo, hi int) {
		rowNorms(norms, row, a, bm, lo, hi, o.in, o.r, o.s)
	})
	o.version, o.binds, o.valid = o.eng.weights, o.eng.binds, true
	return t, nil
}

// rowNorms writes max(‖W[o] + s·B[o]·A‖₂, DoRANormFloor) into dst[o] for
// rows o in [lo, hi). row(o, buf) fills buf with row o of W. Everything is
// summed in float64 in column order and rounded once; with B = 0 the
// result is exactly the norm of W's values (or the floor).
func rowNorms[T Float](dst []T, row func(o int, buf []float64), a, bm []T, lo, hi, in, r int, s float64) {
	buf := make([]float64, in)
	for o := lo; o < hi; o++ {
		row(o, buf)
		for k := 0; k < r; k++ {
			c := s * float64(bm[o*r+k])
			if c == 0 {
				continue // B = 0 at initialization: the norm is W's own
			}
			for j, av := range a[k*in : (k+1)*in] {
				buf[j] += c * float64(av)
			}
		}
		var acc float64
		for _, v := range buf {
			acc += v * v
		}
		dst[o] = T(max(math.Sqrt(acc), DoRANormFloor))
	}
}

// DoRARowNorms writes max(‖W[o] + s·B[o]·A‖₂, DoRANormFloor) for every row
// of W [len(dst), in] into dst exactly as the DoRANorm op computes it: W is
// fp32 values w, or, when w is nil, 16-bit bits of format f. It returns how
// many rows are at the floor. A DoRA magnitude initialized with it makes g
// exactly 1.
func DoRARowNorms(dst, w []float32, bits []uint16, f amp.Format, a, bm []float32, in, r int, s float64) int {
	row := func(o int, buf []float64) {
		if w != nil {
			for j, v := range w[o*in : (o+1)*in] {
				buf[j] = float64(v)
			}
			return
		}
		for j, v := range bits[o*in : (o+1)*in] {
			buf[j] = float64(f.FromBits16(v))
		}
	}
	rowNorms(dst, row, a, bm, 0, len(dst), in, r, s)
	floored := 0
	for _, v := range dst {
		if v == DoRANormFloor {
			floored++
		}
	}
	return floored
}

// DoRA joins a DoRA module's branches with g = m / norm, as PEFT's
// DoraLinearLayer does:
//
//	without dropout (baseD nil):  y = g ⊙ (base + s·lora)
//	with dropout:                 y = base + (g − 1) ⊙ baseD + g ⊙ s·lora
//
// where base = W·x, baseD = W·dropout(x) and lora = B·A·dropout(x) are
// [N, out], and m and norm are [out]. norm is a constant (DoRANorm's
// detached value): it gets no gradient. It computes in fp32 (float64 in
// float64 graphs) whatever the precision policy, as PyTorch's autocast
// promotes the fp32 magnitude's products.
func (b *Builder) DoRA(base, baseD, lora, m, norm *G.Node, s float64) *G.Node {
	bs := shapeOf(base)
	check(len(bs) == 2, "dora: base output %v is not [N, out]", bs)
	samePointwise("dora", base, lora)
	if baseD != nil {
		samePointwise("dora", base, baseD)
	}
	check(len(shapeOf(m)) == 1 && shapeOf(m)[0] == bs[1] && len(shapeOf(norm)) == 1 && shapeOf(norm)[0] == bs[1],
		"dora: magnitude %v and norm %v must be [%d]", shapeOf(m), shapeOf(norm), bs[1])
	inputs := []*G.Node{base}
	if baseD != nil {
		inputs = append(inputs, baseD)
	}
	inputs = append(inputs, lora, m, norm)
	ob := b.newBase("dora", inputs...)
	ob.wrt[len(inputs)-1] = false // the norm is detached
	if b.Dtype == tensor.Float64 {
		return b.apply(&doraOp[float64]{opBase: ob, n: bs[0], outF: bs[1], s: s, dropout: baseD != nil, buf: newBuffer[float64](bs...)}, inputs...)
	}
	return b.apply(&doraOp[float32]{opBase: ob, n: bs[0], outF: bs[1], s: s, dropout: baseD != nil, buf: newBuffer[float32](bs...)}, inputs...)
}

type doraOp[T Float] struct {
	opBase
	n, outF int
	s       float64
	dropout bool // inputs are (base, baseD, lora, m, norm), else (base, lora, m, norm)
	buf     buffer[T]
	g       []T       // m / norm of the last forward pass
	acc     []float64 // the magnitude gradient's column sums
}

func (o *doraOp[T]) Arity() int {
	if o.dropout {
		return 5
	}
	return 4
}
func (o *doraOp[T]) Type() hm.Type {
	if o.dropout {
		return fnType(2, 2, 2, 1, 1, 2)
	}
	return fnType(2, 2, 1, 1, 2)
}
func (o *doraOp[T]) InferShape(...G.DimSizer) (tensor.Shape, error) {
	return tensor.Shape{o.n, o.outF}, nil
}

// split names the inputs; baseD is nil without dropout.
func (o *doraOp[T]) split(in [][]T) (base, baseD, lora, m, norm []T) {
	if o.dropout {
		return in[0], in[1], in[2], in[3], in[4]
	}
	return in[0], nil, in[1], in[2], in[3]
}

func (o *doraOp[T]) Do(vs ...G.Value) (G.Value, error) {
	base, baseD, lora, m, norm := o.split(vals[T](vs))
	t, y := o.buf.get()
	if o.g == nil {
		o.g = make([]T, o.outF)
	}
	for j := range o.g {
		o.g[j] = m[j] / norm[j]
	}
	s, g, d := T(o.s), o.g, o.outF
	o.eng.parallel(o.n, 8, func(lo, hi int) {
		for i := lo * d; i < hi*d; i += d {
			yr, br, lr := y[i:i+d], base[i:i+d], lora[i:i+d]
			if baseD == nil {
				for j := range yr {
					yr[j] = g[j] * (br[j] + s*lr[j])
				}
				continue
			}
			dr := baseD[i : i+d]
			for j := range yr {
				yr[j] = br[j] + (g[j]-1)*dr[j] + g[j]*(s*lr[j])
			}
		}
	})
	round(o.out, y)
	return t, nil
}

func (o *doraOp[T]) SymDiff(inputs G.Nodes, _, grad *G.Node) (G.Nodes, error) {
	grad = gradIn(&o.opBase, grad)
	shapes := make([][]int, len(inputs))
	for i, in := range inputs {
		shapes[i] = shapeOf(in)
	}
	graphIn := append(append(G.Nodes(nil), inputs...), grad)
	return fusedBackward(&o.opBase, graphIn, shapes, o.backward), nil
}

// backward, with gy the output gradient and X = base + s·lora (or
// baseD + s·lora with dropout):
//
//	dbase = g·gy (without dropout) or gy;  dbaseD = (g − 1)·gy
//	dlora = g·s·gy;                        dm[o] = Σ_rows gy·X / norm[o]
func (o *doraOp[T]) backward(in [][]T, grads [][]T) error {
	base, baseD, lora, m, norm := o.split(in[:len(in)-1])
	gy := in[len(in)-1]
	var dbase, dbaseD, dlora, dm []T
	if o.dropout {
		dbase, dbaseD, dlora, dm = grads[0], grads[1], grads[2], grads[3]
	} else {
		dbase, dlora, dm = grads[0], grads[1], grads[2]
	}
	g := make([]T, o.outF)
	for j := range g {
		g[j] = m[j] / norm[j]
	}
	s, d := T(o.s), o.outF
	o.eng.parallel(o.n, 8, func(lo, hi int) {
		for i := lo * d; i < hi*d; i += d {
			gr := gy[i : i+d]
			for j, v := range gr {
				if dbase != nil {
					if o.dropout {
						dbase[i+j] = v
					} else {
						dbase[i+j] = g[j] * v
					}
				}
				if dbaseD != nil {
					dbaseD[i+j] = (g[j] - 1) * v
				}
				if dlora != nil {
					dlora[i+j] = g[j] * s * v
				}
			}
		}
	})
	if dm == nil {
		return nil
	}
	x := base
	if o.dropout {
		x = baseD
	}
	if len(o.acc) != d {
		o.acc = make([]float64, d)
	}
	// column sums, each column by one worker in row order: the result does
	// not depend on the worker count
	o.eng.parallel(d, 64, func(lo, hi int) {
		acc := o.acc[lo:hi]
		clear(acc)
		for i := 0; i < o.n; i++ {
			r := i * d
			for j := lo; j < hi; j++ {
				acc[j-lo] += float64(gy[r+j]) * (float64(x[r+j]) + o.s*float64(lora[r+j]))
			}
		}
		for j := lo; j < hi; j++ {
			dm[j] = T(acc[j-lo] / float64(norm[j]))
		}
	})
	return nil
}
