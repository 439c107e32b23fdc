//go:build amd64 && !purego

#include "textflag.h"

// BF16_CONSTS_AVX2 loads the bf16 rounding constants (clobbering AX):
// Y10 0x7fff (bias), Y11 1, Y13 0x7fffffff (abs mask), Y14 0x7f800000
// (+Inf bits), Y15 0x00400000 (quiet bit).
#define BF16_CONSTS_AVX2 \
	MOVL $0x7fff, AX; VMOVD AX, X10; VPBROADCASTD X10, Y10; \
	MOVL $1, AX; VMOVD AX, X11; VPBROADCASTD X11, Y11; \
	MOVL $0x7fffffff, AX; VMOVD AX, X13; VPBROADCASTD X13, Y13; \
	MOVL $0x7f800000, AX; VMOVD AX, X14; VPBROADCASTD X14, Y14; \
	MOVL $0x00400000, AX; VMOVD AX, X15; VPBROADCASTD X15, Y15

// BF16_ROUND_AVX2 rounds the floats in Y0 to bf16 in the high halves of
// Y2, per lane with u the bits: u + 0x7fff + ((u >> 16) & 1), or, for a
// NaN (u & 0x7fffffff > 0x7f800000), u | 0x00400000 (quiet, sign and
// leading payload kept); the low halves are garbage. Clobbers Y1, Y3-Y5.
#define BF16_ROUND_AVX2 \
	VPSRLD $16, Y0, Y1; VPAND Y11, Y1, Y1; \
	VPADDD Y10, Y0, Y2; VPADDD Y1, Y2, Y2; \
	VPAND Y13, Y0, Y3; VPCMPGTD Y14, Y3, Y4; \
	VPOR Y15, Y0, Y5; VPBLENDVB Y4, Y5, Y2, Y2

// func roundFP16AVX2(xs []float32)
// len(xs) is a multiple of 8. Per lane, with u the bits and a = u & 0x7fffffff:
//   normal    (a >= 0x38800000): (u + 0xfff + ((u >> 13) & 1)) &^ 0x1fff
//   subnormal (a <  0x38800000): ((float(a) + 0.5) - 0.5) | sign
//   overflow  (a >= 0x477ff000): sign | 0x7f800000
//   NaN       (a >  0x7f800000): u | 0x00400000
TEXT ·roundFP16AVX2(SB), NOSPLIT, $0-24
	MOVQ xs_base+0(FP), SI
	MOVQ xs_len+8(FP), CX
	SHRQ $3, CX
	JZ   hdone
	MOVL $0xfff, AX
	VMOVD AX, X6
	VPBROADCASTD X6, Y6            // bias
	MOVL $1, AX
	VMOVD AX, X7
	VPBROADCASTD X7, Y7            // one
	MOVL $0xffffe000, AX
	VMOVD AX, X8
	VPBROADCASTD X8, Y8            // keep 10 mantissa bits
	MOVL $0x7fffffff, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9            // abs mask
	MOVL $0x38800000, AX
	VMOVD AX, X10
	VPBROADCASTD X10, Y10          // 2^-14
	MOVL $0x477fefff, AX
	VMOVD AX, X11
	VPBROADCASTD X11, Y11          // just below 65520
	MOVL $0x7f800000, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12          // +Inf bits
	MOVL $0x3f000000, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13          // 0.5
	MOVL $0x80000000, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14          // sign
	MOVL $0x00400000, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15          // quiet bit
hloop:
	VMOVDQU (SI), Y0               // u
	VPAND   Y9, Y0, Y1             // a
	VPAND   Y14, Y0, Y2            // sign
	VPSRLD  $13, Y0, Y3
	VPAND   Y7, Y3, Y3
	VPADDD  Y6, Y0, Y4
	VPADDD  Y3, Y4, Y4
	VPAND   Y8, Y4, Y4             // normal result
	VADDPS  Y13, Y1, Y5
	VSUBPS  Y13, Y5, Y5
	VPOR    Y2, Y5, Y5             // subnormal result
	VPCMPGTD Y1, Y10, Y3           // 2^-14 > a
	VPBLENDVB Y3, Y5, Y4, Y4
	VPOR    Y12, Y2, Y5            // ±Inf
	VPCMPGTD Y11, Y1, Y3           // a > 0x477fefff
	VPBLENDVB Y3, Y5, Y4, Y4
	VPOR    Y15, Y0, Y5            // NaN kept NaN
	VPCMPGTD Y12, Y1, Y3           // a > Inf
	VPBLENDVB Y3, Y5, Y4, Y4
	VMOVDQU Y4, (SI)
	ADDQ    $32, SI
	DECQ    CX
	JNZ     hloop
	VZEROUPPER
hdone:
	RET

