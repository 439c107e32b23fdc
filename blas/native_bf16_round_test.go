package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// TestVDPBF16PSRoundEpilogue holds the VDPBF16PS kernel's rounding
// epilogue (mode bf16Round) to amp's rounding on a stride through every
// float32 bit pattern and on the edges: ties to even both ways, carries
// into the exponent and to infinity, NaNs quiet and signalling, zeros,
// subnormals. C goes through the kernel as 0·sum + 1·C (zero operands,
// alpha 0, beta 1), which is C itself except that −0 becomes +0 and a
// signalling NaN is quieted, neither of which amp's rounding tells apart.
func TestVDPBF16PSRoundEpilogue(t *testing.T) {
	nativeBF16(t, 1) // skips where the CPU lacks the instruction
	edges := []uint32{0, 0x80000000, 1, 0x8000, 0x8001, 0x00018000, 0x00028000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x3f80ffff,
		0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0xff7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff, 0x7fffffff, 0x807fffff, 0x00800000}
	var pats []uint32
	pats = append(pats, edges...)
	for u := uint64(0); u < 1<<32; u += 4099 {
		pats = append(pats, uint32(u))
	}
	a := make([]uint32, bf16MR)
	b := make([]uint32, bf16NR)
	acc := make([]float32, bf16MR*bf16NR)
	c := make([]float32, bf16MR*bf16NR)
	for i0 := 0; i0 < len(pats); i0 += len(c) {
		for i := range c {
			c[i] = math.Float32frombits(pats[(i0+i)%len(pats)])
		}
		in := append([]float32(nil), c...)
		bf16KernelAsm(1, a, b, acc, c, bf16NR, 0, 1, bf16Final|bf16ReadC|bf16Round)
		for i, x := range in {
			want := amp.BF16.Round(x)
			if x == 0 {
				want = 0 // 0 + −0 is +0
			}
			if math.Float32bits(c[i]) != math.Float32bits(want) {
				t.Fatalf("round(%#08x) = %#08x, amp %#08x", math.Float32bits(x), math.Float32bits(c[i]), math.Float32bits(want))
			}
		}
	}
}

// TestNativeBF16GemmRound: GemmRound gives Gemm's C rounded by amp, bit
// for bit, through every path of the driver (full tiles rounded by the
// kernel, partial tiles and thin products rounded after), on the
// VDPBF16PS kernel where the CPU has it and on both kernels' Go models
// everywhere (the AMX model, like its kernel, leaves the rounding to the
// driver): operands as float32 and packed, every transpose, 1 and 3
// workers; and its epilogue callback sees every element once, rounded.
// Some operands are huge, so that sums overflow to infinity and NaN, and
// the unrounded C of each product is checked to hold no value that
// rounds to zero (GemmRound's claim that a gradient rounded there loses
// nothing to underflow).
func TestNativeBF16GemmRound(t *testing.T) {
	type gemmer struct {
		name string
		nb   func(t *testing.T, workers int) *NativeBF16
	}
	gs := []gemmer{
		{"VDPBF16PS model", func(_ *testing.T, w int) *NativeBF16 { return NewNativeBF16Go(w) }},
		{"AMX model", func(_ *testing.T, w int) *NativeBF16 { return NewNativeAMXGo(w) }},
		{"VDPBF16PS", nativeBF16}, // skips where the CPU lacks the instruction or the kernel is not built
	}
	rng := rand.New(rand.NewPCG(71, 72))
	for _, g := range gs {
		t.Run(g.name, func(t *testing.T) {
			for _, sh := range bf16DriverShapes {
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						m, n, k := sh.m, sh.n, sh.k
						lda, ldb := k, n
						if ta {
							lda = m
						}
						if tb {
							ldb = k
						}
						af, _ := bf16Rand(rng, m*k)
						bf, _ := bf16Rand(rng, k*n)
						for range 3 {
							af[rng.IntN(len(af))] = []float32{3e38, -3e38, float32(math.NaN())}[rng.IntN(3)]
						}
						for _, w := range []int{1, 3} {
							nb := g.nb(t, w)
							want := make([]float32, m*n)
							nb.Gemm(ta, tb, m, n, k, 1, BF16Matrix{F32: af, Ld: lda}, BF16Matrix{F32: bf, Ld: ldb}, nil, 0, want, n, nil)
							if u := amp.BF16.Underflows(want); u != 0 {
								t.Fatalf("%d×%d×%d: %d values of C round to zero", m, n, k, u)
							}
							amp.BF16.RoundSlice(want)
							for _, packed := range []bool{false, true} {
								name := fmt.Sprintf("%d×%d×%d tA=%v tB=%v %d workers packed=%v", m, n, k, ta, tb, w, packed)
								got := make([]float32, m*n)
								for i := range got {
									got[i] = float32(rng.NormFloat64()) // overwritten, never read
								}
								var pb *PackedBF16
								if packed {
									pb = nb.PackB(nil, tb, k, n, BF16Matrix{F32: bf, Ld: ldb})
								}
								// done sees each element once, rounded: it
								// records what it saw
								seen := make([]float32, m*n)
								times := make([]int, m*n)
								done := func(i0, i1, j0, j1 int) {
									for i := i0; i < i1; i++ {
										for j := j0; j < j1; j++ {
											seen[i*n+j] = got[i*n+j]
											times[i*n+j]++
										}
									}
								}
								nb.GemmRound(ta, tb, m, n, k, BF16Matrix{F32: af, Ld: lda}, BF16Matrix{F32: bf, Ld: ldb}, pb, got, n, done)
								for i := range want {
									if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
										t.Fatalf("%s: C[%d] = %v, Gemm rounded %v", name, i, got[i], want[i])
									}
									if times[i] != 1 || math.Float32bits(seen[i]) != math.Float32bits(want[i]) {
										t.Fatalf("%s: done saw C[%d] %d times, last as %v, want once as %v", name, i, times[i], seen[i], want[i])
									}
								}
							}
						}
					}
				}
			}
		})
	}
}
