package blas

import (
	"errors"
	"runtime"
	"sync"

	"github.com/mixtune/mixtune/internal/cpufeat"
)

// NativeBF16 is mixtune's own bf16 GEMM: a VDPBF16PS micro-kernel in Go
// assembly (AVX512_BF16), for machines without oneDNN. It packs op(A) in
// blocks of 8 rows and op(B) in panels of 32 columns as pairs of bf16
// values along k (a zero pads an odd k), and sums each element of C from
// zero over the pairs in order, as the instruction does: odd element of a
// pair first, each product added with one fp32 rounding (round to nearest
// even), denormal inputs read as zero and denormal sums flushed to zero.
// Every element is one such sum whatever the worker count, so results do
// not depend on it. Then C = alpha·sum + beta·C in float32.
type NativeBF16 struct {
	workers int
	// tile computes one 8×32 tile of sums (dpbf16Tile8x32); the tests
	// put a Go model of it here to check the packing on any CPU.
	tile func(kp int, a, b *uint32, c *float32)
}

// errNoVDPBF16PS is NewNativeBF16's answer where the kernel cannot run.
var errNoVDPBF16PS = errors.New("CPU lacks AVX512_BF16 (VDPBF16PS)")

// NewNativeBF16 returns the VDPBF16PS kernel where features f say the CPU
// has AVX512_BF16 (and the kernel is built: amd64); workers goroutines
// share a large product (0: GOMAXPROCS).
func NewNativeBF16(f cpufeat.Features, workers int) (*NativeBF16, error) {
	if !f.AVX512BF16 {
		return nil, errNoVDPBF16PS
	}
	if !haveBF16Kernel {
		return nil, errors.New("the VDPBF16PS kernel is amd64 assembly, not built here (GOARCH=" + runtime.GOARCH + ", or the purego tag)")
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &NativeBF16{workers: workers, tile: dpbf16Tile8x32}, nil
}

// Name says which kernel runs.
func (nb *NativeBF16) Name() string { return "native (Go, AVX512_BF16 VDPBF16PS kernel)" }

// Tile sizes of the micro-kernel: rows of A, columns of B.
const bf16MR, bf16NR = 8, 32

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C with A and B bf16 bits
// and C float32 (row-major); beta = 0 does not read C.
func (nb *NativeBF16) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if trivialGemm("native GemmBF16", transA, transB, m, n, k, len(a), lda, len(b), ldb, beta, c, ldc) {
		return
	}
	kp := (k + 1) / 2
	panels := (n + bf16NR - 1) / bf16NR
	bp := make([]uint32, panels*kp*bf16NR)
	blocks := (m + bf16MR - 1) / bf16MR
	workers := min(nb.workers, blocks, max(1, 2*m*n*k/(1<<21)))
	parallelRange(min(workers, panels), panels, func(lo, hi int) {
		for q := lo; q < hi; q++ {
			packPairsB(bp[q*kp*bf16NR:(q+1)*kp*bf16NR], transB, b, ldb, k, n, q*bf16NR)
		}
	})
	parallelRange(workers, blocks, func(lo, hi int) {
		ap := make([]uint32, kp*bf16MR)
		var tile [bf16MR * bf16NR]float32
		for blk := lo; blk < hi; blk++ {
			i0 := blk * bf16MR
			packPairsA(ap, transA, a, lda, k, m, i0)
			for q := 0; q < panels; q++ {
				nb.tile(kp, &ap[0], &bp[q*kp*bf16NR], &tile[0])
				finishTile(&tile, alpha, beta, c, ldc, i0, min(i0+bf16MR, m), q*bf16NR, min((q+1)*bf16NR, n))
			}
		}
	})
}

// packPairsA packs rows [i0, i0+8) of op(A) (m×k) as pairs along k:
// ap[p*8+i] = op(A)[i0+i][2p] | op(A)[i0+i][2p+1]<<16, zero outside op(A).
func packPairsA(ap []uint32, transA bool, a []uint16, lda, k, m, i0 int) {
	packPairs(ap, bf16MR, a, lda, k, m, i0, !transA)
}

// packPairsB packs columns [j0, j0+32) of op(B) (k×n) as pairs along k:
// bp[p*32+j] = op(B)[2p][j0+j] | op(B)[2p+1][j0+j]<<16, zero outside op(B).
func packPairsB(bp []uint32, transB bool, b []uint16, ldb, k, n, j0 int) {
	packPairs(bp, bf16NR, b, ldb, k, n, j0, transB)
}

// packPairs packs lines [l0, l0+width) of the lines×k operand x (row
// stride ld) as pairs along k: dst[p*width+l] = x(l0+l, 2p) |
// x(l0+l, 2p+1)<<16, zero past the lines and past k. x(l, kk) is
// x[l*ld+kk] where each line is contiguous along k, else x[kk*ld+l].
func packPairs(dst []uint32, width int, x []uint16, ld, k, lines, l0 int, kContiguous bool) {
	kp := (k + 1) / 2
	n := min(width, lines-l0)
	if n < width { // a partial block: the lines past the operand stay zero
		clear(dst[:kp*width])
	}
	if kContiguous {
		for l := 0; l < n; l++ {
			row := x[(l0+l)*ld : (l0+l)*ld+k]
			for p := 0; p < k/2; p++ {
				dst[p*width+l] = uint32(row[2*p]) | uint32(row[2*p+1])<<16
			}
			if k%2 == 1 {
				dst[(kp-1)*width+l] = uint32(row[k-1])
			}
		}
		return
	}
	for p := 0; p < kp; p++ { // rows 2p and 2p+1 of x hold pair p of every line
		even := x[2*p*ld+l0 : 2*p*ld+l0+n]
		out := dst[p*width : p*width+n]
		if 2*p+1 < k {
			odd := x[(2*p+1)*ld+l0 : (2*p+1)*ld+l0+n]
			for l := range out {
				out[l] = uint32(even[l]) | uint32(odd[l])<<16
			}
		} else {
			for l := range out {
				out[l] = uint32(even[l])
			}
		}
	}
}

// parallelRange runs fn over [0, items) in contiguous ranges on up to
// workers goroutines (one: on the caller's).
func parallelRange(workers, items int, fn func(lo, hi int)) {
	if workers <= 1 {
		fn(0, items)
		return
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		lo, hi := w*items/workers, (w+1)*items/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// finishTile writes rows [i0, i1) × columns [j0, j1) of C from a tile of
// sums (row stride 32): C = alpha·sum + beta·C.
func finishTile(tile *[bf16MR * bf16NR]float32, alpha, beta float32, c []float32, ldc, i0, i1, j0, j1 int) {
	for i := i0; i < i1; i++ {
		row := c[i*ldc+j0 : i*ldc+j1]
		sums := tile[(i-i0)*bf16NR:]
		for j := range row {
			row[j] = scaleBF16Sum(alpha, beta, sums[j], row[j])
		}
	}
}

// scaleBF16Sum is alpha·sum + beta·c in float32, each product rounded
// (never fused); beta = 0 does not read c, and alpha = 1 keeps sum.
func scaleBF16Sum(alpha, beta, sum, c float32) float32 {
	if beta == 0 {
		return float32(alpha * sum)
	}
	return float32(alpha*sum) + float32(beta*c)
}
