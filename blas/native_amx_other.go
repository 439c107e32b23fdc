//go:build !amd64 || purego

package blas

// haveAMXKernel: the AMX kernel is amd64 assembly; NewNativeBF16 never
// picks it elsewhere, so the functions below never run.
const haveAMXKernel = false

func amxK32x32(kcp int, a, b *uint32, acc, c *float32, ldc int, alpha, beta float32, mode int) {
	panic("blas: the AMX kernel is amd64 assembly")
}

func tdpbf16psOnce(c *[256]float32, a, b *[256]uint32) {
	panic("blas: the AMX kernel is amd64 assembly")
}
