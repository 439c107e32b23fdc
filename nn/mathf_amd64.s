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
	MOVL $127, R8
	VPBROADCASTD R8, Z29           // exponent bias, and the largest n
eloop:
	CMPQ AX, CX
	JGE  edone
	VMOVUPS (SI)(AX*4), Z0
	VSUBPS  Z31, Z0, Z1            // x = src - m
	VMULPS  Z16, Z1, Z2
	VADDPS  Z17, Z2, Z2            // x·log2e + 0.5
	VRNDSCALEPS $9, Z2, Z3         // n = floor
	VCVTTPS2DQ Z3, Z4              // ni
	VPCMPD  $1, Z27, Z4, K1        // ni < -126 (NaN, ±Inf give MinInt32)
	VPCMPD  $6, Z29, Z4, K2        // ni > 127
	KORTESTW K1, K2
	JNZ     edone
	VMULPS  Z18, Z3, Z5
	VSUBPS  Z5, Z1, Z6
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
	VMULPS  Z8, Z7, Z7             // y·2^n
	VMOVUPS Z7, (DI)(AX*4)
	ADDQ    $16, AX
	JMP     eloop
edone:
	MOVQ AX, ret+40(FP)
	VZEROUPPER
	RET
