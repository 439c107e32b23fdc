//go:build !purego

#include "textflag.h"

// The AMX instructions are written as bytes (Go's assembler lacks them),
// each with its Intel syntax in the comment: TestAMXEncoding checks the
// bytes against an encoder and GNU as. Registers: tile loads and stores
// address [base + index·1 + disp] with base and index among AX..DI, so no
// VEX extension bit is set.

// amxTileCfg is the tile configuration (LDTILECFG's 64-byte operand):
// palette 1, every tile tmm0..tmm7 16 rows of 64 bytes (colsb at bytes
// 16+2i, rows at byte 48+i).
DATA amxTileCfg<>+0(SB)/8, $0x0000000000000001
DATA amxTileCfg<>+8(SB)/8, $0
DATA amxTileCfg<>+16(SB)/8, $0x0040004000400040
DATA amxTileCfg<>+24(SB)/8, $0x0040004000400040
DATA amxTileCfg<>+32(SB)/8, $0
DATA amxTileCfg<>+40(SB)/8, $0
DATA amxTileCfg<>+48(SB)/8, $0x1010101010101010
DATA amxTileCfg<>+56(SB)/8, $0
GLOBL amxTileCfg<>(SB), RODATA|NOPTR, $64

// func amxK32x32(kcp int, a, b *uint32, acc, c *float32, ldc int, alpha, beta float32, mode int)
//
// A 32×32 tile of C over kcp pairs (a positive multiple of 16): C's four
// 16×16 fp32 tiles in tmm0..tmm3 (tmm0 rows 0-15 columns 0-15, tmm1 rows
// 0-15 columns 16-31, tmm2 and tmm3 rows 16-31), op(A)'s strip in tmm4
// (rows 0-15) and tmm5 (rows 16-31), op(B)'s panel in tmm6 (columns 0-15)
// and tmm7 (columns 16-31). a is the strip row-major, row i's kcp pairs at
// a[i·kcp:]; b is the panel, pair p of column j at b[p·32+j] (the VNNI
// layout: a tile row is one pair of 16 columns). The tiles start from zero
// or, with mode&1, from acc (32 rows of 32 floats); each step of 16 pairs
// is one TDPBF16PS per C tile. The sums go back to acc; with mode&2, C
// (row stride ldc floats) = alpha·sum, plus beta·C with mode&4 (each
// product rounded, then the sum: unfused, as scaleBF16Sum). The tile
// state is configured and released within the call: it belongs to the OS
// thread, and a goroutine may move between calls.
TEXT ·amxK32x32(SB), NOSPLIT, $0-64
	MOVQ kcp+0(FP), R8
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ acc+24(FP), BX
	MOVQ mode+56(FP), R9
	LEAQ amxTileCfg<>(SB), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // ldtilecfg [rax]
	MOVQ $128, CX
	MOVQ R8, DX
	SHLQ $2, DX
	MOVQ DX, AX
	SHLQ $4, AX
	ADDQ SI, AX
	TESTQ $1, R9
	JZ    amxzero
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x04; BYTE $0x0B // tileloadd tmm0, [rbx+rcx*1]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x4C; BYTE $0x0B; BYTE $0x40 // tileloadd tmm1, [rbx+rcx*1+0x40]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x94; BYTE $0x0B; BYTE $0x00; BYTE $0x08; BYTE $0x00; BYTE $0x00 // tileloadd tmm2, [rbx+rcx*1+0x800]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x9C; BYTE $0x0B; BYTE $0x40; BYTE $0x08; BYTE $0x00; BYTE $0x00 // tileloadd tmm3, [rbx+rcx*1+0x840]
	JMP   amxsteps

amxzero:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC0 // tilezero tmm0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xC8 // tilezero tmm1
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD0 // tilezero tmm2
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x49; BYTE $0xD8 // tilezero tmm3

amxsteps:
	SHRQ $4, R8

