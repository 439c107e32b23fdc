//go:build !purego

#include "textflag.h"

// One k step: a 1×16 row of packed B (Y12, Y13) times six broadcast
// elements of packed A, accumulated into Y0..Y11 (row r in Y(2r), Y(2r+1)).
#define KSTEP(ao, bo) \
	VMOVUPS      (bo)(BX), Y12;      \
	VMOVUPS      (bo+32)(BX), Y13;   \
	VBROADCASTSS (ao)(AX), Y14;      \
	VFMADD231PS  Y12, Y14, Y0;       \
	VFMADD231PS  Y13, Y14, Y1;       \
	VBROADCASTSS (ao+4)(AX), Y15;    \
	VFMADD231PS  Y12, Y15, Y2;       \
	VFMADD231PS  Y13, Y15, Y3;       \
	VBROADCASTSS (ao+8)(AX), Y14;    \
	VFMADD231PS  Y12, Y14, Y4;       \
	VFMADD231PS  Y13, Y14, Y5;       \
	VBROADCASTSS (ao+12)(AX), Y15;   \
	VFMADD231PS  Y12, Y15, Y6;       \
	VFMADD231PS  Y13, Y15, Y7;       \
	VBROADCASTSS (ao+16)(AX), Y14;   \
	VFMADD231PS  Y12, Y14, Y8;       \
	VFMADD231PS  Y13, Y14, Y9;       \
	VBROADCASTSS (ao+20)(AX), Y15;   \
	VFMADD231PS  Y12, Y15, Y10;      \
	VFMADD231PS  Y13, Y15, Y11

// C row = alpha·acc (already in lo, hi) + beta (Y15) · C row, then next row.
#define ROWLOAD(lo, hi) \
	VMULPS  (DI), Y15, Y12;   \
	VMULPS  32(DI), Y15, Y13; \
	VADDPS  Y12, lo, lo;      \
	VADDPS  Y13, hi, hi;      \
	VMOVUPS lo, (DI);         \
	VMOVUPS hi, 32(DI);       \
	ADDQ    SI, DI

#define ROWSTORE(lo, hi) \
	VMOVUPS lo, (DI);   \
	VMOVUPS hi, 32(DI); \
	ADDQ    SI, DI

// The twelve accumulators of a 6×16 tile: cleared; scaled by Y14;
// written back over C (ROWLOAD, beta in Y15) or onto it (ROWSTORE).
#define ZERO_ACC \
	VXORPS Y0, Y0, Y0; \
	VXORPS Y1, Y1, Y1; \
	VXORPS Y2, Y2, Y2; \
	VXORPS Y3, Y3, Y3; \
	VXORPS Y4, Y4, Y4; \
	VXORPS Y5, Y5, Y5; \
	VXORPS Y6, Y6, Y6; \
	VXORPS Y7, Y7, Y7; \
	VXORPS Y8, Y8, Y8; \
	VXORPS Y9, Y9, Y9; \
	VXORPS Y10, Y10, Y10; \
	VXORPS Y11, Y11, Y11

#define SCALE_ACC \
	VMULPS Y14, Y0, Y0; \
	VMULPS Y14, Y1, Y1; \
	VMULPS Y14, Y2, Y2; \
	VMULPS Y14, Y3, Y3; \
	VMULPS Y14, Y4, Y4; \
	VMULPS Y14, Y5, Y5; \
	VMULPS Y14, Y6, Y6; \
	VMULPS Y14, Y7, Y7; \
	VMULPS Y14, Y8, Y8; \
	VMULPS Y14, Y9, Y9; \
	VMULPS Y14, Y10, Y10; \
	VMULPS Y14, Y11, Y11

#define ROWLOAD_ACC \
	ROWLOAD(Y0, Y1); \
	ROWLOAD(Y2, Y3); \
	ROWLOAD(Y4, Y5); \
	ROWLOAD(Y6, Y7); \
	ROWLOAD(Y8, Y9); \
	ROWLOAD(Y10, Y11)

