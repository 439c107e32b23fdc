package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/cpufeat"
)

// gemmShape is one product of a training step: C = op(A)·op(B), C m×n.
type gemmShape struct {
	name           string
	transA, transB bool
	m, n, k        int
}

// trainingShapes are the three products of a linear layer y = x·Wᵀ with
// W [out, in] at t tokens: the forward pass, dx = dy·W and dW = dyᵀ·x.
func trainingShapes(t, in, out int) []gemmShape {
	return []gemmShape{
		{fmt.Sprintf("T%d/fwd_%dto%d", t, in, out), false, true, t, out, in},
		{fmt.Sprintf("T%d/dx_%dto%d", t, in, out), false, false, t, in, out},
		{fmt.Sprintf("T%d/dW_%dto%d", t, in, out), true, false, out, in, t},
	}
}

// narrowBF16 truncates float32 values that are already bf16 to their bits.
func narrowBF16(dst []uint16, src []float32) {
	for i, x := range src {
		dst[i] = uint16(math.Float32bits(x) >> 16)
	}
}

// bf16Rand draws n bf16 values in [-1, 1), as float32 and as bits.
func bf16Rand(rng *rand.Rand, n int) ([]float32, []uint16) {
	f := make([]float32, n)
	u := make([]uint16, n)
	for i := range f {
		f[i] = amp.BF16.Round(float32(rng.Float64()*2 - 1))
		u[i] = uint16(math.Float32bits(f[i]) >> 16)
	}
	return f, u
}

// BenchmarkGEMMTraining reports GFLOP/s for the products of a linear layer
// at training shapes: native, OpenBLAS and oneDNN fp32, oneDNN and native
// bf16 alone (native-bf16: the VDPBF16PS kernel, native-amx-bf16: the AMX
// one; and e2e-native-bf16-packedW, e2e-native-amx-bf16-packedW as nn
// runs them: float32 operands rounded as packed, a weight packed once),
// and the two ways to multiply a bf16 weight end to end (native: widen W
// to fp32, then Sgemm; oneDNN: truncate the fp32-held bf16 activations
// to bits, then GemmBF16). "omp" runs oneDNN on its own OpenMP threads.
//
//	go test ./blas -run '^$' -bench 'GEMMTraining/D576' -benchtime 5x
func BenchmarkGEMMTraining(b *testing.B) {
	dnn, derr := OpenOneDNN(1)
	bf16err := derr
	if derr == nil && !dnn.BF16() {
		bf16err = fmt.Errorf("oneDNN's bf16 GEMM needs AVX-512 (%s)", dnn.Name())
	}
	ob, oerr := OpenOpenBLAS(1)
	seed := uint64(0)
	for _, dims := range [][2]int{{576, 1536}, {1024, 3072}, {2048, 5632}} {
		for _, t := range []int{512, 2048} {
			for _, sh := range trainingShapes(t, dims[0], dims[1]) {
				seed++
				rowsA, colsA := sh.m, sh.k
				if sh.transA {
					rowsA, colsA = sh.k, sh.m
				}
				rowsB, colsB := sh.k, sh.n
				if sh.transB {
					rowsB, colsB = sh.n, sh.k
				}
				// the operands are drawn when a benchmark of the shape
				// runs, not for those the -bench pattern leaves out
				var af, bf, c, wide []float32
				var au, bu, na, nb []uint16
				operands := func() {
					if af != nil {
						return
					}
					rng := rand.New(rand.NewPCG(1, seed))
					af, au = bf16Rand(rng, rowsA*colsA)
					bf, bu = bf16Rand(rng, rowsB*colsB)
					c = make([]float32, sh.m*sh.n)
					wide, na, nb = make([]float32, len(bf)), make([]uint16, len(af)), make([]uint16, len(bf))
				}
				flops := 2 * float64(sh.m) * float64(sh.n) * float64(sh.k)
				// The weight is A in dW (neither operand: both are
				// activations), B otherwise.
				weightIsB := !sh.transA
				for _, threads := range []int{1, 2} {
					run := func(impl string, skip error, f func()) {
						b.Run(fmt.Sprintf("D%d/%s/%s/threads=%d", dims[0], sh.name, impl, threads), func(b *testing.B) {
							if skip != nil {
								b.Skip(skip)
							}
							operands()
							f()
							b.ResetTimer()
							for b.Loop() {
								f()
							}
							b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
						})
					}
					nat := Native{Workers: threads}
					run("native", nil, func() {
						nat.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, af, colsA, bf, colsB, 0, c, sh.n)
					})
					if ob != nil {
						ob.workers = threads
					}
					run("openblas", oerr, func() {
						ob.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, af, colsA, bf, colsB, 0, c, sh.n)
					})
					var split, omp OneDNN
					if dnn != nil {
						split, omp = *dnn, *dnn
						split.workers, omp.ompThreads = threads, threads
					}
					run("onednn", derr, func() {
						split.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, af, colsA, bf, colsB, 0, c, sh.n)
					})
					run("onednn-omp", derr, func() {
						omp.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, af, colsA, bf, colsB, 0, c, sh.n)
					})
					run("onednn-bf16", bf16err, func() {
						split.GemmBF16(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, au, colsA, bu, colsB, 0, c, sh.n)
					})
					run("onednn-bf16-omp", bf16err, func() {
						omp.GemmBF16(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, au, colsA, bu, colsB, 0, c, sh.n)
					})
					// native-bf16 is the VDPBF16PS kernel, native-amx-bf16 the
					// AMX one, each skipped where the CPU lacks it
					vdpFeatures := cpufeat.Detect()
					vdpFeatures.AMXPermitted = false
					nbf, nerr := NewNativeBF16(vdpFeatures, threads)
					amx, aerr := NewNativeBF16(cpufeat.Detect(), threads)
					if aerr == nil && amx.micro.mr != amxMR {
						aerr = fmt.Errorf("no AMX-BF16 granted here (%s)", cpufeat.Detect())
					}
					for _, kern := range []struct {
						name string
						nb   *NativeBF16
						err  error
					}{{"native-bf16", nbf, nerr}, {"native-amx-bf16", amx, aerr}} {
						run(kern.name, kern.err, func() {
							kern.nb.GemmBF16(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, au, colsA, bu, colsB, 0, c, sh.n)
						})
						// as nn runs it: the float32-held operands rounded to
						// bf16 as they are packed, a weight B packed once
						var pb *PackedBF16 // packed in the untimed first call
						run("e2e-"+kern.name+"-packedW", kern.err, func() {
							if pb == nil && weightIsB {
								pb = kern.nb.PackB(nil, sh.transB, sh.k, sh.n, BF16Matrix{Bits: bu, Ld: colsB})
							}
							bm := BF16Matrix{F32: bf, Ld: colsB}
							kern.nb.Gemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, BF16Matrix{F32: af, Ld: colsA}, bm, pb, 0, c, sh.n, nil)
						})
					}
					// End to end from what nn holds: a bf16 weight as bits,
					// activations and gradients as fp32 holding bf16 values.
					run("e2e-native-widenW", nil, func() {
						bw := bf
						if weightIsB {
							amp.BF16.FromBits16Slice(wide, bu)
							bw = wide
						}
						nat.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, af, colsA, bw, colsB, 0, c, sh.n)
					})
					run("e2e-onednn-bf16-narrowX", bf16err, func() {
						narrowBF16(na, af)
						bw := bu
						if !weightIsB {
							narrowBF16(nb, bf)
							bw = nb
						}
						split.GemmBF16(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, na, colsA, bw, colsB, 0, c, sh.n)
					})
				}
			}
		}
	}
}

