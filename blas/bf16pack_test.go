package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// packTestValue is a float32 with random bits (every low half: ties,
// carries into the exponent, to Inf) or, one time in four, a NaN, an
// infinity, a denormal, a zero or a tie.
func packTestValue(rng *rand.Rand) float32 {
	special := []uint32{0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff, 0x7fffffff, 0, 0x80000000, 1, 0x807fffff,
		0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7fffff, 0xff7f8000, 0x00ff8000}
	u := rng.Uint32()
	if rng.IntN(4) == 0 {
		u = special[rng.IntN(len(special))]
	}
	return math.Float32frombits(u)
}

// TestPackRowPairsF32 holds the vector packing of float32 rows to bf16
// pairs to amp's scalar rounding (nearest even, NaN kept quiet), on
// values with every low half (ties, carries into the exponent, to Inf),
// NaNs, infinities, denormals and zeros, at the strides of both operands.
func TestPackRowPairsF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	for _, width := range []int{1, bf16MR, bf16NR} { // 1: a row of the AMX strip, contiguous
		for _, pairs := range []int{1, 7, 8, 9, 15, 16, 37, 256} {
			row := make([]float32, 2*pairs)
			for i := range row {
				row[i] = packTestValue(rng)
			}
			dst := make([]uint32, pairs*width)
			done := packRowPairsF32(dst, width, row, pairs)
			if done != 0 && (pairs < 8 || done != pairs) {
				t.Fatalf("%d pairs: packed %d, want all from 8 on (the tail overlapped), or none without AVX2", pairs, done)
			}
			for p := 0; p < done; p++ {
				want := uint32(amp.BF16Bits(row[2*p])) | uint32(amp.BF16Bits(row[2*p+1]))<<16
				if dst[p*width] != want {
					t.Fatalf("width %d, pair %d of %d: %#08x from %#08x, %#08x; amp rounds to %#08x",
						width, p, pairs, dst[p*width], math.Float32bits(row[2*p]), math.Float32bits(row[2*p+1]), want)
				}
			}
			for i, v := range dst { // nothing between the pairs' places written
				if i%width != 0 && v != 0 {
					t.Fatalf("width %d: dst[%d] = %#x written", width, i, v)
				}
			}
			if pairs >= 8 && done == 0 {
				t.Logf("no vector packing on this CPU: amp's rounding does every pair")
			}
		}
	}
}

// TestInterleaveF32 holds the vector interleaving of two float32 rows into
// bf16 pairs to amp's scalar rounding, on the values TestPackRowPairsF32
// draws.
func TestInterleaveF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	for _, lines := range []int{1, 7, 8, 9, 13, 14, 32, 77} {
		even, odd := make([]float32, lines), make([]float32, lines)
		for i := range even {
			even[i], odd[i] = packTestValue(rng), packTestValue(rng)
		}
		out := make([]uint32, lines)
		done := interleaveF32(out, even, odd)
		if done != 0 && (lines < 8 || done != lines) {
			t.Fatalf("%d lines: interleaved %d, want all from 8 on (the tail overlapped), or none without AVX2", lines, done)
		}
		for l := 0; l < done; l++ {
			want := uint32(amp.BF16Bits(even[l])) | uint32(amp.BF16Bits(odd[l]))<<16
			if out[l] != want {
				t.Fatalf("line %d of %d: %#08x from %#08x, %#08x; amp rounds to %#08x",
					l, lines, out[l], math.Float32bits(even[l]), math.Float32bits(odd[l]), want)
			}
		}
		for l := done; l < lines; l++ {
			if out[l] != 0 {
				t.Fatalf("out[%d] = %#x written past the vector routine's lines", l, out[l])
			}
		}
	}
}

// TestInterleaveBits holds the vector interleaving of two rows of bf16
// bits into pairs to the scalar pairing, at every length to 70 (tails
// overlapped) and at offsets that leave the rows off 32 bytes.
func TestInterleaveBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(75, 76))
	for lines := 1; lines <= 70; lines++ {
		for _, off := range []int{0, 1, 3} {
			even, odd := make([]uint16, lines+off), make([]uint16, lines+off)
			for i := range even {
				even[i], odd[i] = uint16(rng.Uint32()), uint16(rng.Uint32())
			}
			out := make([]uint32, lines+off)
			done := interleaveBits(out[off:], even[off:], odd[off:])
			if done != 0 && (lines < 16 || done != lines) {
				t.Fatalf("%d lines: interleaved %d, want all from 16 on (the tail overlapped), or none without AVX2", lines, done)
			}
			if lines >= 16 && done == 0 {
				t.Logf("no vector interleaving on this CPU")
			}
			for l := 0; l < done; l++ {
				if want := uint32(even[off+l]) | uint32(odd[off+l])<<16; out[off+l] != want {
					t.Fatalf("%d lines at offset %d: line %d is %#08x, want %#08x", lines, off, l, out[off+l], want)
				}
			}
			for i := range off {
				if out[i] != 0 {
					t.Fatalf("%d lines at offset %d: out[%d] = %#x written before the lines", lines, off, i, out[i])
				}
			}
			for l := done; l < lines; l++ {
				if out[off+l] != 0 {
					t.Fatalf("out[%d] = %#x written past the vector routine's lines", off+l, out[off+l])
				}
			}
		}
	}
}