amxloop:
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x24; BYTE $0x16 // tileloadd tmm4, [rsi+rdx*1]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x2C; BYTE $0x10 // tileloadd tmm5, [rax+rdx*1]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x34; BYTE $0x0F // tileloadd tmm6, [rdi+rcx*1]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x7C; BYTE $0x0F; BYTE $0x40 // tileloadd tmm7, [rdi+rcx*1+0x40]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xC4 // tdpbf16ps tmm0, tmm4, tmm6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xCC // tdpbf16ps tmm1, tmm4, tmm7
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xD5 // tdpbf16ps tmm2, tmm5, tmm6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x42; BYTE $0x5C; BYTE $0xDD // tdpbf16ps tmm3, tmm5, tmm7
	ADDQ $64, SI
	ADDQ $64, AX
	ADDQ $2048, DI
	DECQ R8
	JNZ  amxloop

	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x04; BYTE $0x0B // tilestored [rbx+rcx*1], tmm0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x4C; BYTE $0x0B; BYTE $0x40 // tilestored [rbx+rcx*1+0x40], tmm1
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x94; BYTE $0x0B; BYTE $0x00; BYTE $0x08; BYTE $0x00; BYTE $0x00 // tilestored [rbx+rcx*1+0x800], tmm2
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x9C; BYTE $0x0B; BYTE $0x40; BYTE $0x08; BYTE $0x00; BYTE $0x00 // tilestored [rbx+rcx*1+0x840], tmm3
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0 // tilerelease
	TESTQ $2, R9
	JZ    amxdone

	// C = alpha·sum (+ beta·C), a row of 32 floats at a time
	MOVQ c+32(FP), DX
	MOVQ ldc+40(FP), R10
	SHLQ $2, R10
	VBROADCASTSS alpha+48(FP), Z28
	VBROADCASTSS beta+52(FP), Z29
	MOVQ $32, R8
	TESTQ $4, R9
	JZ    amxoverwrite

amxreadc:
	VMULPS  (BX), Z28, Z0
	VMULPS  64(BX), Z28, Z1
	VMULPS  (DX), Z29, Z2
	VMULPS  64(DX), Z29, Z3
	VADDPS  Z2, Z0, Z0
	VADDPS  Z3, Z1, Z1
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	ADDQ    $128, BX
	ADDQ    R10, DX
	DECQ    R8
	JNZ     amxreadc
	JMP     amxdone

amxoverwrite:
	VMULPS  (BX), Z28, Z0
	VMULPS  64(BX), Z28, Z1
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	ADDQ    $128, BX
	ADDQ    R10, DX
	DECQ    R8
	JNZ     amxoverwrite

amxdone:
	VZEROUPPER
	RET

// func tdpbf16psOnce(c *[256]float32, a, b *[256]uint32)
//
// c = TDPBF16PS(c, a, b) on one full tile each (16 rows of 64 bytes, row
// stride 64): for the tests that hold the instruction to the model of its
// semantics.
TEXT ·tdpbf16psOnce(SB), NOSPLIT, $0-24
	MOVQ c+0(FP), BX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	LEAQ amxTileCfg<>(SB), AX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0x00 // ldtilecfg [rax]
	MOVQ $64, CX
	MOVQ $64, DX
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x04; BYTE $0x0B // tileloadd tmm0, [rbx+rcx*1]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x24; BYTE $0x16 // tileloadd tmm4, [rsi+rdx*1]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7B; BYTE $0x4B; BYTE $0x34; BYTE $0x0F // tileloadd tmm6, [rdi+rcx*1]
	BYTE $0xC4; BYTE $0xE2; BYTE $0x4A; BYTE $0x5C; BYTE $0xC4 // tdpbf16ps tmm0, tmm4, tmm6
	BYTE $0xC4; BYTE $0xE2; BYTE $0x7A; BYTE $0x4B; BYTE $0x04; BYTE $0x0B // tilestored [rbx+rcx*1], tmm0
	BYTE $0xC4; BYTE $0xE2; BYTE $0x78; BYTE $0x49; BYTE $0xC0 // tilerelease
	RET
