package blas

import (
	"math"

	"github.com/mixtune/mixtune/amp"
)

// The model of VDPBF16PS (Intel SDM, "VDPBF16PS—Dot Product of BF16 Pairs
// Accumulated into Packed Single Precision"): per fp32 lane,
//
//	srcdest += src1.bf16[2j+1] · src2.bf16[1]   (the odd element first)
//	srcdest += src1.bf16[2j+0] · src2.bf16[0]
//
// each an fp32 fused multiply-add rounded to nearest even, with denormal
// inputs read as zero and denormal results flushed to zero (MXCSR is
// neither read nor written). The product of two bf16 values is exact in
// float64, and float64(acc) + product is either exact or, where the
// exponents lie too far apart for that, too far from a float32 rounding
// boundary to move across it: rounding it to float32 once is the fp32
// FMA's rounding. Flushing follows SSE's underflow rule: a result whose
// rounding with unbounded exponent is below 2^-126 in magnitude.

// bf16DAZ widens a bf16 value, reading a denormal as a zero of its sign.
func bf16DAZ(h uint16) float64 {
	if h&0x7f80 == 0 {
		h &= 0x8000
	}
	return float64(math.Float32frombits(uint32(h) << 16))
}

// f32DAZ reads a denormal float32 as a zero of its sign.
func f32DAZ(x float32) float64 {
	if u := math.Float32bits(x); u&0x7f800000 == 0 {
		return float64(math.Float32frombits(u & 0x80000000))
	}
	return float64(x)
}

// roundFTZ rounds s to float32 (nearest even) and flushes a result below
// the smallest normal, 2^-126, to a zero of its sign.
func roundFTZ(s float64) float32 {
	if math.Abs(s) >= 0x1p-125 || s != s {
		return float32(s)
	}
	r := float32(s * 0x1p64) // exact scaling: the rounding as with unbounded exponent
	if math.Abs(float64(r)) < 0x1p-62 {
		return float32(math.Copysign(0, s))
	}
	return r * 0x1p-64
}

// vdpbf16psModel is one lane of VDPBF16PS: acc plus the products of the
// bf16 pairs a and b (dwords, the even element in the low half).
func vdpbf16psModel(acc float32, a, b uint32) float32 {
	acc = roundFTZ(f32DAZ(acc) + bf16DAZ(uint16(a>>16))*bf16DAZ(uint16(b>>16)))
	return roundFTZ(f32DAZ(acc) + bf16DAZ(uint16(a))*bf16DAZ(uint16(b)))
}

// modelKernel is dpbf16K14x32 computed with the model of VDPBF16PS: lane
// j of row i's accumulators takes B's pair (p, j) as src1 and A's pair
// (p, i), broadcast, as src2, as the kernel's loop does; the epilogue is
// scaleBF16Sum's.
func modelKernel(kcp int, a, b []uint32, acc, c []float32, ldc int, alpha, beta float32, mode int) {
	for i := 0; i < bf16MR; i++ {
		for j := 0; j < bf16NR; j++ {
			var s float32
			if mode&bf16Load != 0 {
				s = acc[i*bf16NR+j]
			}
			for p := 0; p < kcp; p++ {
				s = vdpbf16psModel(s, b[p*bf16NR+j], a[p*bf16MR+i])
			}
			finishBF16Sum(s, mode, acc, i*bf16NR+j, c, i*ldc+j, alpha, beta)
		}
	}
	if mode&bf16Final != 0 && mode&bf16Round != 0 { // the assembly kernel's rounding epilogue
		for i := 0; i < bf16MR; i++ {
			amp.BF16.RoundSlice(c[i*ldc : i*ldc+bf16NR])
		}
	}
}

// finishBF16Sum is what a model kernel does with sum s of one element
// when its k slice ends, as mode says: keeps it in acc[ai] for the next
// slice, or writes C[ci] = α·s (+ β·C[ci] where C is read), as the
// assembly kernels' epilogue does.
func finishBF16Sum(s float32, mode int, acc []float32, ai int, c []float32, ci int, alpha, beta float32) {
	switch {
	case mode&bf16Final == 0:
		acc[ai] = s
	case mode&bf16ReadC == 0:
		c[ci] = scaleBF16Sum(alpha, 0, s, 0)
	default:
		c[ci] = scaleBF16Sum(alpha, beta, s, c[ci])
	}
}

// NewNativeBF16Go returns NativeBF16's driver (packing, blocking,
// threading, epilogue) on a Go kernel that computes the instruction's
// semantics above, exactly and slowly: the same bits as the VDPBF16PS
// kernel, on any CPU. It exists for tests: of callers, on machines
// without AVX512_BF16.
func NewNativeBF16Go(workers int) *NativeBF16 {
	if workers <= 0 {
		workers = 1
	}
	micro := vdpMicro
	micro.kern = modelKernel
	return &NativeBF16{workers: workers, micro: micro, name: "native bf16 driver on a Go model of VDPBF16PS (tests only)"}
}
