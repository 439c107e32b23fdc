package blas

import (
	"cmp"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/mixtune/mixtune/internal/par"
)

// Native is mixtune's own pure-Go backend: packed panels and an AVX2/FMA
// micro-kernel in Go assembly on amd64 CPUs that have them, a plain Go kernel
// elsewhere. It needs nothing but the Go toolchain.
//
// Sgemm follows the GotoBLAS/BLIS structure: a KC×NC panel of op(B) and an
// MC×KC block of op(A) are packed into contiguous buffers (which absorbs
// transposes and strides), and a register-blocked 6×16 kernel computes one
// tile of C over one KC slice. Work is split across goroutines by disjoint
// blocks of rows or columns of C, never over k, and the k-blocking depends
// only on k, so every element of C is summed in the same order whatever
// Workers is: results are bit-identical for any worker count.
//
// Dgemm (float64 is only used for gradient checks) runs on gonum.
type Native struct {
	// Workers caps the goroutines one call uses; 0 means GOMAXPROCS.
	// Small products run on the calling goroutine alone.
	Workers int
}

// Name says which kernel runs.
func (Native) Name() string { return "native (Go, " + nativeBest.name + " kernel)" }

// Sgemm computes C = alpha·op(A)·op(B) + beta·C in float32 (row-major).
func (be Native) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	nativeSgemm(nativeBest, nativeSplit{workers: be.Workers, minWork: nativeParallelWork}, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmFinish is Sgemm calling done for each block of C once it is final
// (see Finisher): rows of one packed block of op(A) by the columns of one
// packed panel of op(B), after its last k slice.
func (be Native) SgemmFinish(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	nativeSgemmFinish(nativeBest, nativeSplit{workers: be.Workers, minWork: nativeParallelWork}, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, done)
}

// Dgemm computes C = alpha·op(A)·op(B) + beta·C in float64 through gonum.
func (Native) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	Gonum{}.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Blocking. A tile of C is nativeMR×nativeNR; the kernel keeps it in
// registers over one k slice of at most nativeKC. nativeMC rows of packed
// op(A) (nativeMC×kc floats, ~144 KiB) stay in L2 while one packed kc×16
// micro-panel of op(B) (16 KiB) is reused from L1 across them. nativeNC
// bounds the packed op(B) panel (kc×nativeNC floats).
const (
	nativeMR = 6
	nativeNR = 16
	nativeKC = 256
	nativeMC = 144
	nativeNC = 1024

	// nativeParallelWork is the smallest m·n·k per worker worth handing
	// to another goroutine: 1M multiply-adds, 5–10 µs on one core. A
	// helper of par's team, spinning between regions, starts within a
	// microsecond; a goroutine woken on an idle vCPU took about 100 µs,
	// which is why this was 8M before the team.
	nativeParallelWork = 1 << 20

	// nativeSharedB bounds, in floats, the op(B) panel that parallelRows
	// packs once for all workers (4 MiB).
	nativeSharedB = 1 << 20

	// nativeChunksPerWorker is how many pieces of C each worker gets on
	// average when a call runs in parallel.
	nativeChunksPerWorker = 4
)

// nativeKernel computes the nativeMR×nativeNR tile
//
//	C = alpha·acc + beta·C   (beta·C is not read when beta == 0)
//
// where acc[i][j] = Σ_{p<kc} a[p·MR+i]·b[p·NR+j], summed in increasing p.
// a and b are packed micro-panels; c starts at the tile's top-left element
// and holds at least (MR-1)·ldc+NR elements. The product is rounded as
// float32(alpha·acc) + float32(beta·C), unfused, so a tile computed into a
// scratch tile (alpha = 1, beta = 0) and merged by nativeMerge rounds the
// same as one computed in place.
type nativeKernel func(kc int, a, b, c []float32, ldc int, alpha, beta float32)

// nativeImpl is a kernel and the packing routines that go with it.
type nativeImpl struct {
	name string
	kern nativeKernel
	// kern12, when not nil, is kern on two full tiles one above the other
	// (12×16, a over two consecutive micro-panels of packed A), with the
	// same bits per element as kern: AVX-512's wider registers hold the
	// twelve rows' sums.
	kern12 nativeKernel
	// packA6 packs one full micro-panel of op(A) = A (not transposed): six
	// rows of a, row stride lda, kc floats each, into dst[p·6+r].
	packA6 func(dst, a []float32, lda, kc int)
	// packBT16 packs one full micro-panel of op(B) = Bᵀ: sixteen rows of
	// b, row stride ldb, kc floats each, into dst[p·16+j].
	packBT16 func(dst, b []float32, ldb, kc int)
	// packB16 packs one full micro-panel of op(B) = B: kc rows of b, row
	// stride ldb, sixteen floats each, into dst[p·16+j].
	packB16 func(dst, b []float32, ldb, kc int)
	// kernStrided is kern reading op(A) and op(B) where they lie, for
	// the thin products (native_thin.go).
	kernStrided nativeStridedKernel
}

// nativeGo is the portable implementation, plain Go throughout.
var nativeGo = &nativeImpl{name: "portable", kern: nativePortable, packA6: nativePackA6Go, packBT16: nativePackBT16Go, packB16: nativePackB16Go,
	kernStrided: nativeStridedVia(nativePortable)}

// nativeAsm is the assembly implementation when this CPU can run it, nil
// otherwise; nativeBest is what Native uses. Both are set once at package
// initialisation and only read afterwards.
var (
	nativeAsm  = nativeAsmImpl()
	nativeBest = cmp.Or(nativeAsm, nativeGo)
)

// nativeSplit says how nativeSgemm may split a product: into at most
// workers goroutines (0 = GOMAXPROCS), each with at least minWork of m·n·k.
type nativeSplit struct {
	workers int
	minWork int64
	// blocked keeps thin products on the blocked path too (tests: the
	// thin paths must give its bits).
	blocked bool
}

// nativeSgemm is Native.Sgemm with the implementation and the splitting
// policy as parameters, so tests can run the portable implementation on
// machines that have the assembly one, and split small products. It
// returns how many goroutines computed the product, for tests.
func nativeSgemm(impl *nativeImpl, split nativeSplit, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) (used int) {
	return nativeSgemmFinish(impl, split, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil)
}

// nativeSgemmFinish is nativeSgemm with an optional done callback (see
// Finisher).
func nativeSgemmFinish(impl *nativeImpl, split nativeSplit, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) (used int) {
	g := &nativeGemm{nativeImpl: impl, transA: transA, transB: transB, k: k, alpha: alpha, a: a, lda: lda, b: b, ldb: ldb, beta: beta, c: c, ldc: ldc, done: done}
	return g.compute("native Sgemm", split, m, n, len(b))
}

// SgemmWiden is SgemmFinish with op(B) given as 16-bit values (see Widener):
// each strip of a k slice of B is widened into a worker's scratch just
// before it is packed, so the product is the bits of SgemmFinish on the
// widened B, without a float32 copy of B or a call per block of it.
func (be Native) SgemmWiden(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, widen func(dst []float32, src []uint16), ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	nativeSgemmWiden(nativeBest, nativeSplit{workers: be.Workers, minWork: nativeParallelWork}, transA, transB, m, n, k, alpha, a, lda, b, widen, ldb, beta, c, ldc, done)
}

// nativeSgemmWiden is Native.SgemmWiden with the implementation and the
// splitting policy as parameters (see nativeSgemm).
func nativeSgemmWiden(impl *nativeImpl, split nativeSplit, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, widen func(dst []float32, src []uint16), ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) (used int) {
	load := func(dst []float32, off int) { widen(dst, b[off:off+len(dst)]) }
	return nativeSgemmLoad(impl, split, transA, transB, m, n, k, alpha, a, lda, load, len(b), ldb, beta, c, ldc, done)
}

// SgemmLoad is SgemmFinish with op(B) read through load (see Loader): each
// strip of a k slice of B (nativeNR columns of op(B) when transB, else
// nativeLoadStrip) is loaded into a worker's scratch of at most
// nativeKC·nativeLoadStrip floats just before it is packed. When the
// product is split by rows, the workers load and pack the shared panel of
// op(B) together. The product is the bits of SgemmFinish on B loaded
// whole: the packed panels are the same values.
func (be Native) SgemmLoad(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, load func(dst []float32, off int), lenB, ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	nativeSgemmLoad(nativeBest, nativeSplit{workers: be.Workers, minWork: nativeParallelWork}, transA, transB, m, n, k, alpha, a, lda, load, lenB, ldb, beta, c, ldc, done)
}

// nativeSgemmLoad is Native.SgemmLoad with the implementation and the
// splitting policy as parameters (see nativeSgemm).
func nativeSgemmLoad(impl *nativeImpl, split nativeSplit, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, load func(dst []float32, off int), lenB, ldb int, beta float32, c []float32, ldc int, done func(i0, i1, j0, j1 int)) (used int) {
	g := &nativeGemm{nativeImpl: impl, transA: transA, transB: transB, k: k, alpha: alpha, a: a, lda: lda, load: load, ldb: ldb, beta: beta, c: c, ldc: ldc, done: done}
	return g.compute("native SgemmLoad", split, m, n, lenB)
}

// compute checks the arguments (lenB is the length of B, whichever slice
// holds it), runs the product on as many goroutines as split allows and
// returns how many did.
func (g *nativeGemm) compute(name string, split nativeSplit, m, n, lenB int) int {
	k, c, ldc := g.k, g.c, g.ldc
	if err := checkGemm(name, g.transA, g.transB, m, n, k, len(g.a), g.lda, lenB, g.ldb, len(c), ldc); err != nil {
		panic(err.Error()) // a caller bug: panic as gonum does
	}
	if m == 0 || n == 0 {
		return 0
	}
	if g.alpha == 0 || k == 0 {
		nativeScale(m, n, g.beta, c, ldc)
		if g.done != nil {
			g.done(0, m, 0, n)
		}
		return 1
	}
	// The k-blocking depends on k alone: nb slices of nearly equal size.
	nb := (k + nativeKC - 1) / nativeKC
	g.kc = (k + nb - 1) / nb

	workers := split.workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	if work := int64(m) * int64(n) * int64(k); split.minWork > 0 && work < split.minWork*int64(workers) {
		workers = int(max(1, work/split.minWork))
	}
	mt := (m + nativeMR - 1) / nativeMR // row tiles
	nt := (n + nativeNR - 1) / nativeNR // column tiles
	switch {
	case !split.blocked && g.thinN(m, n):
		return g.runThinN(workers, m, n)
	case !split.blocked && g.thinM(m, n):
		return g.runThinM(workers, m, n)
	case workers > 1 && mt >= nativeChunksPerWorker*workers:
		g.parallelRows(workers, m, n, mt)
	case workers > 1 && nt >= nativeChunksPerWorker*workers:
		g.parallelCols(workers, m, n, nt)
	default:
		g.run(0, m, 0, n)
		return 1
	}
	return workers
}

// The parallel drivers deal C out in nativeChunksPerWorker·workers chunks of
// whole tiles, which the workers claim as they come free: a worker whose
// goroutine starts late (the cores are shared) just takes fewer chunks, and
// the caller's goroutine works too. Chunk boundaries fall on tile
// boundaries. No result depends on who computes which chunk: each element
// of C is computed alone, by the same kernel, over the same k slices in the
// same order.

// nativeParallel runs body on the caller's goroutine and workers-1 others
// (par's spinning helpers) until body returns on each.
func nativeParallel(workers int, body func()) {
	par.Run(workers, func(int) { body() })
}

// parallelRows splits C by rows. The caller packs op(B) for a column block
// and as many k slices as fit in nativeSharedB floats; the workers share it
// read-only, each packing the rows of op(A) its chunks need.
func (g *nativeGemm) parallelRows(workers, m, n, mt int) {
	chunks := min(mt, nativeChunksPerWorker*workers)
	bufs := nativePool.Get().(*nativeBuffers)
	defer nativePool.Put(bufs)
	ncMax := min(nativeNC, roundUp(n, nativeNR))
	kspan := min(g.k, g.kc*max(1, nativeSharedB/(g.kc*ncMax))) // whole k slices
	bp := nativeAlign(&bufs.b, kspan*ncMax)
	for jc := 0; jc < n; jc += nativeNC {
		nc := min(nativeNC, n-jc)
		for p0 := 0; p0 < g.k; p0 += kspan {
			p1 := min(g.k, p0+kspan)
			// k slice pc is packed at bp[(pc-p0)·ncMax:].
			if g.load != nil {
				g.packLoadedShared(workers, bp, ncMax, p0, p1, jc, nc)
			} else {
				for pc := p0; pc < p1; pc += g.kc {
					g.packB(bufs, bp[(pc-p0)*ncMax:], pc, min(g.kc, g.k-pc), jc, nc)
				}
			}
			var next atomic.Int64
			nativeParallel(workers, func() {
				var abufs *nativeBuffers
				for {
					ch := int(next.Add(1)) - 1
					if ch >= chunks {
						break
					}
					if abufs == nil {
						abufs = nativePool.Get().(*nativeBuffers)
					}
					i0, i1 := mt*ch/chunks*nativeMR, min(m, mt*(ch+1)/chunks*nativeMR)
					ap := nativeAlign(&abufs.a, g.kc*min(nativeMC, roundUp(i1-i0, nativeMR)))
					for pc := p0; pc < p1; pc += g.kc {
						g.block(ap, bp[(pc-p0)*ncMax:], i0, i1, jc, nc, pc, min(g.kc, g.k-pc))
					}
				}
				if abufs != nil {
					nativePool.Put(abufs)
				}
			})
		}
	}
}

// parallelCols splits C by columns, for products with too few rows to
// split: each chunk packs op(A) (few rows) and its own columns of op(B).
func (g *nativeGemm) parallelCols(workers, m, n, nt int) {
	nativeChunked(workers, nt, func(lo, hi int) {
		g.run(0, m, lo*nativeNR, min(n, hi*nativeNR))
	})
}

// nativeScale sets C = beta·C; beta == 0 clears C without reading it.
func nativeScale(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := range m {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// nativeGemm is one Sgemm call, shared read-only by its workers.
type nativeGemm struct {
	*nativeImpl
	transA, transB bool
	k, kc          int
	alpha, beta    float32
	a, b, c        []float32
	lda, ldb, ldc  int
	done           func(i0, i1, j0, j1 int) // nil, or called on each final block
	// load, when not nil, reads B (b is then nil): see Loader.
	load func(dst []float32, off int)
}

// nativeLoadStrip is how many columns of op(B) a loaded B (Loader) is read
// and packed in at a time when B is not transposed: each load is a run of
// that many elements of one row. Transposed, a strip is one micro-panel
// (nativeNR columns of op(B), each a run of kc elements of a row of B).
const nativeLoadStrip = 8 * nativeNR

// nativeBuffers are one worker's packing buffers, recycled through a pool:
// w holds a strip of a loaded B (Loader) before it is packed.
type nativeBuffers struct {
	a, b, w []float32
}

var nativePool = sync.Pool{New: func() any { return new(nativeBuffers) }}

// nativeAlign returns a slice of n floats from buf whose first element is
// 64-byte aligned, growing buf (stored back through p) as needed.
func nativeAlign(p *[]float32, n int) []float32 {
	const pad = 16 // floats: 64 bytes
	if cap(*p) < n+pad {
		*p = make([]float32, n+pad)
	}
	buf := (*p)[:cap(*p)]
	off := int(uintptr(unsafe.Pointer(&buf[0]))&63) / 4
	if off != 0 {
		off = pad - off
	}
	return buf[off : off+n]
}

// run computes rows [i0, i1) × columns [j0, j1) of C on the calling
// goroutine. i0 is a multiple of nativeMR and j0 of nativeNR.
func (g *nativeGemm) run(i0, i1, j0, j1 int) {
	bufs := nativePool.Get().(*nativeBuffers)
	defer nativePool.Put(bufs)
	ncMax := min(nativeNC, roundUp(j1-j0, nativeNR))
	bp := nativeAlign(&bufs.b, g.kc*ncMax)
	ap := nativeAlign(&bufs.a, g.kc*min(nativeMC, roundUp(i1-i0, nativeMR)))
	for jc := j0; jc < j1; jc += nativeNC {
		nc := min(nativeNC, j1-jc)
		for pc := 0; pc < g.k; pc += g.kc {
			kc := min(g.kc, g.k-pc)
			g.packB(bufs, bp, pc, kc, jc, nc)
			g.block(ap, bp, i0, i1, jc, nc, pc, kc)
		}
	}
}

// block updates rows [i0, i1) × columns [jc, jc+nc) of C with the k slice
// [pc, pc+kc): op(B)'s part is packed in bp, op(A)'s is packed into ap
// nativeMC rows at a time. The first k slice applies beta, later ones add.
func (g *nativeGemm) block(ap, bp []float32, i0, i1, jc, nc, pc, kc int) {
	beta := g.beta
	if pc > 0 {
		beta = 1
	}
	var tile [nativeMR * nativeNR]float32
	for ic := i0; ic < i1; ic += nativeMC {
		mc := min(nativeMC, i1-ic)
		g.packA(ap, ic, mc, pc, kc)
		for jr := 0; jr < nc; jr += nativeNR {
			nr := min(nativeNR, nc-jr)
			bpan := bp[jr*kc : (jr+nativeNR)*kc]
			for ir := 0; ir < mc; ir += nativeMR {
				mr := min(nativeMR, mc-ir)
				off := (ic+ir)*g.ldc + jc + jr
				if g.kern12 != nil && nr == nativeNR && ir+2*nativeMR <= mc {
					g.kern12(kc, ap[ir*kc:(ir+2*nativeMR)*kc], bpan, g.c[off:], g.ldc, g.alpha, beta)
					ir += nativeMR
					continue
				}
				apan := ap[ir*kc : (ir+nativeMR)*kc]
				if mr == nativeMR && nr == nativeNR {
					g.kern(kc, apan, bpan, g.c[off:], g.ldc, g.alpha, beta)
					continue
				}
				g.kern(kc, apan, bpan, tile[:], nativeNR, 1, 0)
				nativeMerge(mr, nr, &tile, g.c[off:], g.ldc, g.alpha, beta)
			}
		}
		if g.done != nil && pc+kc == g.k {
			g.done(ic, ic+mc, jc, jc+nc)
		}
	}
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// nativeMerge stores the mr×nr corner of a scratch tile into C, rounding
// exactly as the kernels do in place.
func nativeMerge(mr, nr int, tile *[nativeMR * nativeNR]float32, c []float32, ldc int, alpha, beta float32) {
	for i := range mr {
		t := tile[i*nativeNR : i*nativeNR+nr]
		row := c[i*ldc : i*ldc+nr]
		if beta == 0 {
			for j, v := range t {
				row[j] = alpha * v
			}
			continue
		}
		for j, v := range t {
			// The conversions forbid fusing into an FMA.
			row[j] = float32(alpha*v) + float32(beta*row[j])
		}
	}
}

// packA packs rows [ic, ic+mc) × k-columns [pc, pc+kc) of op(A) into
// micro-panels of nativeMR rows: ap[(ir/MR)·MR·kc + p·MR + r] =
// op(A)[ic+ir+r][pc+p], rows past mc zero-filled.
func (g *nativeGemm) packA(ap []float32, ic, mc, pc, kc int) {
	a, lda := g.a, g.lda
	for ir := 0; ir < mc; ir += nativeMR {
		mr := min(nativeMR, mc-ir)
		dst := ap[ir*kc : (ir+nativeMR)*kc]
		i := ic + ir
		switch {
		case g.transA:
			// op(A)[i][p] = a[p·lda+i]: mr contiguous floats per p.
			for p := range kc {
				d := (*[nativeMR]float32)(dst[p*nativeMR:])
				src := a[(pc+p)*lda+i:]
				if mr == nativeMR {
					// Element by element: an array assignment through
					// pointers is a call to memmove, most of the time here.
					s := (*[nativeMR]float32)(src)
					d[0], d[1], d[2], d[3], d[4], d[5] = s[0], s[1], s[2], s[3], s[4], s[5]
					continue
				}
				*d = [nativeMR]float32{}
				copy(d[:], src[:mr])
			}
		case mr == nativeMR:
			g.packA6(dst, a[i*lda+pc:], lda, kc)
		default:
			// op(A)[i][p] = a[i·lda+p]: row r is contiguous in p.
			clear(dst)
			for r := range mr {
				src := a[(i+r)*lda+pc : (i+r)*lda+pc+kc]
				for p, v := range src {
					dst[p*nativeMR+r] = v
				}
			}
		}
	}
}

// packB packs k-rows [pc, pc+kc) × columns [jc, jc+nc) of op(B) into
// micro-panels of nativeNR columns: bp[(jr/NR)·NR·kc + p·NR + j] =
// op(B)[pc+p][jc+jr+j], columns past nc zero-filled. A loaded B is read
// strip by strip (packStrip).
func (g *nativeGemm) packB(bufs *nativeBuffers, bp []float32, pc, kc, jc, nc int) {
	if g.load == nil {
		g.packBFrom(bp, g.b, g.ldb, pc, kc, jc, nc)
		return
	}
	strip := g.strip()
	for j0 := 0; j0 < nc; j0 += strip {
		g.packStrip(bufs, bp[j0*kc:], pc, kc, jc+j0, min(strip, nc-j0))
	}
}

// strip is how many columns of op(B) packStrip takes at a time: a
// multiple of nativeNR, so that strips start on micro-panels.
func (g *nativeGemm) strip() int {
	if g.transB {
		return nativeNR
	}
	return nativeLoadStrip
}

// packStrip loads k-rows [pc, pc+kc) × columns [j, j+w) of op(B), w at
// most strip(), into bufs.w and packs them at bp as packB does.
func (g *nativeGemm) packStrip(bufs *nativeBuffers, bp []float32, pc, kc, j, w int) {
	s := nativeAlign(&bufs.w, kc*w)
	if g.transB { // op(B)[p][j] = b[j·ldb+p]: w rows of kc
		for jj := range w {
			g.load(s[jj*kc:(jj+1)*kc], (j+jj)*g.ldb+pc)
		}
		g.packBFrom(bp, s, kc, 0, kc, 0, w)
		return
	}
	for p := range kc { // op(B)[p][j] = b[p·ldb+j]: kc rows of w
		g.load(s[p*w:(p+1)*w], (pc+p)*g.ldb+j)
	}
	g.packBFrom(bp, s, w, 0, kc, 0, w)
}

// packLoadedShared packs the k slices [p0, p1) × columns [jc, jc+nc) of a
// loaded op(B) into bp as parallelRows lays them out (k slice pc at
// bp[(pc-p0)·ncMax:]), the strips dealt out to workers goroutines: loading
// (dequantizing, widening) costs more than copying, and done by the
// caller alone it would leave the other workers idle.
func (g *nativeGemm) packLoadedShared(workers int, bp []float32, ncMax, p0, p1, jc, nc int) {
	strip := g.strip()
	perSlice := (nc + strip - 1) / strip
	slices := (p1 - p0 + g.kc - 1) / g.kc
	units := slices * perSlice
	var next atomic.Int64
	nativeParallel(min(workers, units), func() {
		var bufs *nativeBuffers
		for {
			u := int(next.Add(1)) - 1
			if u >= units {
				break
			}
			if bufs == nil {
				bufs = nativePool.Get().(*nativeBuffers)
			}
			pc := p0 + u/perSlice*g.kc
			kc := min(g.kc, g.k-pc)
			j0 := u % perSlice * strip
			g.packStrip(bufs, bp[(pc-p0)*ncMax+j0*kc:], pc, kc, jc+j0, min(strip, nc-j0))
		}
		if bufs != nil {
			nativePool.Put(bufs)
		}
	})
}

// packBFrom is packB from the float32 matrix b with leading dimension ldb.
func (g *nativeGemm) packBFrom(bp, b []float32, ldb, pc, kc, jc, nc int) {
	for jr := 0; jr < nc; jr += nativeNR {
		nr := min(nativeNR, nc-jr)
		dst := bp[jr*kc : (jr+nativeNR)*kc]
		j := jc + jr
		switch {
		case !g.transB && nr == nativeNR:
			// op(B)[p][j] = b[p·ldb+j]: sixteen contiguous floats per p.
			g.packB16(dst, b[pc*ldb+j:], ldb, kc)
		case !g.transB:
			for p := range kc {
				d := (*[nativeNR]float32)(dst[p*nativeNR:])
				*d = [nativeNR]float32{}
				copy(d[:], b[(pc+p)*ldb+j:][:nr])
			}
		case nr == nativeNR:
			g.packBT16(dst, b[j*ldb+pc:], ldb, kc)
		default:
			// op(B)[p][j] = b[j·ldb+p]: column j of op(B) is contiguous in p.
			clear(dst)
			for jj := range nr {
				src := b[(j+jj)*ldb+pc : (j+jj)*ldb+pc+kc]
				for p, v := range src {
					dst[p*nativeNR+jj] = v
				}
			}
		}
	}
}

// nativePackA6Go is nativeImpl.packA6 in Go.
func nativePackA6Go(dst, a []float32, lda, kc int) {
	r0 := a[0*lda:][:kc]
	r1 := a[1*lda:][:kc]
	r2 := a[2*lda:][:kc]
	r3 := a[3*lda:][:kc]
	r4 := a[4*lda:][:kc]
	r5 := a[5*lda:][:kc]
	dst = dst[:kc*nativeMR]
	for p := range r0 {
		d := (*[nativeMR]float32)(dst[p*nativeMR:])
		d[0], d[1], d[2], d[3], d[4], d[5] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p]
	}
}

// nativePackB16Go is nativeImpl.packB16 in Go: element by element (a
// copy of a [16]float32 compiles to a memmove call per row).
func nativePackB16Go(dst, b []float32, ldb, kc int) {
	dst = dst[:kc*nativeNR]
	for p := range kc {
		d := (*[nativeNR]float32)(dst[p*nativeNR:])
		s := (*[nativeNR]float32)(b[p*ldb:])
		d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7] = s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]
		d[8], d[9], d[10], d[11], d[12], d[13], d[14], d[15] = s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15]
	}
}