// BenchmarkGEMMSmall times the small products of a LoRA step (rank 8
// adapters, one 64-row tile of tiled attention with 64-wide heads), where
// the cost of a call into a C library shows.
//
//	go test ./blas -run '^$' -bench GEMMSmall
func BenchmarkGEMMSmall(b *testing.B) {
	dnn, derr := OpenOneDNN(1)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sh := range []gemmShape{
		{"lora_xAt_512x8x576", false, true, 512, 8, 576},
		{"lora_hBt_512x576x8", false, true, 512, 576, 8},
		{"lora_dA_8x576x512", true, false, 8, 576, 512},
		{"attn_QKt_64x64x64", false, true, 64, 64, 64},
		{"attn_PV_64x64x64", false, false, 64, 64, 64},
		{"attn_QKt_64x512x64", false, true, 64, 512, 64},
		{"attn_dV_512x64x64", true, false, 512, 64, 64},
	} {
		rowsA, colsA := sh.m, sh.k
		if sh.transA {
			rowsA, colsA = sh.k, sh.m
		}
		rowsB, colsB := sh.k, sh.n
		if sh.transB {
			rowsB, colsB = sh.n, sh.k
		}
		af, _ := bf16Rand(rng, rowsA*colsA)
		bf, _ := bf16Rand(rng, rowsB*colsB)
		c := make([]float32, sh.m*sh.n)
		flops := 2 * float64(sh.m) * float64(sh.n) * float64(sh.k)
		for _, impl := range []string{"native", "onednn"} {
			b.Run(sh.name+"/"+impl, func(b *testing.B) {
				var be Backend = Native{Workers: 1}
				if impl == "onednn" {
					if derr != nil {
						b.Skip(derr)
					}
					be = dnn
				}
				for b.Loop() {
					be.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, af, colsA, bf, colsB, 0, c, sh.n)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
