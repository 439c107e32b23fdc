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

// interleaveBits sets out[l] = even[l] | odd[l]<<16 (bf16 bits, as
// packPairs pairs them) for every line where there are at least 16 (a
// tail of fewer than 16 is done again with the last 16 lines), none with
// fewer or without AVX2, and returns how many.
func interleaveBits(out []uint32, even, odd []uint16) int {
	n := len(out)
	if n < 16 || !cpu.X86.HasAVX2 {
		return 0
	}
	_ = even[n-1]
	_ = odd[n-1]
	interleaveBitsAVX2(&out[0], &even[0], &odd[0], n/16)
	if n%16 != 0 {
		interleaveBitsAVX2(&out[n-16], &even[n-16], &odd[n-16], 1)
	}
	return n
}

// interleaveBitsAVX2 is interleaveBits' routine (bf16pack_amd64.s).
//
//go:noescape
func interleaveBitsAVX2(dst *uint32, even, odd *uint16, n16 int)

// interleavePairsF32 does, where there are at least 8 lines (and AVX2),
// what packPairs does for np whole pairs of an operand whose lines run
// across its rows: dst[p·width+l] = bf16(src[2p·ld+l]) |
// bf16(src[(2p+1)·ld+l])<<16 for l < lines, in one call (a tail of fewer
// than 8 lines done again with the last 8), and says whether it did.
func interleavePairsF32(dst []uint32, width int, src []float32, ld, np, lines int) bool {
	if lines < 8 || np == 0 || !cpu.X86.HasAVX2 {
		return false
	}
	_ = dst[(np-1)*width+lines-1]
	_ = src[(2*np-1)*ld+lines-1]
	tail := -1
	if lines%8 != 0 {
		tail = 4 * (lines - 8)
	}
	interleavePairsF32AVX2(&dst[0], 4*width, &src[0], 4*ld, np, lines/8, tail)
	return true
}

// interleavePairsF32AVX2 is interleavePairsF32's routine
// (bf16pack_amd64.s).
//
//go:noescape
func interleavePairsF32AVX2(dst *uint32, dstride int, src *float32, sstride, np, n8, tail int)

// transposePairs packs the first pairs (a multiple of 8 of them, as many
// as it can: returned) of 32 lines of an operand x whose lines run across
// its rows, from line l0 and pair p0, line-major as the AMX kernel reads
// a strip of op(A): dst[l·ld+p] = x(l0+l, 2(p0+p)) | x(l0+l, 2(p0+p)+1)<<16,
// float32 rounded as packPairs rounds them. None without AVX2.
func transposePairs(dst []uint32, ld int, x BF16Matrix, l0, p0, pairs int) int {
	np8 := pairs / 8
	if np8 == 0 || !cpu.X86.HasAVX2 {
		return 0
	}
	const lines = 32
	_ = dst[(lines-1)*ld+8*np8-1]
	off := 2*p0*x.Ld + l0
	last := off + (16*np8-1)*x.Ld + lines - 1
	if x.F32 != nil {
		_ = x.F32[last]
		transposePairsF32AVX2(&dst[0], 4*ld, &x.F32[off], 4*x.Ld, np8, lines/8)
	} else {
		_ = x.Bits[last]
		transposePairsBitsAVX2(&dst[0], 4*ld, &x.Bits[off], 2*x.Ld, np8, lines/8)
	}
	return 8 * np8
}

// transposePairsF32AVX2 and transposePairsBitsAVX2 are transposePairs'
// routines (bf16pack_amd64.s).
//
//go:noescape
func transposePairsF32AVX2(dst *uint32, dstride int, src *float32, sstride, np8, lines8 int)

//go:noescape
func transposePairsBitsAVX2(dst *uint32, dstride int, src *uint16, sstride, np8, lines8 int)