#define ROWSTORE_ACC \
	ROWSTORE(Y0, Y1); \
	ROWSTORE(Y2, Y3); \
	ROWSTORE(Y4, Y5); \
	ROWSTORE(Y6, Y7); \
	ROWSTORE(Y8, Y9); \
	ROWSTORE(Y10, Y11)

// func sgemm6x16AVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int)
TEXT ·sgemm6x16AVX2(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), SI
	SHLQ $2, SI

	ZERO_ACC

	MOVQ CX, DX
	SHRQ $2, DX
	JZ   tail

loop4:
	KSTEP(0, 0)
	KSTEP(24, 64)
	KSTEP(48, 128)
	KSTEP(72, 192)
	ADDQ $96, AX
	ADDQ $256, BX
	DECQ DX
	JNZ  loop4

tail:
	ANDQ $3, CX
	JZ   store

loop1:
	KSTEP(0, 0)
	ADDQ $24, AX
	ADDQ $64, BX
	DECQ CX
	JNZ  loop1

store:
	VBROADCASTSS alpha+40(FP), Y14
	SCALE_ACC

	MOVQ  load+48(FP), DX
	TESTQ DX, DX
	JZ    overwrite

	VBROADCASTSS beta+44(FP), Y15
	ROWLOAD_ACC
	VZEROUPPER
	RET

overwrite:
	ROWSTORE_ACC
	VZEROUPPER
	RET

// Transpose the 8×8 block in Y0..Y7 (row r in Yr) into Y8..Y15 (column q,
// that is row q of the transpose, in Y(8+q)). Clobbers Y0..Y7.
#define TRANSPOSE8 \
	VUNPCKLPS  Y1, Y0, Y8;        \
	VUNPCKHPS  Y1, Y0, Y9;        \
	VUNPCKLPS  Y3, Y2, Y10;       \
	VUNPCKHPS  Y3, Y2, Y11;       \
	VUNPCKLPS  Y5, Y4, Y12;       \
	VUNPCKHPS  Y5, Y4, Y13;       \
	VUNPCKLPS  Y7, Y6, Y14;       \
	VUNPCKHPS  Y7, Y6, Y15;       \
	VSHUFPS    $0x44, Y10, Y8, Y0; \
	VSHUFPS    $0xEE, Y10, Y8, Y1; \
	VSHUFPS    $0x44, Y11, Y9, Y2; \
	VSHUFPS    $0xEE, Y11, Y9, Y3; \
	VSHUFPS    $0x44, Y14, Y12, Y4; \
	VSHUFPS    $0xEE, Y14, Y12, Y5; \
	VSHUFPS    $0x44, Y15, Y13, Y6; \
	VSHUFPS    $0xEE, Y15, Y13, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8; \
	VPERM2F128 $0x20, Y5, Y1, Y9; \
	VPERM2F128 $0x20, Y6, Y2, Y10; \
	VPERM2F128 $0x20, Y7, Y3, Y11; \
	VPERM2F128 $0x31, Y4, Y0, Y12; \
	VPERM2F128 $0x31, Y5, Y1, Y13; \
	VPERM2F128 $0x31, Y6, Y2, Y14; \
	VPERM2F128 $0x31, Y7, Y3, Y15

// Store the first six floats of Y(reg) (X(reg) its low half) at off(DI).
#define STORE6(reg, xreg, off) \
	VMOVUPS      xreg, (off)(DI); \
	VEXTRACTF128 $1, reg, X0;     \
	VMOVQ        X0, (off+16)(DI)

// func packA6AVX(k8 int, a *float32, lda int, dst *float32)
TEXT ·packA6AVX(SB), NOSPLIT, $0-32
	MOVQ k8+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ lda+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	LEAQ (SI)(R8*4), DX