// func countUnderflowAVX2(xs []float32, limit uint32) int
// len(xs) is a multiple of 8 and below 2^31. Counts the lanes whose
// magnitude bits a satisfy 0 < a <= limit: each such lane compares to -1,
// subtracted from a per-lane counter, summed across lanes at the end.
TEXT ·countUnderflowAVX2(SB), NOSPLIT, $0-40
	MOVQ xs_base+0(FP), SI
	MOVQ xs_len+8(FP), CX
	SHRQ $3, CX
	VPXOR Y0, Y0, Y0               // per-lane counts
	VPXOR Y1, Y1, Y1               // zero
	MOVL limit+24(FP), AX
	VMOVD AX, X2
	VPBROADCASTD X2, Y2            // limit
	MOVL $0x7fffffff, AX
	VMOVD AX, X3
	VPBROADCASTD X3, Y3            // abs mask
	TESTQ CX, CX
	JZ   usum
uloop:
	VMOVDQU (SI), Y4
	VPAND   Y3, Y4, Y4             // a
	VPCMPGTD Y1, Y4, Y5            // a > 0
	VPCMPGTD Y2, Y4, Y6            // a > limit
	VPANDN  Y5, Y6, Y5             // a > 0 and not a > limit
	VPSUBD  Y5, Y0, Y0
	ADDQ    $32, SI
	DECQ    CX
	JNZ     uloop
usum:
	VEXTRACTI128 $1, Y0, X1
	VPADDD  X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDD  X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPADDD  X1, X0, X0
	VMOVD   X0, AX
	MOVQ    AX, ret+32(FP)
	VZEROUPPER
	RET

// func widenBF16AVX2(dst []float32, src []uint16)
// len(src) is a multiple of 8 and len(dst) >= len(src): dst[i] = src[i] << 16.
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $3, CX
	JZ   wbdone
wbloop:
	VPMOVZXWD (SI), Y0
	VPSLLD    $16, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       wbloop
	VZEROUPPER
wbdone:
	RET

