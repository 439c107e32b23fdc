//go:build !purego

#include "textflag.h"

// The AVX-512 packing routines (AVX512F and AVX512BW): 16 floats a
// register, rounded to bf16 exactly as amp's bf16Bits rounds (nearest
// even on the 16 dropped bits, a NaN kept a quiet NaN). They compute in
// integers, so they need no AVX512_BF16 (whose conversion flushes
// denormals, which amp's rounding does not) and give the AVX2 routines'
// bits.

// RNE16's constants, one dword each, broadcast from memory.
DATA bf16RNE512<>+0(SB)/4, $1           // the tie bit: bit 16 of the float
DATA bf16RNE512<>+4(SB)/4, $0x7fff      // the rounding bias less the tie bit
DATA bf16RNE512<>+8(SB)/4, $0x7fffffff  // |x|
DATA bf16RNE512<>+12(SB)/4, $0x7f800000 // +Inf: |x| above it is a NaN
DATA bf16RNE512<>+16(SB)/4, $0x00400000 // the quiet bit of a NaN
GLOBL bf16RNE512<>(SB), RODATA|NOPTR, $20

// VPERMT2W's indices: the odd words (each float's bf16 half) of two
// registers of 16 floats, in order: 32 words, 16 bf16 pairs.
DATA bf16OddWords<>+0(SB)/8, $0x0007000500030001
DATA bf16OddWords<>+8(SB)/8, $0x000f000d000b0009
DATA bf16OddWords<>+16(SB)/8, $0x0017001500130011
DATA bf16OddWords<>+24(SB)/8, $0x001f001d001b0019
DATA bf16OddWords<>+32(SB)/8, $0x0027002500230021
DATA bf16OddWords<>+40(SB)/8, $0x002f002d002b0029
DATA bf16OddWords<>+48(SB)/8, $0x0037003500330031
DATA bf16OddWords<>+56(SB)/8, $0x003f003d003b0039
GLOBL bf16OddWords<>(SB), RODATA|NOPTR, $64

// RNECONSTS512 loads RNE16's constants into Z27..Z31.
#define RNECONSTS512 \
	VPBROADCASTD bf16RNE512<>+0(SB), Z31;  \
	VPBROADCASTD bf16RNE512<>+4(SB), Z30;  \
	VPBROADCASTD bf16RNE512<>+8(SB), Z29;  \
	VPBROADCASTD bf16RNE512<>+12(SB), Z28; \
	VPBROADCASTD bf16RNE512<>+16(SB), Z27

// RNE16 rounds the 16 floats in x to bf16 in place, each in its dword's
// high half (the low half is what the rounding left there): x + 0x7fff +
// bit 16 of x, and a NaN x | the quiet bit instead. Constants in Z27..Z31;
// clobbers Z18, Z19 and K1.
#define RNE16(x) \
	VPSRLD    $16, x, Z18;      \
	VPANDD    Z31, Z18, Z18;    \
	VPADDD    Z30, Z18, Z18;    \
	VPANDD    Z29, x, Z19;      \
	VPCMPUD   $6, Z28, Z19, K1; \
	VPORD     Z27, x, Z19;      \
	VPADDD    Z18, x, x;        \
	VMOVDQU32 Z19, K1, x

// ROWPAIRS(off, z) rounds the 32 floats at byte BX of the row whose
// pointer is at off(R8) into z as 16 bf16 pairs (the even float in each
// dword's low half). Clobbers Z17, Z18, Z19, K1 and R10; VPERMT2W's
// indices in Z26.
#define ROWPAIRS(off, z) \
	MOVQ      off(R8), R10;          \
	VMOVDQU32 (R10)(BX*1), z;        \
	VMOVDQU32 64(R10)(BX*1), Z17;    \
	RNE16(z);                        \
	RNE16(Z17);                      \
	VPERMT2W  Z17, Z26, z

