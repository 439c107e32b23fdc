//go:build amd64 && !purego

#include "textflag.h"

// func sigmoidAVX512(dst, src *float32, n int, c *[12]float32) int
// n is a multiple of 16. dst[i] = sigmoid(src[i]) exactly as the scalar
// sigmoid[float32] computes it, sixteen at a time, with e = expf(-|x|):
// 1/(1+e) where x >= 0, e/(1+e) elsewhere; expf's steps are the same
// float32 operations in the same order (Go does not fuse them into FMAs
// on amd64 below v3, and neither does this). A block of sixteen where
// some lane's expf leaves the normal range (2^n below 2^-126, NaN) is
// not done: the function returns how many values it did, a multiple of
// 16, and the caller does that block in Go.
// c: log2e, 0.5, ln2hi, ln2lo, p0..p5, 1.0, -126 (as an int32).
TEXT ·sigmoidAVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c+24(FP), DX
	XORQ AX, AX
	VBROADCASTSS 0(DX), Z16        // log2e
	VBROADCASTSS 4(DX), Z17        // 0.5
	VBROADCASTSS 8(DX), Z18        // ln2hi
	VBROADCASTSS 12(DX), Z19       // ln2lo
	VBROADCASTSS 16(DX), Z20       // p0
	VBROADCASTSS 20(DX), Z21       // p1
	VBROADCASTSS 24(DX), Z22       // p2
	VBROADCASTSS 28(DX), Z23       // p3
	VBROADCASTSS 32(DX), Z24       // p4
	VBROADCASTSS 36(DX), Z25       // p5
	VBROADCASTSS 40(DX), Z26       // 1
	VPBROADCASTD 44(DX), Z27       // -126
	MOVL $0x80000000, R8
	VPBROADCASTD R8, Z28           // sign bit
	MOVL $127, R8
	VPBROADCASTD R8, Z29           // exponent bias
	VPXORD Z30, Z30, Z30           // zero
sloop:
	CMPQ AX, CX
	JGE  sdone
	VMOVUPS (SI)(AX*4), Z0         // x
	VPORD   Z28, Z0, Z1            // v = -|x|
	VMULPS  Z16, Z1, Z2
	VADDPS  Z17, Z2, Z2            // v·log2e + 0.5
	VRNDSCALEPS $9, Z2, Z3         // n = floor
	VCVTTPS2DQ Z3, Z4              // ni
	VPCMPD  $1, Z27, Z4, K1        // ni < -126 (NaN gives MinInt32)
	KORTESTW K1, K1
	JNZ     sdone
	VMULPS  Z18, Z3, Z5
	VSUBPS  Z5, Z1, Z6             // v - n·ln2hi
	VMULPS  Z19, Z3, Z5
	VSUBPS  Z5, Z6, Z6             // r
	VMULPS  Z6, Z20, Z7
	VADDPS  Z21, Z7, Z7
	VMULPS  Z6, Z7, Z7
	VADDPS  Z22, Z7, Z7
	VMULPS  Z6, Z7, Z7
	VADDPS  Z23, Z7, Z7
	VMULPS  Z6, Z7, Z7
	VADDPS  Z24, Z7, Z7
	VMULPS  Z6, Z7, Z7
	VADDPS  Z25, Z7, Z7            // p
	VMULPS  Z6, Z7, Z7
	VMULPS  Z6, Z7, Z7
	VADDPS  Z6, Z7, Z7
	VADDPS  Z26, Z7, Z7            // y = p·r·r + r + 1
	VPADDD  Z29, Z4, Z8
	VPSLLD  $23, Z8, Z8
	VMULPS  Z8, Z7, Z7             // e = y·2^n
	VADDPS  Z26, Z7, Z9            // 1 + e
	VCMPPS  $0x1d, Z30, Z0, K2     // x >= 0 (ordered)
	VMOVAPS Z7, Z10
	VMOVAPS Z26, K2, Z10           // 1 where x >= 0, e elsewhere
	VDIVPS  Z9, Z10, Z11
	VMOVUPS Z11, (DI)(AX*4)
	ADDQ    $16, AX
	JMP     sloop
sdone:
	MOVQ AX, ret+32(FP)
	VZEROUPPER
	RET

