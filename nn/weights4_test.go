package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/quant"
)

// A linear layer on a 4-bit weight computes y = x·Wᵀ and dx = g·W with W
// dequantized block by block inside the op; both match a float64 product
// of the dequantized weight within fp32 summation-order error: for a dot
// product of k exact fp32 terms, |fl(s) - s| ≤ γ_k Σ|xᵢwᵢ|, γ_k = ku/(1-ku),
// u = 2⁻²⁴, whatever order the GEMM sums in.
func TestLinear4BitMatchesDequantizedReference(t *testing.T) {
	// 300×1024: two row blocks of W in the forward, two column slabs (873
	// and 151 wide, not multiples of the 64-value quantization block) in dx
	const n, in, out, next = 4, 1024, 300, 3
	for _, typ := range []quant.Type{quant.NF4, quant.FP4} {
		rng := rand.New(rand.NewPCG(11, uint64(typ)))
		wv := make([]float32, out*in)
		for i := range wv {
			wv[i] = float32(rng.NormFloat64() * 0.02)
		}
		q, err := quant.Quantize(typ, wv, []int{out, in}, quant.Options{Double: true})
		if err != nil {
			t.Fatal(err)
		}
		wd := q.Dequantize()
		b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float32)
		x := randParam(b, rng, "x", 1, n, in)
		vData := make([]float32, next*out)
		for i := range vData {
			vData[i] = rng.Float32()*2 - 1
		}
		y := b.Linear(x, b.Param4("w", q.Encode()))
		z := b.Linear(y, b.Param("v", []int{next, out}, vData, false))
		g, err := G.Grad(G.Must(G.Sum(z)), x)
		if err != nil {
			t.Fatal(err)
		}
		vm := G.NewTapeMachine(b.G)
		if err := runVM(vm); err != nil {
			t.Fatal(err)
		}
		vm.Close()
		const u = 0x1p-24
		gamma := func(k int) float64 { return float64(k) * u / (1 - float64(k)*u) }
		xs := x.Value().Data().([]float32)
		ys := f32(y)
		var worstY float64
		for i := 0; i < n; i++ {
			for r := 0; r < out; r++ {
				var s, abs float64
				for c := 0; c < in; c++ {
					p := float64(xs[i*in+c]) * float64(wd[r*in+c])
					s, abs = s+p, abs+math.Abs(p)
				}
				d := math.Abs(float64(ys[i*out+r]) - s)
				if bound := gamma(in)*abs + u*math.Abs(s); d > bound {
					t.Fatalf("%v y[%d,%d] = %v, reference %v: error %.3g over bound %.3g", typ, i, r, ys[i*out+r], s, d, bound)
				}
				worstY = max(worstY, d/(gamma(in)*abs))
			}
		}
		// g = ∂Σz/∂y has g[i,r] = Σⱼ v[j,r] for every row i, summed in fp32
		// over next = 3 terms; the reference takes those fp32 values as given
		gr := make([]float64, out)
		for r := range gr {
			var s float32
			for j := 0; j < next; j++ {
				s += vData[j*out+r]
			}
			gr[r] = float64(s)
		}
		dx := f32(g[0])
		var worstDx float64
		for i := 0; i < n; i++ {
			for c := 0; c < in; c++ {
				var s, abs float64
				for r := 0; r < out; r++ {
					p := gr[r] * float64(wd[r*in+c])
					s, abs = s+p, abs+math.Abs(p)
				}
				// the sum over next terms may be ordered otherwise: γ_next on g
				bound := (gamma(out)+gamma(next)*(1+gamma(out)))*absG(vData, next, out, wd, in, c) + u*math.Abs(s)
				d := math.Abs(float64(dx[i*in+c]) - s)
				if d > bound {
					t.Fatalf("%v dx[%d,%d] = %v, reference %v: error %.3g over bound %.3g", typ, i, c, dx[i*in+c], s, d, bound)
				}
				worstDx = max(worstDx, d/bound)
			}
		}
		t.Logf("%v: y error at most %.3f of γ_k Σ|xw|; dx error at most %.3f of its bound", typ, worstY, worstDx)
	}
}

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
