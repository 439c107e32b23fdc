//go:build !purego

package blas

// haveBF16Kernel says the VDPBF16PS kernel is built in (amd64 assembly).
const haveBF16Kernel = true

// dpbf16K14x32 computes a 14×32 tile of bf16 products over one k slice
// (native_bf16_amd64.s; see bf16Kernel for the arguments).
//
//go:noescape
func dpbf16K14x32(kcp int, a, b *uint32, acc, c *float32, ldc int, alpha, beta float32, mode int)

// dpbf16Once runs one VDPBF16PS on 16 lanes (native_bf16_amd64.s).
//
//go:noescape
func dpbf16Once(acc *[16]float32, a, b *[16]uint32)