// EXPF_CONSTS_AVX512 broadcasts expf's constants from c (DX) into Z16..Z27
// and 127 into Z29 (clobbering R8), as expfSubAVX512 and expfSubSumAVX512
// read them: log2e, 0.5, ln2hi, ln2lo, p0..p5, 1, -126 (an int32), and the
// exponent bias, which is also the largest n.
#define EXPF_CONSTS_AVX512 \
	VBROADCASTSS 0(DX), Z16; \
	VBROADCASTSS 4(DX), Z17; \
	VBROADCASTSS 8(DX), Z18; \
	VBROADCASTSS 12(DX), Z19; \
	VBROADCASTSS 16(DX), Z20; \
	VBROADCASTSS 20(DX), Z21; \
	VBROADCASTSS 24(DX), Z22; \
	VBROADCASTSS 28(DX), Z23; \
	VBROADCASTSS 32(DX), Z24; \
	VBROADCASTSS 36(DX), Z25; \
	VBROADCASTSS 40(DX), Z26; \
	VPBROADCASTD 44(DX), Z27; \
	MOVL $127, R8; \
	VPBROADCASTD R8, Z29

// EXPF_SUB_AVX512: Z7 = expf(Z0 - m) for m in Z31, expf's constants in
// Z16..Z27 and Z29 (see expfSubAVX512), with K1 and K2 the lanes below
// and above expf's main path; clobbers Z1..Z8.
#define EXPF_SUB_AVX512 \
	VSUBPS  Z31, Z0, Z1; \
	VMULPS  Z16, Z1, Z2; \
	VADDPS  Z17, Z2, Z2; \
	VRNDSCALEPS $9, Z2, Z3; \
	VCVTTPS2DQ Z3, Z4; \
	VPCMPD  $1, Z27, Z4, K1; \
	VPCMPD  $6, Z29, Z4, K2; \
	VMULPS  Z18, Z3, Z5; \
	VSUBPS  Z5, Z1, Z6; \
	VMULPS  Z19, Z3, Z5; \
	VSUBPS  Z5, Z6, Z6; \
	VMULPS  Z6, Z20, Z7; \
	VADDPS  Z21, Z7, Z7; \
	VMULPS  Z6, Z7, Z7; \
	VADDPS  Z22, Z7, Z7; \
	VMULPS  Z6, Z7, Z7; \
	VADDPS  Z23, Z7, Z7; \
	VMULPS  Z6, Z7, Z7; \
	VADDPS  Z24, Z7, Z7; \
	VMULPS  Z6, Z7, Z7; \
	VADDPS  Z25, Z7, Z7; \
	VMULPS  Z6, Z7, Z7; \
	VMULPS  Z6, Z7, Z7; \
	VADDPS  Z6, Z7, Z7; \
	VADDPS  Z26, Z7, Z7; \
	VPADDD  Z29, Z4, Z8; \
	VPSLLD  $23, Z8, Z8; \
	VMULPS  Z8, Z7, Z7

// func expfSubAVX512(dst, src *float32, n int, m float32, c *[12]float32) int
// n is a multiple of 16. dst[i] = expf(src[i] - m), bit for bit the
// scalar expf (see sigmoidAVX512), sixteen at a time; it stops before a
// block of sixteen where some lane leaves expf's main path (2^n outside
// [2^-126, 2^127], NaN, infinities) and returns how many values it did.
TEXT ·expfSubAVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Z31
	MOVQ c+32(FP), DX
	XORQ AX, AX
	EXPF_CONSTS_AVX512
eloop:
	CMPQ AX, CX
	JGE  edone
	VMOVUPS (SI)(AX*4), Z0
	EXPF_SUB_AVX512                // Z7 = expf(x - m); K1, K2: off the main path
	KORTESTW K1, K2
	JNZ     edone
	VMOVUPS Z7, (DI)(AX*4)
	ADDQ    $16, AX
	JMP     eloop
edone:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET

// The AVX2 versions below run eight values at a time with the same
// float32 operations in the same order as sigmoidAVX512 and
// expfSubAVX512 (no FMAs), so they give the scalar code's bits too. AVX2
// has 16 vector registers, so expf's constants are read from c8, each
// broadcast to 8 lanes (32 bytes): log2e, 0.5, ln2hi, ln2lo, p0..p5, 1,
// -126 (int32), sign bit, 127 (int32), at offsets 0, 32, ..., 416.

