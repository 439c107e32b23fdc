package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/quant"
)

// absG is Σ_r Σ_j |v[j,r]|·|w[r,c]|, the magnitude sum dx[·,c]'s bound scales.
func absG(v []float32, next, out int, w []float32, in, c int) float64 {
	var s float64
	for r := 0; r < out; r++ {
		var a float64
		for j := 0; j < next; j++ {
			a += math.Abs(float64(v[j*out+r]))
		}
		s += a * math.Abs(float64(w[r*in+c]))
	}
	return s
}

// loaderHidden is the native backend without blas.Loader: a 4-bit weight
// then takes the row-block path (rowBlocks, colBlocks) that OpenBLAS and
// oneDNN take, on the same kernels.
type loaderHidden struct{ be blas.Native }

func (h loaderHidden) Name() string { return h.be.Name() + " (no Loader)" }
func (h loaderHidden) Sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	h.be.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
func (h loaderHidden) Dgemm(tA, tB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	h.be.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
func (h loaderHidden) SgemmFinish(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	h.be.SgemmFinish(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, done)
}

// refDequantize4 dequantizes q from its parts as bitsandbytes'
// dequantize_4bit defines it, written apart from quant.DequantizeRange:
// element i's code is the high nibble of byte i/2 for even i, the low one
// for odd i; its block's absmax is, with double quantization, the float32
// product nested code × nested absmax plus the offset in float32; the
// value is the float32 product code × absmax.
func refDequantize4(q *quant.Tensor) []float32 {
	out := make([]float32, q.Numel())
	for i := range out {
		c := q.Packed[i/2] & 0x0f
		if i%2 == 0 {
			c = q.Packed[i/2] >> 4
		}
		b := i / q.BlockSize
		var m float32
		if q.Nested {
			p := q.NestedCode[q.AbsmaxCodes[b]] * q.NestedAbsmax[b/q.NestedBlock]
			m = float32(p) + q.Offset
		} else {
			m = q.Absmax[b]
		}
		out[i] = q.Code[c] * m
	}
	return out
}

// A 4-bit weight is dequantized as the native GEMM packs its panels of W
// (blas.Loader), in the forward y = x·Wᵀ and in dx = g·W. Checked:
//   - against a float64 product of W dequantized independently
//     (refDequantize4): each value of y and dx within γ_k·Σ|a||b| + u|s|
//     (fp32 compute; the sum's rounding, in any order, then the output's);
//   - bit for bit against the row-block path on the same kernels (the
//     native backend with Loader hidden), which OpenBLAS and oneDNN take:
//     the summation order is the same by design, each element of C summed
//     over the same k slices (sized by k alone) by the same kernel, whether
//     a call computes all of C's columns or a block of them;
//   - bit for bit against the same graph on an fp32 weight holding the
//     dequantized values (the product on a full dequantized copy);
//   - for fp32 and bf16 compute (W's values rounded to bf16 as they are
//     loaded), NF4 and FP4, with and without double quantization, one and
//     three workers (the panel loaded by several goroutines).
//
// W is 300×1000: 1000 is not a multiple of the 64-value block, so blocks
// straddle rows; the row-block path cuts it in two row blocks (forward)
// and two column slabs (dx).
func TestLinear4BitPackedPath(t *testing.T) {
	const n, in, out, next = 37, 1000, 300, 5
	var _ blas.Loader = blas.Native{} // the packed path
	if _, ok := any(loaderHidden{}).(blas.Loader); ok {
		t.Fatal("loaderHidden is a Loader: the row-block path is not tested")
	}
	for _, typ := range []quant.Type{quant.NF4, quant.FP4} {
		for _, double := range []bool{true, false} {
			rng := rand.New(rand.NewPCG(21, uint64(typ)))
			wv := make([]float32, out*in)
			for i := range wv {
				wv[i] = float32(rng.NormFloat64() * 0.02)
			}
			q, err := quant.Quantize(typ, wv, []int{out, in}, quant.Options{Double: double})
			if err != nil {
				t.Fatal(err)
			}
			wd := refDequantize4(q)
			for i, v := range q.Dequantize() {
				if math.Float32bits(v) != math.Float32bits(wd[i]) {
					t.Fatalf("%v double=%v: element %d dequantizes to %v, the reference %v", typ, double, i, v, wd[i])
				}
			}
			xs := make([]float32, n*in)
			for i := range xs {
				xs[i] = rng.Float32()*2 - 1
			}
			vs := make([]float32, next*out)
			for i := range vs {
				vs[i] = rng.Float32()*2 - 1
			}
			for _, f := range []amp.Format{amp.FP32, amp.BF16} {
				run := func(be blas.Backend, fourBit bool) (y, dx []float32) {
					b := NewBuilder(&Engine{BLAS: be, Workers: 3}, tensor.Float32)
					if f != amp.FP32 {
						p := amp.DefaultPolicy(f)
						b.Policy = &p
					}
					x := b.Param("x", []int{n, in}, append([]float32(nil), xs...), true)
					var w *G.Node
					if fourBit {
						w = b.Param4("w", q.Encode())
					} else {
						w = b.Param("w", []int{out, in}, append([]float32(nil), wd...), false)
					}
					yn := b.Linear(x, w)
					z := b.Linear(yn, b.Param("v", []int{next, out}, vs, false))
					g, err := G.Grad(G.Must(G.Sum(z)), x)
					if err != nil {
						t.Fatal(err)
					}
					runGraph(t, b)
					return append([]float32(nil), f32(yn)...), append([]float32(nil), f32(g[0])...)
				}
				name := fmt.Sprintf("%v double=%v %v", typ, double, f)
				yP, dxP := run(blas.Native{Workers: 3}, true)
				for _, other := range []struct {
					what   string
					be     blas.Backend
					fourBt bool
				}{
					{"the packed path on one worker", blas.Native{Workers: 1}, true},
					{"the row-block path", loaderHidden{blas.Native{Workers: 3}}, true},
					{"an fp32 copy of the dequantized weight", blas.Native{Workers: 3}, false},
				} {
					y, dx := other.be, other.fourBt
					yo, dxo := run(y, dx)
					for i := range yP {
						if math.Float32bits(yP[i]) != math.Float32bits(yo[i]) {
							t.Fatalf("%s: y[%d] = %v packed, %v by %s", name, i, yP[i], yo[i], other.what)
						}
					}
					for i := range dxP {
						if math.Float32bits(dxP[i]) != math.Float32bits(dxo[i]) {
							t.Fatalf("%s: dx[%d] = %v packed, %v by %s", name, i, dxP[i], dxo[i], other.what)
						}
					}
				}
				if f != amp.FP32 {
					continue
				}
				backends := map[string]blas.Backend{"native": blas.Native{Workers: 3}, "gonum": blas.Gonum{}}
				if o, err := blas.OpenOpenBLAS(2); err == nil {
					backends["openblas"] = o
				} else {
					t.Logf("OpenBLAS not tested: %v", err)
				}
				if d, err := blas.OpenOneDNN(2); err == nil {
					backends["onednn"] = d
				} else {
					t.Logf("oneDNN not tested: %v", err)
				}
				for bname, be := range backends {
					y, dx := yP, dxP
					if bname != "native" {
						y, dx = run(be, true)
					}
					worstY, worstDx := checkLinearRef(t, name+" "+bname, xs, wd, vs, y, dx, n, in, out, next)
					t.Logf("%s %s: y error at most %.4f of γ_k Σ|xw|, dx error at most %.4f of its bound", name, bname, worstY, worstDx)
				}
			}
		}
	}
}

// checkLinearRef checks y = x·Wᵀ and dx = g·W (g = ∂Σ(y·vᵀ)/∂y) of a
// linear layer against float64 products of x [n, in], the dequantized W
// [out, in] wd and v [next, out]: within γ_k·Σ|a||b| + u|s| of each value,
// the reference taking g's fp32 sums over next terms as given (γ_next for
// their order). It returns the worst errors relative to the bounds.
func checkLinearRef(t *testing.T, name string, xs, wd, vs, yP, dxP []float32, n, in, out, next int) (worstY, worstDx float64) {
	t.Helper()
	const u = 0x1p-24
	gamma := func(k int) float64 { return float64(k) * u / (1 - float64(k)*u) }
	for i := 0; i < n; i++ {
		for r := 0; r < out; r++ {
			var s, abs float64
			for c := 0; c < in; c++ {
				p := float64(xs[i*in+c]) * float64(wd[r*in+c])
				s, abs = s+p, abs+math.Abs(p)
			}
			d := math.Abs(float64(yP[i*out+r]) - s)
			if bound := gamma(in)*abs + u*math.Abs(s); d > bound {
				t.Fatalf("%s: y[%d,%d] = %v, reference %v: error %.3g over bound %.3g", name, i, r, yP[i*out+r], s, d, bound)
			}
			worstY = max(worstY, d/(gamma(in)*abs))
		}
	}
	// g[i,r] = Σⱼ v[j,r], the same fp32 sum for every row i; the
	// reference takes those sums as given and adds γ_next for
	// their order
	gr := make([]float64, out)
	for r := range gr {
		var s float32
		for j := 0; j < next; j++ {
			s += vs[j*out+r]
		}
		gr[r] = float64(s)
	}
	for i := 0; i < n; i++ {
		for c := 0; c < in; c++ {
			var s float64
			for r := 0; r < out; r++ {
				s += gr[r] * float64(wd[r*in+c])
			}
			bound := (gamma(out)+gamma(next)*(1+gamma(out)))*absG(vs, next, out, wd, in, c) + u*math.Abs(s)
			d := math.Abs(float64(dxP[i*in+c]) - s)
			if d > bound {
				t.Fatalf("%s: dx[%d,%d] = %v, reference %v: error %.3g over bound %.3g", name, i, c, dxP[i*in+c], s, d, bound)
			}
			worstDx = max(worstDx, d/bound)
		}
	}
	return worstY, worstDx
}
