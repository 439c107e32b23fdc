package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/quant"
)

// q4Weight is the Q4Weight of blob (quant.Tensor.Encode) computed in f.
func q4Weight(t testing.TB, blob []byte, f amp.Format) (*quant.Tensor, *Q4Weight) {
	t.Helper()
	q, l, err := quant.Layout(blob)
	must(t, err)
	r := NoRounding
	switch f {
	case amp.BF16:
		r = RoundBF16
	case amp.FP16:
		r = RoundFP16
	}
	return q, &Q4Weight{Elements: q.Numel(), Code: l.Code, Absmax: l.Absmax, NestedCode: l.NestedCode, NestedAbsmax: l.NestedAbsmax,
		AbsmaxCodes: l.AbsmaxCodes, Packed: l.Packed, Block: q.BlockSize, NestedBlock: q.NestedBlock, Nested: q.Nested, Offset: q.Offset, Round: r}
}

// TestGemmQ4Dequantizes: the GEMM with B a 4-bit weight's blob, read in
// place, dequantizes every element as the CPU does, bit for bit. With A
// the identity, C = op(B) exactly (each value is 1·w plus exact zeros, a
// negative zero coming out as +0): for NF4 and FP4, with and without
// double quantization, blocks of 64 and 32, kept
// in fp32 or rounded to bf16 or fp16, B transposed (the forward, x·Wᵀ)
// and not (dx = g·W), on a 70×150 weight whose blocks straddle rows and
// whose rows start on odd nibbles.
func TestGemmQ4Dequantizes(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const rows, cols = 70, 150
	rng := rand.New(rand.NewPCG(4, 4))
	vals := make([]float32, rows*cols)
	for i := range vals {
		vals[i] = float32(rng.NormFloat64() * 0.3)
	}
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for _, typ := range []quant.Type{quant.NF4, quant.FP4} {
		for _, o := range []quant.Options{{}, {Double: true}, {BlockSize: 32, Double: true}} {
			q, err := quant.Quantize(typ, vals, []int{rows, cols}, o)
			must(t, err)
			blob := q.Encode()
			B, err := d.NewBuffer((len(blob) + 3) &^ 3)
			must(t, err)
			must(t, B.Write(0, blob))
			for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
				want := q.Dequantize()
				if f != amp.FP32 {
					f.RoundSlice(want)
				}
				_, qw := q4Weight(t, blob, f)
				for _, transB := range []bool{true, false} {
					k, n := cols, rows // op(B) = Wᵀ
					if !transB {
						k, n = rows, cols // op(B) = W
					}
					eye := make([]float32, k*k)
					for i := range k {
						eye[i*k+i] = 1
					}
					A, err := d.NewBuffer(4 * len(eye))
					must(t, err)
					must(t, A.WriteFloat32(0, eye))
					C, err := d.NewBuffer(4 * k * n)
					must(t, err)
					must(t, ks.Gemm(r, GemmArgs{M: k, N: n, K: k, TransB: transB, Alpha: 1, A: A, B: B, C: C, Lda: k, Ldb: cols, Ldc: n, Q4: qw}))
					must(t, r.Submit())
					got := make([]float32, k*n)
					must(t, C.ReadFloat32(0, got))
					name := fmt.Sprintf("%v %+v %v transB=%v", typ, o, f, transB)
					for i := range k {
						for j := range n {
							at := i*cols + j // W[i][j]
							if transB {
								at = j*cols + i // Wᵀ[i][j]
							}
							w := want[at]
							if g := got[i*n+j]; g != w {
								t.Fatalf("%s: op(B)[%d][%d] = %v (%#08x), the CPU's dequantized value %v (%#08x)", name, i, j, g, math.Float32bits(g), w, math.Float32bits(w))
							}
						}
					}
					A.Free()
					C.Free()
				}
			}
			B.Free()
		}
	}
}