packA6loop:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (SI)(R9*1), Y3
	VMOVUPS (DX), Y4
	VMOVUPS (DX)(R8*1), Y5
	VXORPS  Y6, Y6, Y6
	VXORPS  Y7, Y7, Y7
	TRANSPOSE8
	STORE6(Y8, X8, 0)
	STORE6(Y9, X9, 24)
	STORE6(Y10, X10, 48)
	STORE6(Y11, X11, 72)
	STORE6(Y12, X12, 96)
	STORE6(Y13, X13, 120)
	STORE6(Y14, X14, 144)
	STORE6(Y15, X15, 168)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $192, DI
	DECQ CX
	JNZ  packA6loop
	VZEROUPPER
	RET

// func packBT16AVX(k8 int, b *float32, ldb int, dst *float32)
TEXT ·packBT16AVX(SB), NOSPLIT, $0-32
	MOVQ k8+0(FP), CX
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9
	LEAQ (SI)(R8*4), DX
	LEAQ (DX)(R8*4), BX
	LEAQ (BX)(R8*4), R10

packBT16loop:
	// Columns 0..7 of the panel: rows 0..7 of b.
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (SI)(R9*1), Y3
	VMOVUPS (DX), Y4
	VMOVUPS (DX)(R8*1), Y5
	VMOVUPS (DX)(R8*2), Y6
	VMOVUPS (DX)(R9*1), Y7
	TRANSPOSE8
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, 64(DI)
	VMOVUPS Y10, 128(DI)
	VMOVUPS Y11, 192(DI)
	VMOVUPS Y12, 256(DI)
	VMOVUPS Y13, 320(DI)
	VMOVUPS Y14, 384(DI)
	VMOVUPS Y15, 448(DI)

	// Columns 8..15: rows 8..15 of b.
	VMOVUPS (BX), Y0
	VMOVUPS (BX)(R8*1), Y1
	VMOVUPS (BX)(R8*2), Y2
	VMOVUPS (BX)(R9*1), Y3
	VMOVUPS (R10), Y4
	VMOVUPS (R10)(R8*1), Y5
	VMOVUPS (R10)(R8*2), Y6
	VMOVUPS (R10)(R9*1), Y7
	TRANSPOSE8
	VMOVUPS Y8, 32(DI)
	VMOVUPS Y9, 96(DI)
	VMOVUPS Y10, 160(DI)
	VMOVUPS Y11, 224(DI)
	VMOVUPS Y12, 288(DI)
	VMOVUPS Y13, 352(DI)
	VMOVUPS Y14, 416(DI)
	VMOVUPS Y15, 480(DI)

	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, R10
	ADDQ $512, DI
	DECQ CX
	JNZ  packBT16loop
	VZEROUPPER
	RET

// func packB16AVX(k4 int, b *float32, ldb int, dst *float32)
// Four rows of sixteen floats a step: two 8-float loads and stores a row.
TEXT ·packB16AVX(SB), NOSPLIT, $0-32
	MOVQ k4+0(FP), CX
	MOVQ b+8(FP), SI
	MOVQ ldb+16(FP), R8
	MOVQ dst+24(FP), DI
	SHLQ $2, R8
	LEAQ (R8)(R8*2), R9

packB16loop:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS (SI)(R8*1), Y2
	VMOVUPS 32(SI)(R8*1), Y3
	VMOVUPS (SI)(R8*2), Y4
	VMOVUPS 32(SI)(R8*2), Y5
	VMOVUPS (SI)(R9*1), Y6
	VMOVUPS 32(SI)(R9*1), Y7
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	LEAQ    (SI)(R8*4), SI
	ADDQ    $256, DI
	DECQ    CX
	JNZ     packB16loop
	VZEROUPPER
	RET

