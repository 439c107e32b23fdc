package vkengine

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/quant"
)

// weight4 adds the frozen 4-bit weight q (Builder.Param4). A float64
// graph cannot hold one; it gets a float64 weight of the values the 4-bit
// one stands for: dequantized, and rounded to compute when the product
// computes in a 16-bit format (nn's weights4 does so). Those values are
// exact in float64, so the float64 graph stays an exact reference.
func weight4(b *nn.Builder, name string, q *quant.Tensor, compute amp.Format) *G.Node {
	if b.Dtype == tensor.Float32 {
		return b.Param4(name, q.Encode())
	}
	vals := q.Dequantize()
	if compute != amp.FP32 {
		compute.RoundSlice(vals)
	}
	return b.Param(name, q.Shape, vals, false)
}

// magnitudeRatio is max_i Σ_k |a[i,k]·b[k,j]| over max_i |Σ_k a[i,k]·b[k,j]|
// for A [m, k] and op(B) = B [k, n] (or Bᵀ with B [n, k] when transB): how
// much larger than the largest value the γ_k bound's magnitude sum gets.
func magnitudeRatio(a []float32, b []float32, m, k, n int, transB bool) float64 {
	var sumAbs, largest float64
	for i := range m {
		for j := range n {
			var s, abs float64
			for p := range k {
				bv := b[p*n+j]
				if transB {
					bv = b[j*k+p]
				}
				x := float64(a[i*k+p]) * float64(bv)
				s, abs = s+x, abs+math.Abs(x)
			}
			sumAbs, largest = max(sumAbs, abs), max(largest, math.Abs(s))
		}
	}
	return sumAbs / largest
}

// TestWeights4Linear: a linear layer on a frozen 4-bit weight
// (Builder.Param4), forward and dx (a frozen weight gets no dW), NF4 and
// FP4, with and without double quantization, for each policy: the GEMM
// reads the blob in place and dequantizes each element as it loads its
// tile (rounded to the compute format under a 16-bit policy). W is 70×200:
// 64-value blocks straddle its rows and rows start on odd nibbles; K is
// 200 in the forward and 70 in dx, neither a multiple of the 16-deep tile.
//
// Bounds. Against float64, whose weight holds exactly the values the
// 4-bit one stands for: with the fp32 policy each value is a sum of K
// products, within γ_K·Σ|a||b| of exact in any order, and Σ|a||b| is at
// most R times the tensor's largest value (R measured here from the
// inputs: magnitudeRatio), so γ_K·R of the largest value bounds it. With
// a 16-bit policy x, the output's gradient and the results are rounded to
// 16 bits: a few ulps, 4·2^-8 (bf16) or 4·2^-11 (fp16), as
// TestWeights16Linear. Against the CPU's float32, which rounds the same
// inputs to the same formats and dequantizes to the same values, the
// engines' fp32 sums differ by at most 2·γ_K·R, which can move a result
// across one rounding boundary: an ulp of the format, plus that.
// Nothing of the size of the weight in fp32 is allocated on the device.
func TestWeights4Linear(t *testing.T) {
	e := openEngine(t)
	const n, in, out = 6, 200, 70
	xv, dyv := randoms(1, n*in, 1), randoms(99, n*out, 1) // buildCase's dy: seed 99
	bf16, fp16 := amp.DefaultPolicy(amp.BF16), amp.DefaultPolicy(amp.FP16)
	for _, typ := range []quant.Type{quant.NF4, quant.FP4} {
		for _, double := range []bool{true, false} {
			q, err := quant.Quantize(typ, randoms(2, out*in, 0.2), []int{out, in}, quant.Options{Double: double})
			if err != nil {
				t.Fatal(err)
			}
			wd := q.Dequantize()
			// the fp32 bound: γ_K·R for y (K = in) and dx (K = out)
			sumBound := max(gamma(in)*magnitudeRatio(xv, wd, n, in, out, true), gamma(out)*magnitudeRatio(dyv, wd, n, out, in, false))
			for _, pc := range []struct {
				name    string
				policy  *amp.Policy
				compute amp.Format
				tol     float64 // against float64
				ulp     float64 // the format's ulp (relative), against the CPU's float32
			}{
				{"fp32", nil, amp.FP32, sumBound, 0},
				{"bf16", &bf16, amp.BF16, 4 * 0x1p-8, 0x1p-7},
				{"fp16", &fp16, amp.FP16, 4 * 0x1p-11, 0x1p-10},
			} {
				name := fmt.Sprintf("%v double=%v %s policy", typ, double, pc.name)
				t.Run(name, func(t *testing.T) {
					build := func(b *nn.Builder) (*G.Node, G.Nodes) {
						x := b.Param("x", []int{n, in}, xv, true)
						return b.Linear(x, weight4(b, "w", q, pc.compute)), G.Nodes{x}
					}
					c := opCase{name: name, policy: pc.policy, build: build, tol: 1.01 * pc.tol}
					checkCase(t, e, c)
					checkAgainstCPU32(t, e, c, pc.ulp+2.02*sumBound)
					if pc.policy != nil && checkRoundedFormats(t, e, c) == 0 {
						t.Error("no 16-bit values checked")
					}
					// the weight's buffer is its blob; no buffer holds it in fp32
					b := nn.NewBuilder(&nn.Engine{}, tensor.Float32)
					b.Policy = pc.policy
					x := b.Param("x", []int{n, in}, xv, true)
					y := b.Linear(x, b.Param4("w", q.Encode()))
					if _, err := G.Backpropagate(G.Nodes{y}, G.Nodes{b.Input("dy", n, out)}, G.Nodes{x}); err != nil {
						t.Fatal(err)
					}
					p, err := e.Compile(b.G, b.IsParam)
					if err != nil {
						t.Fatal(err)
					}
					defer p.Close()
					if w := p.Param("w"); w == nil || w.Size() != (len(q.Encode())+3)&^3 {
						t.Errorf("the weight's buffer: %v, want its %d-byte blob", w, len(q.Encode()))
					}
					for _, buf := range p.owned {
						if buf.Size() >= 4*out*in {
							t.Errorf("a %d-byte buffer: the size of the weight in fp32 (%d bytes)", buf.Size(), 4*out*in)
						}
					}
				})
			}
		}
	}
}