// COLUMNS(c, s0, s1, s2, s3) finishes the 16×16 transpose for columns c,
// 4+c, 8+c and 12+c: Zc, Z4+c, Z8+c and Z12+c hold, in 128-bit lane L,
// rows 0-3, 4-7, 8-11 and 12-15 of column 4L+c; each column is stored,
// lanes K2, at its address s0..s3. Clobbers Z16..Z23.
#define COLUMNS(a, b, c, d, s0, s1, s2, s3) \
	VSHUFI32X4 $0x44, b, a, Z16;   \
	VSHUFI32X4 $0xEE, b, a, Z17;   \
	VSHUFI32X4 $0x44, d, c, Z18;   \
	VSHUFI32X4 $0xEE, d, c, Z19;   \
	VSHUFI32X4 $0x88, Z18, Z16, Z20; \
	VSHUFI32X4 $0xDD, Z18, Z16, Z21; \
	VSHUFI32X4 $0x88, Z19, Z17, Z22; \
	VSHUFI32X4 $0xDD, Z19, Z17, Z23; \
	VMOVDQU32  Z20, K2, s0;        \
	VMOVDQU32  Z21, K2, s1;        \
	VMOVDQU32  Z22, K2, s2;        \
	VMOVDQU32  Z23, K2, s3

// TRANSPOSE16 transposes the 16 rows of 16 dwords in Z0..Z15 (dword
// unpacks, then qword unpacks, then 128-bit lane shuffles) and stores
// column c at DI + c·dstride (R11: dstride, R12: 3·, R13: 5·, R14: 7·),
// lanes K2; DI then points 16 columns on. Clobbers Z16..Z31 and DX.
#define TRANSPOSE16 \
	VPUNPCKLDQ Z1, Z0, Z16; \
	VPUNPCKHDQ Z1, Z0, Z17; \
	VPUNPCKLDQ Z3, Z2, Z18; \
	VPUNPCKHDQ Z3, Z2, Z19; \
	VPUNPCKLDQ Z5, Z4, Z20; \
	VPUNPCKHDQ Z5, Z4, Z21; \
	VPUNPCKLDQ Z7, Z6, Z22; \
	VPUNPCKHDQ Z7, Z6, Z23; \
	VPUNPCKLDQ Z9, Z8, Z24; \
	VPUNPCKHDQ Z9, Z8, Z25; \
	VPUNPCKLDQ Z11, Z10, Z26; \
	VPUNPCKHDQ Z11, Z10, Z27; \
	VPUNPCKLDQ Z13, Z12, Z28; \
	VPUNPCKHDQ Z13, Z12, Z29; \
	VPUNPCKLDQ Z15, Z14, Z30; \
	VPUNPCKHDQ Z15, Z14, Z31; \
	VPUNPCKLQDQ Z18, Z16, Z0; \
	VPUNPCKHQDQ Z18, Z16, Z1; \
	VPUNPCKLQDQ Z19, Z17, Z2; \
	VPUNPCKHQDQ Z19, Z17, Z3; \
	VPUNPCKLQDQ Z22, Z20, Z4; \
	VPUNPCKHQDQ Z22, Z20, Z5; \
	VPUNPCKLQDQ Z23, Z21, Z6; \
	VPUNPCKHQDQ Z23, Z21, Z7; \
	VPUNPCKLQDQ Z26, Z24, Z8; \
	VPUNPCKHQDQ Z26, Z24, Z9; \
	VPUNPCKLQDQ Z27, Z25, Z10; \
	VPUNPCKHQDQ Z27, Z25, Z11; \
	VPUNPCKLQDQ Z30, Z28, Z12; \
	VPUNPCKHQDQ Z30, Z28, Z13; \
	VPUNPCKLQDQ Z31, Z29, Z14; \
	VPUNPCKHQDQ Z31, Z29, Z15; \
	LEAQ (DI)(R11*8), DX; \
	COLUMNS(Z0, Z4, Z8, Z12, (DI), (DI)(R11*4), (DX), (DX)(R11*4)); \
	COLUMNS(Z1, Z5, Z9, Z13, (DI)(R11*1), (DI)(R13*1), (DX)(R11*1), (DX)(R13*1)); \
	COLUMNS(Z2, Z6, Z10, Z14, (DI)(R11*2), (DI)(R12*2), (DX)(R11*2), (DX)(R12*2)); \
	COLUMNS(Z3, Z7, Z11, Z15, (DI)(R12*1), (DI)(R14*1), (DX)(R12*1), (DX)(R14*1)); \
	LEAQ (DX)(R11*8), DI