// nativePackBT16Go is nativeImpl.packBT16 in Go, four rows of b at a time.
func nativePackBT16Go(dst, b []float32, ldb, kc int) {
	dst = dst[:kc*nativeNR]
	for j := 0; j < nativeNR; j += 4 {
		r0 := b[(j+0)*ldb:][:kc]
		r1 := b[(j+1)*ldb:][:kc]
		r2 := b[(j+2)*ldb:][:kc]
		r3 := b[(j+3)*ldb:][:kc]
		for p := range r0 {
			d := (*[4]float32)(dst[p*nativeNR+j:])
			d[0], d[1], d[2], d[3] = r0[p], r1[p], r2[p], r3[p]
		}
	}
}

// nativePortable is the plain-Go kernel. It walks the 6×16 tile in 2×4
// blocks whose eight sums stay in registers over the whole k slice.
func nativePortable(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	var acc [nativeMR][nativeNR]float32
	a = a[:kc*nativeMR]
	b = b[:kc*nativeNR]
	for i := 0; i < nativeMR; i += 2 {
		for j := 0; j < nativeNR; j += 4 {
			var c00, c01, c02, c03, c10, c11, c12, c13 float32
			for p := range kc {
				ap := (*[2]float32)(a[p*nativeMR+i:])
				bp := (*[4]float32)(b[p*nativeNR+j:])
				a0, a1 := ap[0], ap[1]
				b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
				c00 += a0 * b0
				c01 += a0 * b1
				c02 += a0 * b2
				c03 += a0 * b3
				c10 += a1 * b0
				c11 += a1 * b1
				c12 += a1 * b2
				c13 += a1 * b3
			}
			acc[i][j], acc[i][j+1], acc[i][j+2], acc[i][j+3] = c00, c01, c02, c03
			acc[i+1][j], acc[i+1][j+1], acc[i+1][j+2], acc[i+1][j+3] = c10, c11, c12, c13
		}
	}
	for i := range nativeMR {
		row := c[i*ldc : i*ldc+nativeNR]
		if beta == 0 {
			for j, v := range acc[i] {
				row[j] = alpha * v
			}
			continue
		}
		for j, v := range acc[i] {
			// The conversions forbid fusing into an FMA.
			row[j] = float32(alpha*v) + float32(beta*row[j])
		}
	}
}