// TestPackLinesBits holds the vector packing of rows of bf16 bits into a
// strip's pairs to the scalar pairing, dst[p·width+l] = x(l, 2p) |
// x(l, 2p+1)<<16, for line counts around 16 (a masked last group) and
// pair counts around 16 (the tail overlapped), and checks that nothing
// past the lines is written.
func TestPackLinesBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(77, 78))
	const sentinel = 0xdeadbeef
	for _, width := range []int{bf16MR, bf16NR} {
		for _, lines := range []int{1, 5, 14, 16, 17, 32} {
			if lines > width {
				continue
			}
			for _, pairs := range []int{15, 16, 17, 33, 64} {
				ld, off := 2*pairs+3, 5
				x := make([]uint16, off+lines*ld)
				for i := range x {
					x[i] = uint16(rng.Uint32())
				}
				dst := make([]uint32, pairs*width)
				for i := range dst {
					dst[i] = sentinel
				}
				done := packLinesBits(dst, width, x, ld, off, lines, pairs)
				if done == 0 {
					switch {
					case pairs < 16:
						continue // packPairs does them
					case have512():
						t.Fatalf("%d pairs of %d lines: nothing packed with AVX-512", pairs, lines)
					}
					t.Logf("no AVX-512 packing on this CPU (AVX512F and AVX512BW): packPairs does every pair")
					return
				}
				if pairs < 16 {
					t.Fatalf("%d pairs: packed with fewer than 16", pairs)
				}
				if done != pairs {
					t.Fatalf("%d pairs: packed %d", pairs, done)
				}
				for p := 0; p < pairs; p++ {
					for l := 0; l < width; l++ {
						got := dst[p*width+l]
						want := uint32(sentinel)
						if l < lines {
							row := off + l*ld
							want = uint32(x[row+2*p]) | uint32(x[row+2*p+1])<<16
						}
						if got != want {
							t.Fatalf("width %d, %d lines, %d pairs: dst[pair %d, line %d] = %#08x, want %#08x", width, lines, pairs, p, l, got, want)
						}
					}
				}
			}
		}
	}
}