// EXPF_POLY_AVX2: Y7 = y = p·r·r + r + 1, expf's polynomial, for x in
// Y1 and n = floor(x·log2e + 0.5) in Y3, with r = x − n·ln2hi − n·ln2lo;
// constants at DX (c8), 1 in Y14; clobbers Y5 and Y6 (Y6 = r).
#define EXPF_POLY_AVX2 \
	VMULPS  64(DX), Y3, Y5; \
	VSUBPS  Y5, Y1, Y6; \
	VMULPS  96(DX), Y3, Y5; \
	VSUBPS  Y5, Y6, Y6; \
	VMULPS  128(DX), Y6, Y7; \
	VADDPS  160(DX), Y7, Y7; \
	VMULPS  Y6, Y7, Y7; \
	VADDPS  192(DX), Y7, Y7; \
	VMULPS  Y6, Y7, Y7; \
	VADDPS  224(DX), Y7, Y7; \
	VMULPS  Y6, Y7, Y7; \
	VADDPS  256(DX), Y7, Y7; \
	VMULPS  Y6, Y7, Y7; \
	VADDPS  288(DX), Y7, Y7; \
	VMULPS  Y6, Y7, Y7; \
	VMULPS  Y6, Y7, Y7; \
	VADDPS  Y6, Y7, Y7; \
	VADDPS  Y14, Y7, Y7

// func sigmoidAVX2(dst, src *float32, n int, c8 *[14][8]float32) int
// n is a multiple of 8; returns how many it did, a multiple of 8,
// stopping before a block of eight that needs expf's rare paths.
TEXT ·sigmoidAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ c8+24(FP), DX
	XORQ AX, AX
	VMOVUPS 320(DX), Y14           // 1
	VPXOR   Y15, Y15, Y15          // zero
	VMOVUPS 352(DX), Y13           // -126
s2loop:
	CMPQ AX, CX
	JGE  s2done
	VMOVUPS (SI)(AX*4), Y0         // x
	VPOR    384(DX), Y0, Y1        // v = -|x|
	VMULPS  0(DX), Y1, Y2
	VADDPS  32(DX), Y2, Y2         // v·log2e + 0.5
	VROUNDPS $9, Y2, Y3            // n = floor
	VCVTTPS2DQ Y3, Y4              // ni
	VPCMPGTD Y4, Y13, Y5           // -126 > ni (NaN gives MinInt32)
	VPTEST  Y5, Y5
	JNZ     s2done
	EXPF_POLY_AVX2                 // y = p·r·r + r + 1
	VPADDD  416(DX), Y4, Y8
	VPSLLD  $23, Y8, Y8
	VMULPS  Y8, Y7, Y7             // e = y·2^n
	VADDPS  Y14, Y7, Y9            // 1 + e
	VCMPPS  $0x1d, Y15, Y0, Y10    // x >= 0 (ordered)
	VBLENDVPS Y10, Y14, Y7, Y11    // 1 where x >= 0, e elsewhere
	VDIVPS  Y9, Y11, Y12
	VMOVUPS Y12, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     s2loop
s2done:
	MOVQ AX, ret+32(FP)
	VZEROUPPER
	RET

// func expfSubAVX2(dst, src *float32, n int, m float32, c8 *[14][8]float32) int
// n is a multiple of 8: dst[i] = expf(src[i] - m), bit for bit the scalar
// expf, eight at a time, stopping before a block of eight where some lane
// leaves expf's main path (2^n outside [2^-126, 2^127], NaN, infinities);
// returns how many values it did.
TEXT ·expfSubAVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Y15
	MOVQ c8+32(FP), DX
	XORQ AX, AX
	VMOVUPS 320(DX), Y14           // 1
	VMOVUPS 416(DX), Y13           // 127: the exponent bias and the largest n
	VMOVUPS 352(DX), Y12           // -126