// func widenFP16F16C(dst []float32, src []uint16)
// len(src) is a multiple of 8 and len(dst) >= len(src): VCVTPH2PS, exact.
TEXT ·widenFP16F16C(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $3, CX
	JZ   whdone
whloop:
	VCVTPH2PS (SI), Y0
	VMOVUPS   Y0, (DI)
	ADDQ      $16, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       whloop
	VZEROUPPER
whdone:
	RET

// func cpuidECX1() uint32
TEXT ·cpuidECX1(SB), NOSPLIT, $0-4
	MOVL $1, AX
	XORL CX, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET

// func roundBF16CountAVX512(dst, src *float32, n int, limit uint32) int
// n is a multiple of 16; dst may equal src. Per lane, with u = src's bits:
// dst = roundBF16(u) (the recipe of roundBF16ToAVX2), and the result counts
// the lanes whose magnitude a satisfies 0 < a <= limit, that is
// a-1 < limit unsigned (limit 0 counts nothing).
TEXT ·roundBF16CountAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ R8, R8                    // count
	SHRQ $4, CX
	JZ   cdone
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z10           // bias
	MOVL $1, AX
	VPBROADCASTD AX, Z11           // one
	MOVL $0xffff0000, AX
	VPBROADCASTD AX, Z12           // high half mask
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z13           // abs mask
	MOVL $0x7f800000, AX
	VPBROADCASTD AX, Z14           // +Inf bits
	MOVL $0x00400000, AX
	VPBROADCASTD AX, Z15           // quiet bit
	MOVL limit+24(FP), AX
	VPBROADCASTD AX, Z9            // limit
cloop:
	VMOVDQU32 (SI), Z0             // u
	VPANDD    Z13, Z0, Z3          // a
	VPSUBD    Z11, Z3, Z4          // a-1
	VPCMPUD   $1, Z9, Z4, K2       // a-1 < limit: underflows
	KMOVW     K2, AX
	POPCNTL   AX, AX
	ADDQ      AX, R8
	VPCMPUD   $6, Z14, Z3, K1      // a > Inf: NaN
	VPSRLD    $16, Z0, Z1
	VPANDD    Z11, Z1, Z1          // lsb
	VPADDD    Z10, Z0, Z2
	VPADDD    Z1, Z2, Z2
	VPANDD    Z12, Z2, Z2          // rounded
	VPANDD    Z12, Z0, Z5
	VPORD     Z15, Z5, Z5          // NaN kept NaN
	VMOVDQA32 Z5, K1, Z2
	VMOVDQU32 Z2, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       cloop
	VZEROUPPER
cdone:
	MOVQ R8, ret+32(FP)
	RET

// func roundFP16CountAVX512(dst, src *float32, n int, limit uint32) int
// n is a multiple of 16; dst may equal src. Per lane, dst = roundFP16(u)
// (the recipe of roundFP16AVX2), and the result counts the lanes whose
// magnitude a satisfies 0 < a <= limit, as roundBF16CountAVX512 does.
TEXT ·roundFP16CountAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ R8, R8                    // count
	SHRQ $4, CX
	JZ   fdone
	MOVL $0xfff, AX
	VPBROADCASTD AX, Z6            // bias
	MOVL $1, AX
	VPBROADCASTD AX, Z7            // one
	MOVL $0xffffe000, AX
	VPBROADCASTD AX, Z8            // keep 10 mantissa bits
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z9            // abs mask
	MOVL $0x38800000, AX
	VPBROADCASTD AX, Z10           // 2^-14
	MOVL $0x477fefff, AX
	VPBROADCASTD AX, Z11           // just below 65520
	MOVL $0x7f800000, AX
	VPBROADCASTD AX, Z12           // +Inf bits
	MOVL $0x3f000000, AX
	VPBROADCASTD AX, Z13           // 0.5
	MOVL $0x80000000, AX
	VPBROADCASTD AX, Z14           // sign
	MOVL $0x00400000, AX
	VPBROADCASTD AX, Z15           // quiet bit
	MOVL limit+24(FP), AX
	VPBROADCASTD AX, Z16           // limit
floop:
	VMOVDQU32 (SI), Z0             // u
	VPANDD    Z9, Z0, Z1           // a
	VPSUBD    Z7, Z1, Z17          // a-1
	VPCMPUD   $1, Z16, Z17, K2     // a-1 < limit: underflows
	KMOVW     K2, AX
	POPCNTL   AX, AX
	ADDQ      AX, R8
	VPANDD    Z14, Z0, Z2          // sign
	VPSRLD    $13, Z0, Z3
	VPANDD    Z7, Z3, Z3
	VPADDD    Z6, Z0, Z4
	VPADDD    Z3, Z4, Z4
	VPANDD    Z8, Z4, Z4           // normal result
	VPCMPUD   $1, Z10, Z1, K1      // a < 2^-14: subnormal
	VADDPS    Z13, Z1, Z5
	VSUBPS    Z13, Z5, Z5
	VPORD     Z2, Z5, Z5           // subnormal result
	VMOVDQA32 Z5, K1, Z4
	VPCMPUD   $6, Z11, Z1, K1      // a > 0x477fefff: ±Inf
	VPORD     Z12, Z2, Z5
	VMOVDQA32 Z5, K1, Z4
	VPCMPUD   $6, Z12, Z1, K1      // a > Inf: NaN
	VPORD     Z15, Z0, Z5          // NaN kept NaN
	VMOVDQA32 Z5, K1, Z4
	VMOVDQU32 Z4, (DI)
	ADDQ      $64, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       floop
	VZEROUPPER
fdone:
	MOVQ R8, ret+32(FP)
	RET

// func narrowBF16AVX2(dst []uint16, src []float32)
// len(src) is a multiple of 8 and len(dst) >= len(src): dst[i] = the bf16
// bits of src[i] rounded to nearest even, NaN kept a quiet NaN (as
// roundBF16ToAVX2 rounds, then the high halves packed).
TEXT ·narrowBF16AVX2(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $3, CX
	JZ   nbdone
	BF16_CONSTS_AVX2
nbloop:
	VMOVDQU (SI), Y0               // u
	BF16_ROUND_AVX2                // rounded in the high half
	VPSRLD  $16, Y2, Y2            // the bf16 bits, zero-extended
	VPACKUSDW Y2, Y2, Y2           // per 128-bit lane: its 4 words twice
	VPERMQ  $0x08, Y2, Y2          // lanes' first quadwords together
	VMOVDQU X2, (DI)
	ADDQ    $32, SI
	ADDQ    $16, DI
	DECQ    CX
	JNZ     nbloop
	VZEROUPPER
nbdone:
	RET

// func roundBF16ToAVX2(dst, src []float32)
// len(src) is a multiple of 8 and len(dst) >= len(src): dst[i] = src[i]
// rounded to bf16 (dst may be src). Per lane, with u the float's bits:
//   r = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000
//   NaN (u & 0x7fffffff > 0x7f800000): r = (u & 0xffff0000) | 0x00400000
TEXT ·roundBF16ToAVX2(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ src_base+24(FP), SI
	MOVQ src_len+32(FP), CX
	SHRQ $3, CX
	JZ   btdone
	BF16_CONSTS_AVX2
	MOVL $0xffff0000, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12          // high half mask
btloop:
	VMOVDQU (SI), Y0               // u
	BF16_ROUND_AVX2
	VPAND   Y12, Y2, Y2            // rounded; a NaN keeps its quiet bit
	VMOVDQU Y2, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     btloop
	VZEROUPPER
btdone:
	RET
