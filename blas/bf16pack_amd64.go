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

// have512 says whether the AVX-512 packing routines
// (bf16pack512_amd64.s) run here: AVX512F and AVX512BW, with the OS
// saving the registers.
func have512() bool { return cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW }

// packLinesF32 packs the first pairs of lines lines (at most the width,
// line l's floats at x[off+l·ld:]) as packPairs does, dst[p·width+l] =
// bf16(x(l, 2p)) | bf16(x(l, 2p+1))<<16, 16 lines and 16 pairs at a time
// in AVX-512 (a tail of fewer than 16 pairs is done again with the 16
// that end the rows: the same values written twice), and returns pairs;
// it does nothing and returns 0 with fewer than 16 pairs or without
// AVX-512.
func packLinesF32(dst []uint32, width int, x []float32, ld, off, lines, pairs int) int {
	return packLines(dst, width, x, ld, off, lines, pairs)
}

// packLinesBits is packLinesF32 for lines of bf16 bits (line l's at
// x[off+l·ld:]): dst[p·width+l] = x(l, 2p) | x(l, 2p+1)<<16, 16 lines and
// 16 pairs at a time in AVX-512, a tail of fewer than 16 pairs done again
// with the 16 that end the rows; it returns pairs, or 0 (nothing done)
// with fewer than 16 pairs or without AVX-512.
func packLinesBits(dst []uint32, width int, x []uint16, ld, off, lines, pairs int) int {
	return packLines(dst, width, x, ld, off, lines, pairs)
}

// packLines is packLinesF32 and packLinesBits.
func packLines[T float32 | uint16](dst []uint32, width int, x []T, ld, off, lines, pairs int) int {
	if pairs < 16 || lines == 0 || !have512() {
		return 0
	}
	_ = dst[(pairs-1)*width+lines-1]
	_ = x[off+(lines-1)*ld+2*pairs-1]
	for g := 0; g < lines; g += 16 {
		n := min(16, lines-g)
		var rows [16]*T
		for l := range rows { // lines past n repeat the last: read, not stored
			rows[l] = &x[off+(g+min(l, n-1))*ld]
		}
		mask := uint16(1<<n - 1)
		rows16(&dst[g], 4*width, &rows, pairs/16, mask)
		if tail := pairs - 16; pairs%16 != 0 {
			for l := range rows {
				rows[l] = &x[off+(g+min(l, n-1))*ld+2*tail]
			}
			rows16(&dst[tail*width+g], 4*width, &rows, 1, mask)
		}
	}
	return pairs
}

// rows16 calls the AVX-512 routine that packs 16 rows of T (a type switch,
// not a func value, so that rows stays on the caller's stack).
func rows16[T float32 | uint16](dst *uint32, dstride int, rows *[16]*T, np16 int, mask uint16) {
	switch r := any(rows).(type) {
	case *[16]*float32:
		packRowsF32AVX512(dst, dstride, r, np16, mask)
	case *[16]*uint16:
		packRowsBitsAVX512(dst, dstride, r, np16, mask)
	}
}

// packRowsBitsAVX512 is packLinesBits' AVX-512 routine
// (bf16pack512_amd64.s).
//
//go:noescape
func packRowsBitsAVX512(dst *uint32, dstride int, rows *[16]*uint16, np16 int, mask uint16)

// packRowsF32AVX512 and interleavePairsF32AVX512 are packLinesF32's and
// interleavePairsF32's AVX-512 routines (bf16pack512_amd64.s).
//
//go:noescape
func packRowsF32AVX512(dst *uint32, dstride int, rows *[16]*float32, np16 int, mask uint16)

//go:noescape
func interleavePairsF32AVX512(dst *uint32, dstride int, src *float32, sstride, np, n16 int, tail uint16)

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

// interleavePairsF32 does, with AVX-512 (any lines) or else where there
// are at least 8 lines (and AVX2),
// what packPairs does for np whole pairs of an operand whose lines run
// across its rows: dst[p·width+l] = bf16(src[2p·ld+l]) |
// bf16(src[(2p+1)·ld+l])<<16 for l < lines, in one call (a tail of fewer
// than 8 lines done again with the last 8), and says whether it did.
func interleavePairsF32(dst []uint32, width int, src []float32, ld, np, lines int) bool {
	if np > 0 && lines > 0 && have512() { // 16 lines at a time, a tail masked
		_ = dst[(np-1)*width+lines-1]
		_ = src[(2*np-1)*ld+lines-1]
		interleavePairsF32AVX512(&dst[0], 4*width, &src[0], 4*ld, np, lines/16, uint16(1<<(lines%16)-1))
		return true
	}
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