// ROWSARGS loads packRows*AVX512's arguments: dst in DI, dstride in R11
// (3·, 5·, 7· in R12, R13, R14), rows in R8, np16 in CX (the flags set
// by a test of it), mask in K2; BX, the byte offset in the rows, zero.
#define ROWSARGS \
	MOVQ  dst+0(FP), DI; \
	MOVQ  dstride+8(FP), R11; \
	MOVQ  rows+16(FP), R8; \
	MOVQ  np16+24(FP), CX; \
	KMOVW mask+32(FP), K2; \
	LEAQ  (R11)(R11*2), R12; \
	LEAQ  (R11)(R11*4), R13; \
	LEAQ  (R12)(R11*4), R14; \
	XORQ  BX, BX; \
	TESTQ CX, CX

// func packRowsF32AVX512(dst *uint32, dstride int, rows *[16]*float32, np16 int, mask uint16)
//
// For 16·np16 pairs p of 16 rows (row l's floats from rows[l]): pair p
// of row l, rounded, at dst + p·dstride + 4l bytes (dst[p·width+l] for a
// dstride of 4·width), the even float in the low half; rows whose bit is
// clear in mask are not stored. Each block of 16 pairs is 16 rows of 16
// pairs transposed in registers (dword unpacks, then qword unpacks, then
// 128-bit lane shuffles), so every store is one run of up to 16 dwords.
TEXT ·packRowsF32AVX512(SB), NOSPLIT, $0-34
	ROWSARGS
	JZ    rowsdone

rowsblock:
	RNECONSTS512
	VMOVDQU64 bf16OddWords<>(SB), Z26
	ROWPAIRS(0, Z0)
	ROWPAIRS(8, Z1)
	ROWPAIRS(16, Z2)
	ROWPAIRS(24, Z3)
	ROWPAIRS(32, Z4)
	ROWPAIRS(40, Z5)
	ROWPAIRS(48, Z6)
	ROWPAIRS(56, Z7)
	ROWPAIRS(64, Z8)
	ROWPAIRS(72, Z9)
	ROWPAIRS(80, Z10)
	ROWPAIRS(88, Z11)
	ROWPAIRS(96, Z12)
	ROWPAIRS(104, Z13)
	ROWPAIRS(112, Z14)
	ROWPAIRS(120, Z15)

	TRANSPOSE16
	ADDQ $128, BX
	DECQ CX
	JNZ  rowsblock

rowsdone:
	VZEROUPPER
	RET

// INTERLEAVE16 rounds Z0 (16 lines of the even row) and Z1 (of the odd
// row) and leaves in Z0 their pairs: bf16(even) | bf16(odd)<<16 (K3
// selects the odd words).
#define INTERLEAVE16 \
	RNE16(Z0);                 \
	RNE16(Z1);                 \
	VPSRLD    $16, Z0, Z0;     \
	VPBLENDMW Z1, Z0, K3, Z0

