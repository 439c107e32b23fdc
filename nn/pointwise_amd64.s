//go:build amd64 && !purego

#include "textflag.h"

// Elementwise float32 loops of the pointwise ops, eight at a time: each
// lane does the scalar Go loop's operations in its order, each one
// rounded (no FMAs), so the bits are the scalar loop's. n is a multiple
// of 8.

// func mulMulAVX2(y, a, b, c *float32, n int)
// y[i] = (a[i]·b[i])·c[i]
TEXT ·mulMulAVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ c+24(FP), R8
	MOVQ n+32(FP), CX
	XORQ AX, AX
mmloop:
	CMPQ    AX, CX
	JGE     mmdone
	VMOVUPS (SI)(AX*4), Y0
	VMULPS  (DX)(AX*4), Y0, Y0
	VMULPS  (R8)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     mmloop
mmdone:
	VZEROUPPER
	RET

// func swigluGradAAVX2(d, gr, u, s, a *float32, n int)
// d[i] = ((g[i]·u[i])·s[i])·(1 + a[i]·(1 - s[i]))
TEXT ·swigluGradAAVX2(SB), NOSPLIT, $0-48
	MOVQ d+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ u+16(FP), DX
	MOVQ s+24(FP), R8
	MOVQ a+32(FP), R9
	MOVQ n+40(FP), CX
	MOVL    $0x3f800000, AX
	MOVL    AX, X15
	VBROADCASTSS X15, Y15          // 1
	XORQ AX, AX
sgloop:
	CMPQ    AX, CX
	JGE     sgdone
	VMOVUPS (R8)(AX*4), Y2         // s
	VMOVUPS (SI)(AX*4), Y0
	VMULPS  (DX)(AX*4), Y0, Y0     // g·u
	VMULPS  Y2, Y0, Y0             // ·s
	VSUBPS  Y2, Y15, Y1            // 1 - s
	VMULPS  (R9)(AX*4), Y1, Y1     // a·(1 - s)
	VADDPS  Y15, Y1, Y1            // 1 + …
	VMULPS  Y1, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     sgloop
sgdone:
	VZEROUPPER
	RET

// func addScaledAVX2(y, a, b *float32, s float32, n int)
// y[i] = a[i] + s·b[i]
TEXT ·addScaledAVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	VBROADCASTSS s+24(FP), Y15
	MOVQ n+32(FP), CX
	XORQ AX, AX
asloop:
	CMPQ    AX, CX
	JGE     asdone
	VMULPS  (DX)(AX*4), Y15, Y0
	VADDPS  (SI)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     asloop
asdone:
	VZEROUPPER
	RET

// func scaleAVX2(y, x *float32, s float32, n int)
// y[i] = s·x[i]
TEXT ·scaleAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	VBROADCASTSS s+16(FP), Y15
	MOVQ n+24(FP), CX
	XORQ AX, AX
scloop:
	CMPQ    AX, CX
	JGE     scdone
	VMULPS  (SI)(AX*4), Y15, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     scloop
scdone:
	VZEROUPPER
	RET

// func mulSubAVX2(y, a, b *float32, s float32, n int)
// y[i] = a[i]·(b[i] - s)
TEXT ·mulSubAVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	VBROADCASTSS s+24(FP), Y15
	MOVQ n+32(FP), CX
	XORQ AX, AX
msloop:
	CMPQ    AX, CX
	JGE     msdone
	VMOVUPS (DX)(AX*4), Y0
	VSUBPS  Y15, Y0, Y0
	VMULPS  (SI)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     msloop
msdone:
	VZEROUPPER
	RET

// func scaleMulAVX2(y, x, w *float32, s float32, n int)
// y[i] = w[i]·(x[i]·s)
TEXT ·scaleMulAVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	VBROADCASTSS s+24(FP), Y15
	MOVQ n+32(FP), CX
	XORQ AX, AX
smloop:
	CMPQ    AX, CX
	JGE     smdone
	VMULPS  (SI)(AX*4), Y15, Y0
	VMULPS  (DX)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     smloop
smdone:
	VZEROUPPER
	RET

// func rmsGradAVX2(d, gr, w, x *float32, c, rs float32, n int)
// d[i] = rs·(gr[i]·w[i] − x[i]·c)
TEXT ·rmsGradAVX2(SB), NOSPLIT, $0-48
	MOVQ d+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ x+24(FP), R8
	VBROADCASTSS c+32(FP), Y14
	VBROADCASTSS rs+36(FP), Y15
	MOVQ n+40(FP), CX
	XORQ AX, AX
rgloop:
	CMPQ    AX, CX
	JGE     rgdone
	VMOVUPS (SI)(AX*4), Y0
	VMULPS  (DX)(AX*4), Y0, Y0     // g·w
	VMULPS  (R8)(AX*4), Y14, Y1    // x·c
	VSUBPS  Y1, Y0, Y0
	VMULPS  Y0, Y15, Y0            // rs·(…)
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     rgloop
rgdone:
	VZEROUPPER
	RET

