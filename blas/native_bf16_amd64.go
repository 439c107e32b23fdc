//go:build !purego

package blas

// haveBF16Kernel says the VDPBF16PS kernel is built in (amd64 assembly).
const haveBF16Kernel = true

// dpbf16Tile8x32 computes an 8×32 tile of bf16 products (native_bf16_amd64.s).
//
//go:noescape
func dpbf16Tile8x32(kp int, a, b *uint32, c *float32)

// dpbf16Once runs one VDPBF16PS on 16 lanes (native_bf16_amd64.s).
//
//go:noescape
func dpbf16Once(acc *[16]float32, a, b *[16]uint32)