// One k step of the 12×16 AVX-512 kernel: a 1×16 row of packed B (Z12)
// times twelve elements of packed A, six from each of two consecutive
// micro-panels (AX, R8), broadcast from memory, accumulated into Z0..Z11
// (row r in Zr).
#define KSTEP12(ao, bo) \
	VMOVUPS          (bo)(BX), Z12;      \
	VFMADD231PS.BCST (ao)(AX), Z12, Z0;  \
	VFMADD231PS.BCST (ao+4)(AX), Z12, Z1; \
	VFMADD231PS.BCST (ao+8)(AX), Z12, Z2; \
	VFMADD231PS.BCST (ao+12)(AX), Z12, Z3; \
	VFMADD231PS.BCST (ao+16)(AX), Z12, Z4; \
	VFMADD231PS.BCST (ao+20)(AX), Z12, Z5; \
	VFMADD231PS.BCST (ao)(R8), Z12, Z6;  \
	VFMADD231PS.BCST (ao+4)(R8), Z12, Z7; \
	VFMADD231PS.BCST (ao+8)(R8), Z12, Z8; \
	VFMADD231PS.BCST (ao+12)(R8), Z12, Z9; \
	VFMADD231PS.BCST (ao+16)(R8), Z12, Z10; \
	VFMADD231PS.BCST (ao+20)(R8), Z12, Z11

#define ROWLOAD12(r) \
	VMULPS  (DI), Z14, Z13; \
	VADDPS  Z13, r, r;      \
	VMOVUPS r, (DI);        \
	ADDQ    SI, DI

#define ROWSTORE12(r) \
	VMOVUPS r, (DI); \
	ADDQ    SI, DI

// func sgemm12x16AVX512(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int)
// The 12×16 tile of two consecutive 6-row micro-panels of packed A (the
// second kc·6 floats after the first) and one of packed B: per element
// the same FMAs in the same order as sgemm6x16AVX2, then the same
// alpha·acc + beta·C, so the two kernels give the same bits.
TEXT ·sgemm12x16AVX512(SB), NOSPLIT, $0-56
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ b+16(FP), BX
	MOVQ c+24(FP), DI
	MOVQ ldc+32(FP), SI
	SHLQ $2, SI
	LEAQ (CX)(CX*2), R8
	SHLQ $3, R8                    // 6·kc floats, in bytes
	ADDQ AX, R8                    // the second micro-panel

	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11

	MOVQ CX, DX
	SHRQ $2, DX
	JZ   tail12

loop12:
	KSTEP12(0, 0)
	KSTEP12(24, 64)
	KSTEP12(48, 128)
	KSTEP12(72, 192)
	ADDQ $96, AX
	ADDQ $96, R8
	ADDQ $256, BX
	DECQ DX
	JNZ  loop12

tail12:
	ANDQ $3, CX
	JZ   store12

loop12b:
	KSTEP12(0, 0)
	ADDQ $24, AX
	ADDQ $24, R8
	ADDQ $64, BX
	DECQ CX
	JNZ  loop12b

store12:
	VBROADCASTSS alpha+40(FP), Z13
	VMULPS       Z13, Z0, Z0
	VMULPS       Z13, Z1, Z1
	VMULPS       Z13, Z2, Z2
	VMULPS       Z13, Z3, Z3
	VMULPS       Z13, Z4, Z4
	VMULPS       Z13, Z5, Z5
	VMULPS       Z13, Z6, Z6
	VMULPS       Z13, Z7, Z7
	VMULPS       Z13, Z8, Z8
	VMULPS       Z13, Z9, Z9
	VMULPS       Z13, Z10, Z10
	VMULPS       Z13, Z11, Z11

	MOVQ  load+48(FP), DX
	TESTQ DX, DX
	JZ    overwrite12

	VBROADCASTSS beta+44(FP), Z14
	ROWLOAD12(Z0)
	ROWLOAD12(Z1)
	ROWLOAD12(Z2)
	ROWLOAD12(Z3)
	ROWLOAD12(Z4)
	ROWLOAD12(Z5)
	ROWLOAD12(Z6)
	ROWLOAD12(Z7)
	ROWLOAD12(Z8)
	ROWLOAD12(Z9)
	ROWLOAD12(Z10)
	ROWLOAD12(Z11)
	VZEROUPPER
	RET

