//go:build !amd64 || purego

package blas

// haveBF16Kernel: the VDPBF16PS kernel is amd64 assembly; NewNativeBF16
// refuses elsewhere, so the functions below never run.
const haveBF16Kernel = false

func dpbf16Tile8x32(kp int, a, b *uint32, c *float32) {
	panic("blas: the VDPBF16PS kernel is amd64 assembly")
}

func dpbf16Once(acc *[16]float32, a, b *[16]uint32) {
	panic("blas: the VDPBF16PS kernel is amd64 assembly")
}
