//go:build !purego

package blas

import "golang.org/x/sys/cpu"

// packRowPairsF32 stores the first pairs of row (float32, rounded to bf16)
// as dwords dst[p·width] as packPairs does, as many as the AVX2 routine
// takes (a multiple of 8, none without AVX2), and returns how many.
func packRowPairsF32(dst []uint32, width int, row []float32, pairs int) int {
	n8 := pairs / 8
	if n8 == 0 || !cpu.X86.HasAVX2 {
		return 0
	}
	_ = dst[(8*n8-1)*width]
	_ = row[16*n8-1]
	packPairsF32AVX2(&dst[0], 4*width, &row[0], n8)
	return 8 * n8
}

// packPairsF32AVX2 rounds 16·n8 floats to bf16 pairs, pair p at dst +
// p·dstride bytes (bf16pack_amd64.s).
//
//go:noescape
func packPairsF32AVX2(dst *uint32, dstride int, src *float32, n8 int)

// interleaveF32 sets out[l] = bf16(even[l]) | bf16(odd[l])<<16 as
// packPairs does, for as many lines as the AVX2 routine takes (a
// multiple of 8, none without AVX2), and returns how many.
func interleaveF32(out []uint32, even, odd []float32) int {
	n8 := len(out) / 8
	if n8 == 0 || !cpu.X86.HasAVX2 {
		return 0
	}
	_ = even[8*n8-1]
	_ = odd[8*n8-1]
	_ = out[8*n8-1]
	interleaveF32AVX2(&out[0], &even[0], &odd[0], n8)
	return 8 * n8
}

// interleaveF32AVX2 is interleaveF32's routine (bf16pack_amd64.s).
//
//go:noescape
func interleaveF32AVX2(dst *uint32, even, odd *float32, n8 int)
