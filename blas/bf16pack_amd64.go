//go:build !purego

package blas

import "golang.org/x/sys/cpu"

// packRowPairsF32 stores the first pairs of row (float32, rounded to bf16)
// as dwords dst[p·width] as packPairs does, all of them where there are
// at least 8 (a tail of fewer than 8 is done again with the 8 pairs that
// end the row: the same values written twice), none with fewer or
// without AVX2, and returns how many.
func packRowPairsF32(dst []uint32, width int, row []float32, pairs int) int {
	n8 := pairs / 8
	if n8 == 0 || !cpu.X86.HasAVX2 {
		return 0
	}
	_ = dst[(pairs-1)*width]
	_ = row[2*pairs-1]
	packPairsF32AVX2(&dst[0], 4*width, &row[0], n8)
	if tail := pairs - 8; pairs%8 != 0 {
		packPairsF32AVX2(&dst[tail*width], 4*width, &row[2*tail], 1)
	}
	return pairs
}

// packPairsF32AVX2 rounds 16·n8 floats to bf16 pairs, pair p at dst +
// p·dstride bytes (bf16pack_amd64.s).
//
//go:noescape
func packPairsF32AVX2(dst *uint32, dstride int, src *float32, n8 int)

// interleaveF32 sets out[l] = bf16(even[l]) | bf16(odd[l])<<16 as
// packPairs does, for every line where there are at least 8 (a tail of
// fewer than 8 is done again with the last 8 lines), none with fewer or
// without AVX2, and returns how many.
func interleaveF32(out []uint32, even, odd []float32) int {
	n := len(out)
	if n < 8 || !cpu.X86.HasAVX2 {
		return 0
	}
	_ = even[n-1]
	_ = odd[n-1]
	interleaveF32AVX2(&out[0], &even[0], &odd[0], n/8)
	if n%8 != 0 {
		interleaveF32AVX2(&out[n-8], &even[n-8], &odd[n-8], 1)
	}
	return n
}

// interleaveF32AVX2 is interleaveF32's routine (bf16pack_amd64.s).
//
//go:noescape
func interleaveF32AVX2(dst *uint32, even, odd *float32, n8 int)