// func accMulMulAVX2(p, gr, x *float32, s float32, n int)
// p[i] += (gr[i]·x[i])·s
TEXT ·accMulMulAVX2(SB), NOSPLIT, $0-40
	MOVQ p+0(FP), DI
	MOVQ gr+8(FP), SI
	MOVQ x+16(FP), DX
	VBROADCASTSS s+24(FP), Y15
	MOVQ n+32(FP), CX
	XORQ AX, AX
amloop:
	CMPQ    AX, CX
	JGE     amdone
	VMOVUPS (SI)(AX*4), Y0
	VMULPS  (DX)(AX*4), Y0, Y0
	VMULPS  Y15, Y0, Y0
	VADDPS  (DI)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     amloop
amdone:
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) (m float32, nan int)
// m = the largest of x[0:n] (n ≥ 16) by VMAXPS, two accumulators of 8,
// the last 8 values overlapping the previous block (max is idempotent);
// nan ≠ 0 when any value is NaN (an unordered self-compare, or-ed).
TEXT ·maxAVX2(SB), NOSPLIT, $0-32
	MOVQ    x+0(FP), SI
	MOVQ    n+8(FP), CX
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VCMPPS  $3, Y0, Y0, Y2 // unordered: NaN
	VCMPPS  $3, Y1, Y1, Y3
	VORPS   Y3, Y2, Y2
	MOVQ    $16, AX
	MOVQ    CX, DX
	SUBQ    $8, DX // the last block's start
// MAXSTEP folds x[AX:AX+8] into acc, noting NaNs in Y2.
#define MAXSTEP(acc) \
	VMOVUPS (SI)(AX*4), Y4 \
	VCMPPS  $3, Y4, Y4, Y5 \
	VORPS   Y5, Y2, Y2     \
	VMAXPS  Y4, acc, acc   \
	ADDQ    $8, AX

mxloop:
	CMPQ AX, DX
	JG   mxtail
	MAXSTEP(Y0)
	CMPQ AX, DX
	JG   mxtail
	MAXSTEP(Y1)
	JMP  mxloop
mxtail:
	CMPQ    AX, CX
	JGE     mxreduce
	VMOVUPS (SI)(DX*4), Y4 // x[n-8:n], overlapping what was read
	VCMPPS  $3, Y4, Y4, Y5
	VORPS   Y5, Y2, Y2
	VMAXPS  Y4, Y0, Y0
mxreduce:
	VMAXPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VMOVSS       X0, m+16(FP)
	VMOVMSKPS    Y2, BX
	MOVQ         BX, nan+24(FP)
	VZEROUPPER
	RET

// func ropeHeadsAVX2(row, c, s *float32, sign float32, n8, half, heads int)
// Each of a row's heads in turn, its halves x1 at row[2h·half] and x2 at
// row[2h·half+half], all sharing c and s (one position): with si =
// sign·s[i], x1[i] = a·c[i] − b·si, x2[i] = b·c[i] + a·si, where a, b =
// x1[i], x2[i] before, for i < n8 (a multiple of 8, at most half).
TEXT ·ropeHeadsAVX2(SB), NOSPLIT, $0-56
	MOVQ row+0(FP), DI
	MOVQ c+8(FP), DX
	MOVQ s+16(FP), R8
	VBROADCASTSS sign+24(FP), Y15
	MOVQ n8+32(FP), CX
	MOVQ half+40(FP), R10
	MOVQ heads+48(FP), R9
	LEAQ (DI)(R10*4), SI           // head 0's x2
	SHLQ $3, R10                   // a head's bytes: 2·half·4
rhhead:
	TESTQ R9, R9
	JZ    rhdone
	XORQ  AX, AX
rhloop:
	CMPQ    AX, CX
	JGE     rhnext
	VMOVUPS (DI)(AX*4), Y0         // a
	VMOVUPS (SI)(AX*4), Y1         // b
	VMOVUPS (DX)(AX*4), Y2         // c
	VMULPS  (R8)(AX*4), Y15, Y3    // si
	VMULPS  Y2, Y0, Y4             // a·c
	VMULPS  Y3, Y1, Y5             // b·si
	VSUBPS  Y5, Y4, Y4
	VMULPS  Y2, Y1, Y6             // b·c
	VMULPS  Y3, Y0, Y7             // a·si
	VADDPS  Y7, Y6, Y6
	VMOVUPS Y4, (DI)(AX*4)
	VMOVUPS Y6, (SI)(AX*4)
	ADDQ    $8, AX
	JMP     rhloop
rhnext:
	ADDQ R10, DI
	ADDQ R10, SI
	DECQ R9
	JMP  rhhead
rhdone:
	VZEROUPPER
	RET
