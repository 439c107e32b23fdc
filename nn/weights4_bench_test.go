package nn

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/quant"
)

// BenchmarkLinear4Bit times the products of a linear layer on a 2048×2048
// NF4 weight (double quantization), y = x·Wᵀ ("fwd") and dx = g·W ("dx"),
// for N = 2048 and 64 rows of x, on the native backend with GOMAXPROCS
// workers (-cpu sets it):
//
//   - packed: W dequantized as the GEMM packs its panels (blas.Loader);
//   - rowblock: W dequantized a block of rows (fwd) or columns (dx) at a
//     time, at most 1 MiB, each block a GEMM of its own (what OpenBLAS and
//     oneDNN still do, and what the native backend did before);
//   - bf16: a bf16 weight widened as the GEMM packs it (blas.Widener);
//   - fp32: an fp32 weight, for the cost of the GEMM alone.
//
// go test ./nn -run '^$' -bench Linear4Bit -benchtime 5x
func BenchmarkLinear4Bit(b *testing.B) {
	const in, out = 2048, 2048
	rng := rand.New(rand.NewPCG(1, 2))
	wv := make([]float32, out*in)
	for i := range wv {
		wv[i] = float32(rng.NormFloat64() * 0.02)
	}
	q, err := quant.Quantize(quant.NF4, wv, []int{out, in}, quant.Options{Double: true})
	if err != nil {
		b.Fatal(err)
	}
	wd := q.Dequantize()
	bits := make([]uint16, len(wd))
	for i, v := range wd {
		bits[i] = amp.BF16.Bits16(v)
	}
	for _, n := range []int{2048, 64} {
		x := make([]float32, n*in)
		for i := range x {
			x[i] = rng.Float32()*2 - 1
		}
		g := make([]float32, n*out)
		for i := range g {
			g[i] = rng.Float32()*2 - 1
		}
		y, dx := make([]float32, n*out), make([]float32, n*in)
		workers := runtime.GOMAXPROCS(0)
		e := &Engine{BLAS: blas.Native{Workers: workers}, Workers: workers}
		w4 := weights4{on: true, compute: amp.FP32}
		w16 := weights16{on: true, stored: amp.BF16, compute: amp.FP32}
		paths := []struct {
			name    string
			fwd, dx func()
		}{
			{"packed",
				func() { w4.sgemm(e, amp.FP32, false, false, true, n, out, in, x, in, q, in, y, out) },
				func() { w4.sgemm(e, amp.FP32, true, false, false, n, in, out, g, out, q, in, dx, in) }},
			{"rowblock",
				func() {
					w4.rowBlocks(e, q, out, in, func(r0, r1 int, wb []float32) {
						e.sgemmRound(amp.FP32, false, false, true, n, r1-r0, in, x, in, wb, in, y[r0:], out)
					})
				},
				func() {
					w4.colBlocks(e, q, out, in, func(c0, c1 int, wb []float32) {
						e.sgemmRound(amp.FP32, true, false, false, n, c1-c0, out, g, out, wb, c1-c0, dx[c0:], in)
					})
				}},
			{"bf16",
				func() { w16.sgemm(e, amp.FP32, false, false, true, n, out, in, x, in, bits, in, y, out) },
				func() { w16.sgemm(e, amp.FP32, true, false, false, n, in, out, g, out, bits, in, dx, in) }},
			{"fp32",
				func() { e.BLAS.Sgemm(false, true, n, out, in, 1, x, in, wd, in, 0, y, out) },
				func() { e.BLAS.Sgemm(false, false, n, in, out, 1, g, out, wd, in, 0, dx, in) }},
		}
		for _, p := range paths {
			for _, op := range []struct {
				name string
				fn   func()
			}{{"fwd", p.fwd}, {"dx", p.dx}} {
				b.Run(fmt.Sprintf("N=%d/%s/%s", n, op.name, p.name), func(b *testing.B) {
					for b.Loop() {
						op.fn()
					}
					b.ReportMetric(2*float64(n)*in*out*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}
