//go:build !purego

#include "textflag.h"

// The bf16 micro-kernel: VDPBF16PS (AVX512_BF16), which Go's assembler
// does not know, is written as its EVEX bytes; each such line ends with
// the instruction in Intel syntax, which TestVDPBF16PSEncoding checks
// against the encoder in the tests and, where GNU as is installed,
// against its output.

// func dpbf16Tile8x32(kp int, a, b *uint32, c *float32)
//
// c[i*32+j] = Σ over the kp pairs p of a's pair (i, p) · b's pair (p, j),
// for the 8×32 tile, summed in order from p = 0 by VDPBF16PS (odd element
// of each pair first, one fp32 rounding per product, denormals flushed).
// a holds kp×8 dwords (pair p of row i at p*8+i), b kp×32 (pair p of
// column j at p*32+j); each dword is a bf16 pair, the even k in its low half.
TEXT ·dpbf16Tile8x32(SB), NOSPLIT, $0-32
	MOVQ kp+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
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
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	TESTQ CX, CX
	JZ    store

loop:
	VMOVDQU32 (DI), Z16
	VMOVDQU32 64(DI), Z17
	VPBROADCASTD 0(SI), Z18
	VPBROADCASTD 4(SI), Z19
	VPBROADCASTD 8(SI), Z20
	VPBROADCASTD 12(SI), Z21
	VPBROADCASTD 16(SI), Z22
	VPBROADCASTD 20(SI), Z23
	VPBROADCASTD 24(SI), Z24
	VPBROADCASTD 28(SI), Z25
	BYTE $0x62; BYTE $0xB2; BYTE $0x7E; BYTE $0x40; BYTE $0x52; BYTE $0xC2 // vdpbf16ps zmm0, zmm16, zmm18
	BYTE $0x62; BYTE $0xB2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xCA // vdpbf16ps zmm1, zmm17, zmm18
	BYTE $0x62; BYTE $0xB2; BYTE $0x7E; BYTE $0x40; BYTE $0x52; BYTE $0xD3 // vdpbf16ps zmm2, zmm16, zmm19
	BYTE $0x62; BYTE $0xB2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xDB // vdpbf16ps zmm3, zmm17, zmm19
	BYTE $0x62; BYTE $0xB2; BYTE $0x7E; BYTE $0x40; BYTE $0x52; BYTE $0xE4 // vdpbf16ps zmm4, zmm16, zmm20
	BYTE $0x62; BYTE $0xB2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xEC // vdpbf16ps zmm5, zmm17, zmm20
	BYTE $0x62; BYTE $0xB2; BYTE $0x7E; BYTE $0x40; BYTE $0x52; BYTE $0xF5 // vdpbf16ps zmm6, zmm16, zmm21
	BYTE $0x62; BYTE $0xB2; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xFD // vdpbf16ps zmm7, zmm17, zmm21
	BYTE $0x62; BYTE $0x32; BYTE $0x7E; BYTE $0x40; BYTE $0x52; BYTE $0xC6 // vdpbf16ps zmm8, zmm16, zmm22
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xCE // vdpbf16ps zmm9, zmm17, zmm22
	BYTE $0x62; BYTE $0x32; BYTE $0x7E; BYTE $0x40; BYTE $0x52; BYTE $0xD7 // vdpbf16ps zmm10, zmm16, zmm23
	BYTE $0x62; BYTE $0x32; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xDF // vdpbf16ps zmm11, zmm17, zmm23
	BYTE $0x62; BYTE $0x12; BYTE $0x7E; BYTE $0x40; BYTE $0x52; BYTE $0xE0 // vdpbf16ps zmm12, zmm16, zmm24
	BYTE $0x62; BYTE $0x12; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xE8 // vdpbf16ps zmm13, zmm17, zmm24
	BYTE $0x62; BYTE $0x12; BYTE $0x7E; BYTE $0x40; BYTE $0x52; BYTE $0xF1 // vdpbf16ps zmm14, zmm16, zmm25
	BYTE $0x62; BYTE $0x12; BYTE $0x76; BYTE $0x40; BYTE $0x52; BYTE $0xF9 // vdpbf16ps zmm15, zmm17, zmm25
	ADDQ $32, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  loop

store:
	VMOVUPS Z0, 0(DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VMOVUPS Z3, 192(DX)
	VMOVUPS Z4, 256(DX)
	VMOVUPS Z5, 320(DX)
	VMOVUPS Z6, 384(DX)
	VMOVUPS Z7, 448(DX)
	VMOVUPS Z8, 512(DX)
	VMOVUPS Z9, 576(DX)
	VMOVUPS Z10, 640(DX)
	VMOVUPS Z11, 704(DX)
	VMOVUPS Z12, 768(DX)
	VMOVUPS Z13, 832(DX)
	VMOVUPS Z14, 896(DX)
	VMOVUPS Z15, 960(DX)
	VZEROUPPER
	RET

// func dpbf16Once(acc *[16]float32, a, b *[16]uint32)
//
// acc = VDPBF16PS(acc, a, b) on one register each: for the tests that hold
// the instruction to the model of its semantics.
TEXT ·dpbf16Once(SB), NOSPLIT, $0-24
	MOVQ      acc+0(FP), DX
	MOVQ      a+8(FP), SI
	MOVQ      b+16(FP), DI
	VMOVUPS   (DX), Z0
	VMOVDQU32 (SI), Z1
	VMOVDQU32 (DI), Z2
	BYTE $0x62; BYTE $0xF2; BYTE $0x76; BYTE $0x48; BYTE $0x52; BYTE $0xC2 // vdpbf16ps zmm0, zmm1, zmm2
	VMOVUPS   Z0, (DX)
	VZEROUPPER
	RET