// func interleavePairsF32AVX512(dst *uint32, dstride int, src *float32, sstride, np, n16 int, tail uint16)
//
// For each of np pairs p: rows 2p and 2p+1 of src (row stride sstride
// bytes) interleaved into dst + p·dstride bytes, dword l =
// bf16(src[2p][l]) | bf16(src[2p+1][l])<<16, over 16·n16 lines and then
// over the lines of the next 16 whose bits are set in tail (masked loads
// and stores: nothing past them is read or written).
TEXT ·interleavePairsF32AVX512(SB), NOSPLIT, $0-50
	MOVQ  dst+0(FP), DI
	MOVQ  dstride+8(FP), R8
	MOVQ  src+16(FP), SI
	MOVQ  sstride+24(FP), R9
	MOVQ  np+32(FP), R10
	MOVQ  n16+40(FP), R11
	KMOVW tail+48(FP), K2
	MOVL  $0xaaaaaaaa, AX
	KMOVD AX, K3
	RNECONSTS512
	TESTQ R10, R10
	JZ    ildone

ilpair:
	LEAQ  (SI)(R9*1), DX
	XORQ  AX, AX
	MOVQ  R11, CX
	TESTQ CX, CX
	JZ    iltail

ilgroup:
	VMOVDQU32 (SI)(AX*1), Z0
	VMOVDQU32 (DX)(AX*1), Z1
	INTERLEAVE16
	VMOVDQU32 Z0, (DI)(AX*1)
	ADDQ      $64, AX
	DECQ      CX
	JNZ       ilgroup

iltail:
	KORTESTW K2, K2
	JZ       ilnext
	VMOVDQU32.Z (SI)(AX*1), K2, Z0
	VMOVDQU32.Z (DX)(AX*1), K2, Z1
	INTERLEAVE16
	VMOVDQU32   Z0, K2, (DI)(AX*1)

ilnext:
	ADDQ R8, DI
	LEAQ (SI)(R9*2), SI
	DECQ R10
	JNZ  ilpair

ildone:
	VZEROUPPER
	RET

// func packRowsBitsAVX512(dst *uint32, dstride int, rows *[16]*uint16, np16 int, mask uint16)
//
// packRowsF32AVX512 for rows of bf16 bits: pair p of row l is the dword
// at rows[l] + 4p bytes, stored as it is (no rounding).
TEXT ·packRowsBitsAVX512(SB), NOSPLIT, $0-34
	ROWSARGS
	JZ    bitsdone

bitsblock:
	MOVQ      0(R8), R10
	VMOVDQU32 (R10)(BX*1), Z0
	MOVQ      8(R8), R10
	VMOVDQU32 (R10)(BX*1), Z1
	MOVQ      16(R8), R10
	VMOVDQU32 (R10)(BX*1), Z2
	MOVQ      24(R8), R10
	VMOVDQU32 (R10)(BX*1), Z3
	MOVQ      32(R8), R10
	VMOVDQU32 (R10)(BX*1), Z4
	MOVQ      40(R8), R10
	VMOVDQU32 (R10)(BX*1), Z5
	MOVQ      48(R8), R10
	VMOVDQU32 (R10)(BX*1), Z6
	MOVQ      56(R8), R10
	VMOVDQU32 (R10)(BX*1), Z7
	MOVQ      64(R8), R10
	VMOVDQU32 (R10)(BX*1), Z8
	MOVQ      72(R8), R10
	VMOVDQU32 (R10)(BX*1), Z9
	MOVQ      80(R8), R10
	VMOVDQU32 (R10)(BX*1), Z10
	MOVQ      88(R8), R10
	VMOVDQU32 (R10)(BX*1), Z11
	MOVQ      96(R8), R10
	VMOVDQU32 (R10)(BX*1), Z12
	MOVQ      104(R8), R10
	VMOVDQU32 (R10)(BX*1), Z13
	MOVQ      112(R8), R10
	VMOVDQU32 (R10)(BX*1), Z14
	MOVQ      120(R8), R10
	VMOVDQU32 (R10)(BX*1), Z15
	TRANSPOSE16
	ADDQ $64, BX
	DECQ CX
	JNZ  bitsblock

bitsdone:
	VZEROUPPER
	RET