overwrite12:
	ROWSTORE12(Z0)
	ROWSTORE12(Z1)
	ROWSTORE12(Z2)
	ROWSTORE12(Z3)
	ROWSTORE12(Z4)
	ROWSTORE12(Z5)
	ROWSTORE12(Z6)
	ROWSTORE12(Z7)
	ROWSTORE12(Z8)
	ROWSTORE12(Z9)
	ROWSTORE12(Z10)
	ROWSTORE12(Z11)
	VZEROUPPER
	RET

// One k step of the strided kernel: op(B)'s row at (BX), op(A)'s six
// elements at (AX), (AX)+r, (AX)+2r, (R11), (AX)+4r, (R11)+2r, where
// r = R8 (a row of op(A)) and R11 = AX + 3r. The same FMAs into the same
// accumulators as KSTEP, in the same order.
#define KSTEPSTRIDED \
	VMOVUPS      (BX), Y12;          \
	VMOVUPS      32(BX), Y13;        \
	VBROADCASTSS (AX), Y14;          \
	VFMADD231PS  Y12, Y14, Y0;       \
	VFMADD231PS  Y13, Y14, Y1;       \
	VBROADCASTSS (AX)(R8*1), Y15;    \
	VFMADD231PS  Y12, Y15, Y2;       \
	VFMADD231PS  Y13, Y15, Y3;       \
	VBROADCASTSS (AX)(R8*2), Y14;    \
	VFMADD231PS  Y12, Y14, Y4;       \
	VFMADD231PS  Y13, Y14, Y5;       \
	VBROADCASTSS (R11), Y15;         \
	VFMADD231PS  Y12, Y15, Y6;       \
	VFMADD231PS  Y13, Y15, Y7;       \
	VBROADCASTSS (AX)(R8*4), Y14;    \
	VFMADD231PS  Y12, Y14, Y8;       \
	VFMADD231PS  Y13, Y14, Y9;       \
	VBROADCASTSS (R11)(R8*2), Y15;   \
	VFMADD231PS  Y12, Y15, Y10;      \
	VFMADD231PS  Y13, Y15, Y11;      \
	ADDQ         R9, AX;             \
	ADDQ         R9, R11;            \
	ADDQ         R10, BX

// func sgemm6x16StridedAVX2(kc int, a *float32, aRow, aStep int, b *float32, bStep int, c *float32, ldc int, alpha, beta float32, load int)
// sgemm6x16AVX2 with op(A) and op(B) read where they lie instead of
// packed: element (i, p) of op(A) at a[i·aRow + p·aStep], row p of op(B)
// (16 floats) at b[p·bStep]. Same FMAs, same order, same rounding of C:
// the same bits as packing them and calling sgemm6x16AVX2.
TEXT ·sgemm6x16StridedAVX2(SB), NOSPLIT, $0-80
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ aRow+16(FP), R8
	SHLQ $2, R8
	MOVQ aStep+24(FP), R9
	SHLQ $2, R9
	MOVQ b+32(FP), BX
	MOVQ bStep+40(FP), R10
	SHLQ $2, R10
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), SI
	SHLQ $2, SI
	LEAQ (AX)(R8*2), R11
	ADDQ R8, R11

	ZERO_ACC

	MOVQ CX, DX
	SHRQ $1, DX
	JZ   stail

sloop2:
	KSTEPSTRIDED
	KSTEPSTRIDED
	DECQ DX
	JNZ  sloop2

stail:
	ANDQ $1, CX
	JZ   sstore
	KSTEPSTRIDED

sstore:
	VBROADCASTSS alpha+64(FP), Y14
	SCALE_ACC

	MOVQ  load+72(FP), DX
	TESTQ DX, DX
	JZ    soverwrite

	VBROADCASTSS beta+68(FP), Y15
	ROWLOAD_ACC
	VZEROUPPER
	RET

soverwrite:
	ROWSTORE_ACC
	VZEROUPPER
	RET