// BenchmarkBF16Pack times the packing of the D576 training products'
// operands alone, as the native bf16 driver packs them for each kernel
// (vdp: VDPBF16PS, amx): every strip of op(A) over every k slice, every
// panel of op(B), with float32 operands rounded to bf16 as packed (f32)
// or bf16 bits (bits), on one goroutine; GB/s counts the operand's bytes
// read. driver-nokernel runs the whole driver on float32 operands (2
// workers) with a kernel that does nothing: the cost of a product beyond
// its kernel.
//
//	go test ./blas -run '^$' -bench BF16Pack
func BenchmarkBF16Pack(b *testing.B) {
	rng := rand.New(rand.NewPCG(91, 92))
	for _, t := range []int{512, 2048} {
		for _, sh := range trainingShapes(t, 576, 1536) {
			rowsA, colsA := sh.m, sh.k
			if sh.transA {
				rowsA, colsA = sh.k, sh.m
			}
			rowsB, colsB := sh.k, sh.n
			if sh.transB {
				rowsB, colsB = sh.n, sh.k
			}
			af, au := bf16Rand(rng, rowsA*colsA)
			bf, bu := bf16Rand(rng, rowsB*colsB)
			for _, kern := range []struct {
				name  string
				micro bf16Micro
			}{{"vdp", vdpMicro}, {"amx", amxMicro}} {
				mc := kern.micro
				kp := roundUp((sh.k+1)/2, mc.kStep)
				ns := (kp + bf16KCP - 1) / bf16KCP
				kcp := roundUp((kp+ns-1)/ns, mc.kStep)
				for _, form := range []string{"f32", "bits"} {
					am, bm := BF16Matrix{F32: af, Ld: colsA}, BF16Matrix{F32: bf, Ld: colsB}
					size := 4
					if form == "bits" {
						am, bm, size = BF16Matrix{Bits: au, Ld: colsA}, BF16Matrix{Bits: bu, Ld: colsB}, 2
					}
					trans := map[bool]string{false: "N", true: "T"}
					b.Run(fmt.Sprintf("%s/A%s/%s/%s", sh.name, trans[sh.transA], kern.name, form), func(b *testing.B) {
						ap := make([]uint32, kcp*mc.mr)
						for b.Loop() {
							for i0 := 0; i0 < sh.m; i0 += mc.mr {
								for pc := 0; pc < kp; pc += kcp {
									kc := min(kcp, kp-pc)
									mc.packA(ap[:kc*mc.mr], sh.transA, &am, sh.k, sh.m, i0, pc, kc)
								}
							}
						}
						b.ReportMetric(float64(size*sh.m*sh.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
					})
					b.Run(fmt.Sprintf("%s/B%s/%s/%s", sh.name, trans[sh.transB], kern.name, form), func(b *testing.B) {
						bp := make([]uint32, kp*bf16NR)
						for b.Loop() {
							for j0 := 0; j0 < sh.n; j0 += bf16NR {
								packPanelB(bp, sh.transB, &bm, sh.k, sh.n, j0)
							}
						}
						b.ReportMetric(float64(size*sh.n*sh.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
					})
				}
				// the driver end to end on float32 operands, 2 workers, with a
				// kernel that does nothing: what a product costs beyond its
				// kernel (packing, blocking, the partial tiles' epilogue)
				noop := mc
				noop.kern = func(kcp int, a, b []uint32, acc, c []float32, ldc int, alpha, beta float32, mode int) {}
				nb := &NativeBF16{workers: 2, micro: noop}
				c := make([]float32, sh.m*sh.n)
				b.Run(fmt.Sprintf("%s/driver-nokernel/%s", sh.name, kern.name), func(b *testing.B) {
					for b.Loop() {
						nb.Gemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, BF16Matrix{F32: af, Ld: colsA}, BF16Matrix{F32: bf, Ld: colsB}, nil, 0, c, sh.n, nil)
					}
					b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/call")
				})
			}
		}
	}
}

// TestPackRoundsAsAmp packs float32 operands with every low half (ties,
// carries, NaNs, infinities, denormals) for both kernels, op(A) and op(B)
// in both transposes, and holds each packed dword to the packing of the
// same operand rounded first by amp, element by element (bits in): the
// vector rounding inside the packing must be amp's, wherever it runs
// (row runs, interleaved pairs, overlapped tails, AMX's block
// transposes).
func TestPackRoundsAsAmp(t *testing.T) {
	rng := rand.New(rand.NewPCG(75, 76))
	for _, mc := range []struct {
		name  string
		micro bf16Micro
	}{{"vdp", vdpMicro}, {"amx", amxMicro}} {
		for _, sh := range []struct{ m, n, k int }{{1, 1, 1}, {13, 9, 7}, {14, 33, 34}, {45, 70, 101}, {32, 32, 64}, {70, 45, 600}} {
			for _, trans := range []bool{false, true} {
				for _, operand := range []string{"A", "B"} {
					rows, cols := sh.m, sh.k // op(A) m×k; A k×m when transposed
					if operand == "B" {
						rows, cols = sh.k, sh.n
					}
					if trans {
						rows, cols = cols, rows
					}
					ld := cols + 3
					f := make([]float32, rows*ld)
					bits := make([]uint16, len(f))
					for i := range f {
						f[i] = packTestValue(rng)
						bits[i] = amp.BF16Bits(f[i])
					}
					fm, bm := BF16Matrix{F32: f, Ld: ld}, BF16Matrix{Bits: bits, Ld: ld}
					kp := roundUp((sh.k+1)/2, mc.micro.kStep)
					var got, want []uint32
					if operand == "A" {
						kc := min(kp, roundUp(70, mc.micro.kStep)) // a slice that ends inside k, or in its padding
						for pc := 0; pc < kp; pc += kc {
							n := min(kc, kp-pc)
							for i0 := 0; i0 < sh.m; i0 += mc.micro.mr {
								g, w := make([]uint32, n*mc.micro.mr), make([]uint32, n*mc.micro.mr)
								mc.micro.packA(g, trans, &fm, sh.k, sh.m, i0, pc, n)
								mc.micro.packA(w, trans, &bm, sh.k, sh.m, i0, pc, n)
								got, want = append(got, g...), append(want, w...)
							}
						}
					} else {
						for j0 := 0; j0 < sh.n; j0 += bf16NR {
							g, w := make([]uint32, kp*bf16NR), make([]uint32, kp*bf16NR)
							packPanelB(g, trans, &fm, sh.k, sh.n, j0)
							packPanelB(w, trans, &bm, sh.k, sh.n, j0)
							got, want = append(got, g...), append(want, w...)
						}
					}
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("%s %s %d×%d×%d transposed %v: packed dword %d = %#08x from float32, %#08x from amp's bits", mc.name, operand, sh.m, sh.n, sh.k, trans, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
