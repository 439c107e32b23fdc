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

// PAIRS16 rounds the 16 floats at SI to bf16 pairs: pairs 0-3 in X0,
// 4-7 in X1 (RNE8's constants in Y10..Y14, bf16PairShuf in Y15).
#define PAIRS16 \
	VMOVDQU (SI), Y0;         \
	VMOVDQU 32(SI), Y1;       \
	RNE8(Y0);                 \
	RNE8(Y1);                 \
	VPSHUFB Y15, Y0, Y0;      \
	VPSHUFB Y15, Y1, Y1;      \
	VPERMQ  $0x08, Y0, Y0;    \
	VPERMQ  $0x08, Y1, Y1

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
	CMPQ    DX, $4
	JEQ     contiguous

loop:
	PAIRS16
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

contiguous: // dstride 4: the 8 pairs are 32 contiguous bytes
	PAIRS16
	VMOVDQU X0, (DI)
	VMOVDQU X1, 16(DI)
	ADDQ    $32, DI
	ADDQ    $64, SI
	DECQ    CX
	JNZ     contiguous
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

// func interleaveBitsAVX2(dst *uint32, even, odd *uint16, n16 int)
//
// dst[l] = even[l] | odd[l]<<16 for l < 16·n16: the words of the two rows
// interleaved (VPUNPCKLWD and VPUNPCKHWD work within 128-bit lanes, so
// the halves are put back in order across them).
TEXT ·interleaveBitsAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ even+8(FP), SI
	MOVQ odd+16(FP), DX
	MOVQ n16+24(FP), CX

bloop:
	VMOVDQU    (SI), Y0
	VMOVDQU    (DX), Y1
	VPUNPCKLWD Y1, Y0, Y2       // lines 0-3 | 8-11
	VPUNPCKHWD Y1, Y0, Y3       // lines 4-7 | 12-15
	VPERM2I128 $0x20, Y3, Y2, Y4 // lines 0-7
	VPERM2I128 $0x31, Y3, Y2, Y5 // lines 8-15
	VMOVDQU    Y4, (DI)
	VMOVDQU    Y5, 32(DI)
	ADDQ       $32, SI
	ADDQ       $32, DX
	ADDQ       $64, DI
	DECQ       CX
	JNZ        bloop
	VZEROUPPER
	RET

// IL8(off) interleaves 8 lines at byte offset off of the even row SI and
// the odd row DX into DI: RNE8 on each, the odd one's bf16 in the high
// half. Clobbers Y0..Y4.
#define IL8(off) \
	VMOVDQU (SI)(off*1), Y0; \
	VMOVDQU (DX)(off*1), Y1; \
	RNE8(Y0);                \
	RNE8(Y1);                \
	VPSRLD  $16, Y0, Y0;     \
	VPAND   Y15, Y1, Y1;     \
	VPOR    Y1, Y0, Y0;      \
	VMOVDQU Y0, (DI)(off*1)

// func interleavePairsF32AVX2(dst *uint32, dstride int, src *float32, sstride, np, n8, tail int)
//
// For each of np pairs p: rows 2p and 2p+1 of src (row stride sstride
// bytes) interleaved as interleaveF32AVX2 does into dst + p·dstride bytes,
// over 8·n8 lines and, where tail ≥ 0, again over the 8 lines at byte
// offset tail (an overlapped tail: the same values written twice).
TEXT ·interleavePairsF32AVX2(SB), NOSPLIT, $0-56
	MOVQ dst+0(FP), DI
	MOVQ dstride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ sstride+24(FP), R9
	MOVQ np+32(FP), R10
	MOVQ n8+40(FP), R11
	MOVQ tail+48(FP), R12
	RNECONSTS
	VPBROADCASTD bf16RNEConsts<>+20(SB), Y15

ppair:
	LEAQ (SI)(R9*1), DX
	MOVQ R11, CX
	XORQ AX, AX

pgroup:
	IL8(AX)
	ADDQ $32, AX
	DECQ CX
	JNZ  pgroup
	TESTQ R12, R12
	JS    pnext
	IL8(R12)

pnext:
	ADDQ R8, DI
	LEAQ (SI)(R9*2), SI
	DECQ R10
	JNZ  ppair
	VZEROUPPER
	RET

// TRANSPOSE8 transposes the 8×8 dwords in Y0..Y7 (row i in Yi) into
// Y8..Y15 (column i in Y8+i). Clobbers Y0..Y7.
#define TRANSPOSE8 \
	VUNPCKLPS  Y1, Y0, Y8;         \
	VUNPCKHPS  Y1, Y0, Y9;         \
	VUNPCKLPS  Y3, Y2, Y10;        \
	VUNPCKHPS  Y3, Y2, Y11;        \
	VUNPCKLPS  Y5, Y4, Y12;        \
	VUNPCKHPS  Y5, Y4, Y13;        \
	VUNPCKLPS  Y7, Y6, Y14;        \
	VUNPCKHPS  Y7, Y6, Y15;        \
	VSHUFPS    $0x44, Y10, Y8, Y0; \
	VSHUFPS    $0xEE, Y10, Y8, Y1; \
	VSHUFPS    $0x44, Y11, Y9, Y2; \
	VSHUFPS    $0xEE, Y11, Y9, Y3; \
	VSHUFPS    $0x44, Y14, Y12, Y4; \
	VSHUFPS    $0xEE, Y14, Y12, Y5; \
	VSHUFPS    $0x44, Y15, Y13, Y6; \
	VSHUFPS    $0xEE, Y15, Y13, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8;  \
	VPERM2F128 $0x20, Y5, Y1, Y9;  \
	VPERM2F128 $0x20, Y6, Y2, Y10; \
	VPERM2F128 $0x20, Y7, Y3, Y11; \
	VPERM2F128 $0x31, Y4, Y0, Y12; \
	VPERM2F128 $0x31, Y5, Y1, Y13; \
	VPERM2F128 $0x31, Y6, Y2, Y14; \
	VPERM2F128 $0x31, Y7, Y3, Y15