e2loop:
	CMPQ AX, CX
	JGE  e2done
	VMOVUPS (SI)(AX*4), Y0
	VSUBPS  Y15, Y0, Y1            // x = src - m
	VMULPS  0(DX), Y1, Y2
	VADDPS  32(DX), Y2, Y2         // x·log2e + 0.5
	VROUNDPS $9, Y2, Y3            // n = floor
	VCVTTPS2DQ Y3, Y4              // ni
	VPCMPGTD Y4, Y12, Y5           // -126 > ni (NaN, ±Inf give MinInt32)
	VPCMPGTD Y13, Y4, Y6           // ni > 127
	VPOR    Y6, Y5, Y5
	VPTEST  Y5, Y5
	JNZ     e2done
	EXPF_POLY_AVX2                 // y = p·r·r + r + 1
	VPADDD  Y13, Y4, Y8
	VPSLLD  $23, Y8, Y8
	VMULPS  Y8, Y7, Y7             // y·2^n
	VMOVUPS Y7, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     e2loop
e2done:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET

// FOLD16_Z30: X0 = the sixteen partial sums in Z30 folded as fold16
// folds them (each add with the lower half's sum as its first operand, as
// Go's s[k] += s[k+w]); clobbers Z0, Z1.
#define FOLD16_Z30 \
	VEXTRACTF32X8 $1, Z30, Y1; \
	VADDPS  Y1, Y30, Y0; \
	VEXTRACTF128 $1, Y0, X1; \
	VADDPS  X1, X0, X0; \
	VMOVHLPS X0, X0, X1; \
	VADDPS  X1, X0, X0; \
	VMOVSHDUP X0, X1; \
	VADDSS  X1, X0, X0

// func expfSubSumAVX512(dst, src *float32, n int, m float32, c *[12]float32, acc *[16]float32) (done int, sum float32)
// dst[i] = expf(src[i] - m) as expfSubAVX512 computes it, and each value
// added to lane i mod 16 of the sixteen partial sums in acc (read at the
// start), in order. n may be any count: a last block of fewer than
// sixteen runs masked. It stops before a block where some lane it
// computes leaves expf's main path and returns how many values it did: n,
// with the partial sums folded (fold16) into sum, or a multiple of 16
// before that block, with the partial sums written back to acc.
TEXT ·expfSubSumAVX512(SB), NOSPLIT, $0-60
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS m+24(FP), Z31
	MOVQ c+32(FP), DX
	MOVQ acc+40(FP), R9
	VMOVUPS (R9), Z30              // the partial sums
	XORQ AX, AX
	EXPF_CONSTS_AVX512
	MOVQ CX, R10
	ANDQ $-16, R10                 // the end of the whole blocks
	MOVL $0xffff, R8
	KMOVW R8, K3                   // every lane
xloop:
	CMPQ AX, R10
	JGE  xtail
	VMOVUPS (SI)(AX*4), Z0
	EXPF_SUB_AVX512
	KORTESTW K1, K2
	JNZ     xdone
	VMOVUPS Z7, (DI)(AX*4)
	VADDPS  Z7, Z30, Z30
	ADDQ    $16, AX
	JMP     xloop
xtail:
	MOVQ CX, R11
	SUBQ AX, R11                   // 0..15 values left
	JZ   xdone
	MOVQ R11, CX
	MOVL $1, R8
	SHLL CX, R8
	DECL R8
	KMOVW R8, K3                   // their lanes
	VMOVUPS.Z (SI)(AX*4), K3, Z0
	EXPF_SUB_AVX512
	KANDW   K3, K1, K1
	KANDW   K3, K2, K2
	KORTESTW K1, K2
	JNZ     xdone
	VMOVUPS Z7, K3, (DI)(AX*4)
	VADDPS  Z7, Z30, K3, Z30
	ADDQ    R11, AX
xdone:
	MOVQ AX, done+48(FP)
	CMPQ AX, n+16(FP)
	JNE  xpartial
	FOLD16_Z30
	MOVSS X0, sum+56(FP)
	VZEROUPPER
	RET
xpartial:
	VMOVUPS Z30, (R9)
	VZEROUPPER
	RET

