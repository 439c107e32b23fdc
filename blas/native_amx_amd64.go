//go:build !purego

package blas

// haveAMXKernel says the AMX kernel is built in (amd64 assembly).
const haveAMXKernel = true

// amxK32x32 computes a 32×32 tile of bf16 products over kcp pairs, a
// multiple of 16, with AMX tiles (native_amx_amd64.s; see amxKernel for
// the operands' layout and bf16Kernel for the modes).
//
//go:noescape
func amxK32x32(kcp int, a, b *uint32, acc, c *float32, ldc int, alpha, beta float32, mode int)

// tdpbf16psOnce runs one TDPBF16PS on full 16×16 tiles
// (native_amx_amd64.s).
//
//go:noescape
func tdpbf16psOnce(c *[256]float32, a, b *[256]uint32)
