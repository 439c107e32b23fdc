//go:build !amd64 || purego

package blas

// haveBF16Kernel: the VDPBF16PS kernel is amd64 assembly; NewNativeBF16
// refuses elsewhere, so the functions below never run.
const haveBF16Kernel = false

func dpbf16K14x32(kcp int, a, b *uint32, acc, c *float32, ldc int, alpha, beta float32, mode int) {
	panic("blas: the VDPBF16PS kernel is amd64 assembly")
}

func dpbf16Once(acc *[16]float32, a, b *[16]uint32) {
	panic("blas: the VDPBF16PS kernel is amd64 assembly")
}