// func dotAVX512(a, b *float32, n int) float32
// Σ a[i]·b[i], each product rounded to float32 before the sum (no FMA),
// in dot16's order: product i into lane i mod 16 of sixteen partial sums,
// in order (a last block of fewer than sixteen masked), then fold16.
TEXT ·dotAVX512(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VPXORD Z30, Z30, Z30
	XORQ AX, AX
	MOVQ CX, R10
	ANDQ $-16, R10
dloop:
	CMPQ AX, R10
	JGE  dtail
	VMOVUPS (SI)(AX*4), Z0
	VMULPS  (DI)(AX*4), Z0, Z0
	VADDPS  Z0, Z30, Z30
	ADDQ    $16, AX
	JMP     dloop
dtail:
	SUBQ AX, CX                    // 0..15 values left
	JZ   ddone
	MOVL $1, R8
	SHLL CX, R8
	DECL R8
	KMOVW R8, K3
	VMOVUPS.Z (SI)(AX*4), K3, Z0
	VMOVUPS.Z (DI)(AX*4), K3, Z1
	VMULPS  Z1, Z0, Z0
	VADDPS  Z0, Z30, K3, Z30
ddone:
	FOLD16_Z30
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func sumSqF64AVX512(x *float32, n16 int, acc *[16]float64)
// acc[l] = Σ float64(x[16b+l])² over the blocks b < n16 in order, from
// zero: the sixteen float64 partial sums of meanSquare's order, two
// registers of eight. A float32's square is exact in float64, so the
// fused multiply-add rounds once, as the sum of the square does.
TEXT ·sumSqF64AVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n16+8(FP), CX
	MOVQ acc+16(FP), DI
	VXORPD Z0, Z0, Z0
	VXORPD Z1, Z1, Z1
sqloop:
	TESTQ CX, CX
	JZ    sqdone
	VCVTPS2PD   (SI), Z2
	VCVTPS2PD   32(SI), Z3
	VFMADD231PD Z2, Z2, Z0
	VFMADD231PD Z3, Z3, Z1
	ADDQ        $64, SI
	DECQ        CX
	JMP         sqloop
sqdone:
	VMOVUPD Z0, (DI)
	VMOVUPD Z1, 64(DI)
	VZEROUPPER
	RET

// func rmsDotF64AVX512(gr, w, x *float32, n16 int, acc *[16]float64)
// acc[l] = Σ float64(gr[j]·w[j])·float64(x[j]) over j = 16b+l, blocks b <
// n16 in order, from zero, gr·w rounded to float32 first (rmsDot's order).
// The product of two float32 values is exact in float64, so the fused
// multiply-add rounds once, as the sum of the product does.
TEXT ·rmsDotF64AVX512(SB), NOSPLIT, $0-40
	MOVQ gr+0(FP), AX
	MOVQ w+8(FP), BX
	MOVQ x+16(FP), SI
	MOVQ n16+24(FP), CX
	MOVQ acc+32(FP), DI
	VXORPD Z0, Z0, Z0
	VXORPD Z1, Z1, Z1
rdloop:
	TESTQ CX, CX
	JZ    rddone
	VMOVUPS       (AX), Z4
	VMULPS        (BX), Z4, Z4     // g·w in float32
	VCVTPS2PD     Y4, Z5
	VEXTRACTF64X4 $1, Z4, Y6
	VCVTPS2PD     Y6, Z6
	VCVTPS2PD     (SI), Z7
	VCVTPS2PD     32(SI), Z8
	VFMADD231PD   Z7, Z5, Z0
	VFMADD231PD   Z8, Z6, Z1
	ADDQ          $64, AX
	ADDQ          $64, BX
	ADDQ          $64, SI
	DECQ          CX
	JMP           rdloop
rddone:
	VMOVUPD Z0, (DI)
	VMOVUPD Z1, 64(DI)
	VZEROUPPER
	RET

// func sum8F64AVX512(x *float32, n8 int, acc *[8]float64)
// acc[l] = Σ float64(x[8b+l]) over the blocks b < n8 in order, from zero:
// sum8's eight float64 partial sums, one register, each lane's additions
// in its own order (a float32 is exact in float64).
TEXT ·sum8F64AVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n8+8(FP), CX
	MOVQ acc+16(FP), DI
	VXORPD Z0, Z0, Z0
s8loop:
	TESTQ CX, CX
	JZ    s8done
	VCVTPS2PD (SI), Z1
	VADDPD    Z1, Z0, Z0
	ADDQ      $32, SI
	DECQ      CX
	JMP       s8loop
s8done:
	VMOVUPD Z0, (DI)
	VZEROUPPER
	RET