// STORE8T stores TRANSPOSE8's columns Y8..Y15 as 8 rows of 8 dwords at DI,
// row stride R8 bytes. Clobbers AX.
#define STORE8T \
	MOVQ    DI, AX;       \
	VMOVDQU Y8, (AX);     \
	ADDQ    R8, AX;       \
	VMOVDQU Y9, (AX);     \
	ADDQ    R8, AX;       \
	VMOVDQU Y10, (AX);    \
	ADDQ    R8, AX;       \
	VMOVDQU Y11, (AX);    \
	ADDQ    R8, AX;       \
	VMOVDQU Y12, (AX);    \
	ADDQ    R8, AX;       \
	VMOVDQU Y13, (AX);    \
	ADDQ    R8, AX;       \
	VMOVDQU Y14, (AX);    \
	ADDQ    R8, AX;       \
	VMOVDQU Y15, (AX)

// func transposePairsF32AVX2(dst *uint32, dstride int, src *float32, sstride, np8, lines8 int)
//
// Packs lines [0, 8·lines8) over pairs [0, 8·np8) of an operand whose
// lines run across its rows (src row stride sstride bytes) line-major, as
// the AMX kernel reads a strip of op(A): dst + l·dstride bytes + 4p =
// bf16(src row 2p, line l) | bf16(src row 2p+1, line l)<<16, rounded as
// RNE8 does. Each block of 8 pairs × 8 lines is interleaved pair by pair
// into the frame, then transposed in registers.
TEXT ·transposePairsF32AVX2(SB), NOSPLIT, $256-48
	MOVQ dst+0(FP), DI
	MOVQ dstride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ sstride+24(FP), R9
	MOVQ lines8+40(FP), R11

tfline:
	MOVQ np8+32(FP), R10
	MOVQ SI, R12 // this block of lines, pair 0
	MOVQ DI, R13

tfblock:
	RNECONSTS
	VPBROADCASTD bf16RNEConsts<>+20(SB), Y15
	XORQ BX, BX

tfpair:
	MOVQ SI, CX
	LEAQ (SI)(R9*1), DX
	VMOVDQU (CX), Y0
	VMOVDQU (DX), Y1
	RNE8(Y0)
	RNE8(Y1)
	VPSRLD  $16, Y0, Y0
	VPAND   Y15, Y1, Y1
	VPOR    Y1, Y0, Y0
	VMOVDQU Y0, 0(SP)(BX*1)
	LEAQ    (SI)(R9*2), SI
	ADDQ    $32, BX
	CMPQ    BX, $256
	JNE     tfpair
	VMOVDQU 0(SP), Y0
	VMOVDQU 32(SP), Y1
	VMOVDQU 64(SP), Y2
	VMOVDQU 96(SP), Y3
	VMOVDQU 128(SP), Y4
	VMOVDQU 160(SP), Y5
	VMOVDQU 192(SP), Y6
	VMOVDQU 224(SP), Y7
	TRANSPOSE8
	STORE8T
	ADDQ $32, DI
	DECQ R10
	JNZ  tfblock
	// next 8 lines: 32 bytes on in src, 8 rows on in dst
	LEAQ 32(R12), SI
	MOVQ R8, AX
	SHLQ $3, AX
	LEAQ (R13)(AX*1), DI
	DECQ R11
	JNZ  tfline
	VZEROUPPER
	RET

// func transposePairsBitsAVX2(dst *uint32, dstride int, src *uint16, sstride, np8, lines8 int)
//
// transposePairsF32AVX2 for an operand already in bf16 bits.
TEXT ·transposePairsBitsAVX2(SB), NOSPLIT, $256-48
	MOVQ dst+0(FP), DI
	MOVQ dstride+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ sstride+24(FP), R9
	MOVQ lines8+40(FP), R11

tbline:
	MOVQ np8+32(FP), R10
	MOVQ SI, R12
	MOVQ DI, R13

tbblock:
	XORQ BX, BX

tbpair:
	LEAQ      (SI)(R9*1), DX
	VPMOVZXWD (SI), Y0
	VPMOVZXWD (DX), Y1
	VPSLLD    $16, Y1, Y1
	VPOR      Y1, Y0, Y0
	VMOVDQU   Y0, 0(SP)(BX*1)
	LEAQ      (SI)(R9*2), SI
	ADDQ      $32, BX
	CMPQ      BX, $256
	JNE       tbpair
	VMOVDQU 0(SP), Y0
	VMOVDQU 32(SP), Y1
	VMOVDQU 64(SP), Y2
	VMOVDQU 96(SP), Y3
	VMOVDQU 128(SP), Y4
	VMOVDQU 160(SP), Y5
	VMOVDQU 192(SP), Y6
	VMOVDQU 224(SP), Y7
	TRANSPOSE8
	STORE8T
	ADDQ $32, DI
	DECQ R10
	JNZ  tbblock
	LEAQ 16(R12), SI
	MOVQ R8, AX
	SHLQ $3, AX
	LEAQ (R13)(AX*1), DI
	DECQ R11
	JNZ  tbline
	VZEROUPPER
	RET
