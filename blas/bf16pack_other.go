//go:build !amd64 || purego

package blas

// packRowPairsF32: no vector routine here; packPairs does every pair.
func packRowPairsF32(dst []uint32, width int, row []float32, pairs int) int { return 0 }

// packLinesF32: no vector routine here; packPairs does every line.
func packLinesF32(dst []uint32, width int, x []float32, ld, off, lines, pairs int) int { return 0 }

// packLinesBits: no vector routine here; packPairs does every line.
func packLinesBits(dst []uint32, width int, x []uint16, ld, off, lines, pairs int) int { return 0 }

// interleaveF32: no vector routine here; packPairs does every line.
func interleaveF32(out []uint32, even, odd []float32) int { return 0 }

// interleaveBits: no vector routine here; packPairs does every line.
func interleaveBits(out []uint32, even, odd []uint16) int { return 0 }

// interleavePairsF32: no vector routine here; packPairs does every pair.
func interleavePairsF32(dst []uint32, width int, src []float32, ld, np, lines int) bool {
	return false
}

// transposePairs: no vector routine here; packStripAAMX does every pair.
func transposePairs(dst []uint32, ld int, x BF16Matrix, l0, p0, pairs int) int { return 0 }

// have512: no AVX-512 routines in this build.
func have512() bool { return false }
