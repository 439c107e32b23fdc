//go:build !purego

#include "textflag.h"

// VPSHUFB pattern: bytes 2,3 of each dword (its bf16 half) of a 128-bit
// lane, packed into the lane's low 8 bytes.
DATA bf16PairShuf<>+0(SB)/8, $0x0f0e0b0a07060302
DATA bf16PairShuf<>+8(SB)/8, $0x8080808080808080
DATA bf16PairShuf<>+16(SB)/8, $0x0f0e0b0a07060302
DATA bf16PairShuf<>+24(SB)/8, $0x8080808080808080
GLOBL bf16PairShuf<>(SB), RODATA|NOPTR, $32

// RNE8 rounds the 8 floats in Y0 to bf16 in place, each in its dword's
// high half (the low half is left as the rounding left it): amp's
// bf16Bits on every lane, a NaN kept a quiet NaN. Clobbers Y2..Y4.
#define RNE8(y) \
	VPSRLD    $16, y, Y2;     \
	VPAND     Y11, Y2, Y2;    \
	VPADDD    Y10, Y2, Y2;    \
	VPADDD    y, Y2, Y2;      \
	VPAND     Y12, y, Y3;     \
	VPCMPGTD  Y13, Y3, Y3;    \
	VPOR      Y14, y, Y4;     \
	VPBLENDVB Y3, Y4, Y2, y

// RNE8's constants, one dword each, broadcast from memory: moving them
// in through a general register (MOVD, then VPBROADCASTD from an X
// register) cost a microsecond a call on a Zen 3 host, more than the
// conversion of a whole strip.
DATA bf16RNEConsts<>+0(SB)/4, $0x7fff      // the rounding bias less the tie bit
DATA bf16RNEConsts<>+4(SB)/4, $1           // the tie bit: bit 16 of the float
DATA bf16RNEConsts<>+8(SB)/4, $0x7fffffff  // |x|
DATA bf16RNEConsts<>+12(SB)/4, $0x7f800000 // +Inf: |x| above it is a NaN
DATA bf16RNEConsts<>+16(SB)/4, $0x00400000 // the quiet bit of a NaN
DATA bf16RNEConsts<>+20(SB)/4, $0xffff0000 // a dword's high half
GLOBL bf16RNEConsts<>(SB), RODATA|NOPTR, $24

// RNECONSTS loads RNE8's constants into Y10..Y14.
#define RNECONSTS \
	VPBROADCASTD bf16RNEConsts<>+0(SB), Y10;  \
	VPBROADCASTD bf16RNEConsts<>+4(SB), Y11;  \
	VPBROADCASTD bf16RNEConsts<>+8(SB), Y12;  \
	VPBROADCASTD bf16RNEConsts<>+12(SB), Y13; \
	VPBROADCASTD bf16RNEConsts<>+16(SB), Y14

// func packPairsF32AVX2(dst *uint32, dstride int, src *float32, n8 int)
//
// Rounds 16·n8 floats at src to bf16 (nearest even) and stores them as
// 8·n8 pairs: pair p (src[2p] in the low half, src[2p+1] in the high) at
// dst + p·dstride bytes.
TEXT ·packPairsF32AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ dstride+8(FP), DX
	MOVQ src+16(FP), SI
	MOVQ n8+24(FP), CX
	LEAQ (DX)(DX*2), R8
	LEAQ (DX*4), R9
	RNECONSTS
	VMOVDQU bf16PairShuf<>(SB), Y15

loop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	RNE8(Y0)
	RNE8(Y1)
	VPSHUFB Y15, Y0, Y0
	VPSHUFB Y15, Y1, Y1
	VPERMQ  $0x08, Y0, Y0
	VPERMQ  $0x08, Y1, Y1
	VMOVD   X0, (DI)
	VPEXTRD $1, X0, (DI)(DX*1)
	VPEXTRD $2, X0, (DI)(DX*2)
	VPEXTRD $3, X0, (DI)(R8*1)
	ADDQ    R9, DI
	VMOVD   X1, (DI)
	VPEXTRD $1, X1, (DI)(DX*1)
	VPEXTRD $2, X1, (DI)(DX*2)
	VPEXTRD $3, X1, (DI)(R8*1)
	ADDQ    R9, DI
	ADDQ    $64, SI
	DECQ    CX
	JNZ     loop
	VZEROUPPER
	RET

// func interleaveF32AVX2(dst *uint32, even, odd *float32, n8 int)
//
// dst[l] = bf16(even[l]) | bf16(odd[l])<<16 for l < 8·n8, each rounded to
// nearest even as RNE8 does.
TEXT ·interleaveF32AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ even+8(FP), SI
	MOVQ odd+16(FP), DX
	MOVQ n8+24(FP), CX
	RNECONSTS
	VPBROADCASTD bf16RNEConsts<>+20(SB), Y15

iloop:
	VMOVDQU (SI), Y0
	VMOVDQU (DX), Y1
	RNE8(Y0)
	RNE8(Y1)
	VPSRLD  $16, Y0, Y0
	VPAND   Y15, Y1, Y1
	VPOR    Y1, Y0, Y0
	VMOVDQU Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     iloop
	VZEROUPPER
	RET