// A 4-bit B whose layout does not fit its buffer, or that is 16-bit too,
// is refused before anything is recorded.
func TestGemmQ4BadLayout(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	q, err := quant.Quantize(quant.NF4, make([]float32, 8*64), []int{8, 64}, quant.Options{Double: true})
	must(t, err)
	blob := q.Encode()
	B, err := d.NewBuffer((len(blob) + 3) &^ 3)
	must(t, err)
	defer B.Free()
	A, err := d.NewBuffer(4 * 64 * 64)
	must(t, err)
	defer A.Free()
	C, err := d.NewBuffer(4 * 64 * 8)
	must(t, err)
	defer C.Free()
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	_, good := q4Weight(t, blob, amp.FP32)
	g := GemmArgs{M: 64, N: 8, K: 64, TransB: true, Alpha: 1, A: A, B: B, C: C, Lda: 64, Ldb: 64, Ldc: 8}
	for name, bad := range map[string]func(*Q4Weight, *GemmArgs){
		"packed codes past the end": func(q *Q4Weight, _ *GemmArgs) { q.Packed += 8 },
		"unaligned code":            func(q *Q4Weight, _ *GemmArgs) { q.Code++ },
		"more elements than it has": func(_ *Q4Weight, g *GemmArgs) { g.N = 9 },
		"16-bit too":                func(_ *Q4Weight, g *GemmArgs) { g.B16 = true },
	} {
		q, gg := *good, g
		bad(&q, &gg)
		gg.Q4 = &q
		if err := ks.Gemm(r, gg); err == nil {
			t.Errorf("%s: recorded", name)
		}
		if r.Len() != 0 {
			t.Fatalf("%s: %d commands recorded", name, r.Len())
		}
	}
	gg := g
	gg.Q4 = good
	must(t, ks.Gemm(r, gg))
	must(t, r.Submit())
}

// BenchmarkGemmQ4 times the GEMM with B an fp32, a bf16 and an NF4
// (double-quantized) weight, in the forward's layout (x·Wᵀ, transB) and
// dx's (g·W), at 256³ and, on a GPU (not a CPU driver such as lavapipe),
// 2048³:
//
//	go test ./gpu/vulkan -run '^$' -bench GemmQ4
func BenchmarkGemmQ4(b *testing.B) {
	e, ks := openKernels(b)
	d := e.dev
	sizes := []int{256, 2048}
	if d.Physical.Type == TypeCPU {
		sizes = sizes[:1]
	}
	for _, n := range sizes {
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		vals := make([]float32, n*n)
		for i := range vals {
			vals[i] = float32(rng.NormFloat64() * 0.02)
		}
		q, err := quant.Quantize(quant.NF4, vals, []int{n, n}, quant.Options{Double: true})
		must(b, err)
		blob := q.Encode()
		A, err := d.NewBuffer(4 * n * n)
		must(b, err)
		B32, err := d.NewBuffer(4 * n * n)
		must(b, err)
		B4, err := d.NewBuffer((len(blob) + 3) &^ 3)
		must(b, err)
		must(b, B4.Write(0, blob))
		C, err := d.NewBuffer(4 * n * n)
		must(b, err)
		_, qw := q4Weight(b, blob, amp.FP32)
		r, err := d.NewRecorder()
		must(b, err)
		for _, transB := range []bool{true, false} {
			layout := "fwd"
			if !transB {
				layout = "dx"
			}
			for _, kind := range []string{"fp32", "bf16", "nf4"} {
				// One pass over K for every kind, as a 4-bit B always runs.
				g := GemmArgs{M: n, N: n, K: n, TransB: transB, Alpha: 1, A: A, B: B32, C: C, Lda: n, Ldb: n, Ldc: n, Splits: 1}
				switch kind {
				case "bf16":
					g.B16 = true
				case "nf4":
					g.B, g.Q4 = B4, qw
				}
				b.Run(fmt.Sprintf("%d^3/%s/%s", n, layout, kind), func(b *testing.B) {
					benchGemm(b, ks, r, g)
				})
			}
		}
		r.Close()
		for _, buf := range []*Buffer{A, B32, B4, C} {
			buf.Free()
		}
	}
}
