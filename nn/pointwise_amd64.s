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
