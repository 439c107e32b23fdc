package blas

import "sync/atomic"

// Thin products. The LoRA adapters' products have one side of rank r (8,
// 16): x·Aᵀ and dY·B are m×r, dB = dYᵀ·h is d×r over all the tokens, dA
// = dhᵀ·x is r×d. The blocked path packs all of op(A) to compute an r-wide
// C from it (each packed element then feeds one micro-kernel call), or all
// of op(B) for one to three row tiles, so packing, not arithmetic, is most
// of their time. For these shapes the kernel reads the big operand where
// it lies instead (nativeStridedKernel) and only the small one is packed.
// Each element of C is still summed by the same kernel arithmetic over
// the same k slices in the same order, then rounded the same way: the
// bits of the blocked path, which TestNativeThinBits checks.

// nativeStridedKernel is nativeKernel reading op(A) and op(B) where they
// lie instead of packed: element (i, p) of op(A) at a[i·aRow + p·aStep],
// row p of op(B) (nativeNR floats) at b[p·bStep]. Packed micro-panels are
// aRow = 1, aStep = nativeMR, bStep = nativeNR.
type nativeStridedKernel func(kc int, a []float32, aRow, aStep int, b []float32, bStep int, c []float32, ldc int, alpha, beta float32)

// nativeStridedVia is a nativeStridedKernel that packs the panels not
// already packed and calls kern: the portable implementation's (the thin
// paths always pass one operand packed, so it gathers one panel a call,
// as the blocked path packs one), and the definition the assembly one is
// tested against.
func nativeStridedVia(kern nativeKernel) nativeStridedKernel {
	return func(kc int, a []float32, aRow, aStep int, b []float32, bStep int, c []float32, ldc int, alpha, beta float32) {
		var ap [nativeKC * nativeMR]float32
		var bp [nativeKC * nativeNR]float32
		pa, pb := ap[:kc*nativeMR], bp[:kc*nativeNR]
		if aRow == 1 && aStep == nativeMR {
			pa = a[:kc*nativeMR]
		} else {
			for p := range kc {
				for i := range nativeMR {
					pa[p*nativeMR+i] = a[i*aRow+p*aStep]
				}
			}
		}
		if bStep == nativeNR {
			pb = b[:kc*nativeNR]
		} else {
			for p := range kc {
				copy(pb[p*nativeNR:(p+1)*nativeNR], b[p*bStep:p*bStep+nativeNR])
			}
		}
		kern(kc, pa, pb, c, ldc, alpha, beta)
	}
}

// nativeThinPanels is the widest C, in micro-panels, that takes the
// thin-N path when op(A) = Aᵀ: each row tile of op(A) is then read where
// it lies once per panel (a k slice of it at a time, from L1) instead of
// being packed, which for a transposed A is a gather. An untransposed A
// takes the path only for C one panel wide: over several panels the
// packed copy pays for itself (BenchmarkNativeThin, attn-PV).
const nativeThinPanels = 4

// thinN reports whether compute should take the thin-N path.
func (g *nativeGemm) thinN(m, n int) bool {
	return g.kernStrided != nil && m >= nativeMR && (n <= nativeNR || g.transA && n <= nativeThinPanels*nativeNR)
}

// thinM reports whether compute should take the thin-M path: at most
// three row tiles (rank 16's 16 rows), at least one full panel of
// columns, and op(B) = B in memory (rows of op(B) contiguous, so a
// panel's row is read where it lies).
func (g *nativeGemm) thinM(m, n int) bool {
	return g.kernStrided != nil && m <= 3*nativeMR && n >= nativeNR && !g.transB && g.load == nil
}

// aAt is the index in g.a of op(A)'s element (i, p), with the strides
// from there to the next row (i+1) and the next k (p+1).
func (g *nativeGemm) aAt(i, p int) (at, row, step int) {
	if g.transA {
		return p*g.lda + i, 1, g.lda
	}
	return i*g.lda + p, g.lda, 1
}

// runThinN computes C (n ≤ nativeThinPanels·nativeNR) by row tiles, on
// up to workers goroutines (chunks of whole tiles), and returns how many
// it used. op(B) is packed once, all k slices; op(A) is read where it
// lies, except a last tile of fewer than nativeMR rows, which is packed
// (zero rows).
func (g *nativeGemm) runThinN(workers, m, n int) int {
	bufs := nativePool.Get().(*nativeBuffers)
	defer nativePool.Put(bufs)
	cols := roundUp(n, nativeNR)
	bp := nativeAlign(&bufs.b, g.k*cols) // k slice pc at bp[pc·cols:], panel jr at +jr·kc
	for pc := 0; pc < g.k; pc += g.kc {
		g.packB(bufs, bp[pc*cols:], pc, min(g.kc, g.k-pc), 0, n)
	}
	mt := (m + nativeMR - 1) / nativeMR
	return nativeChunked(workers, mt, func(t0, t1 int) {
		var tile [nativeMR * nativeNR]float32
		var ap []float32 // a packed last tile, from the pool
		for t := t0; t < t1; t++ {
			i0 := t * nativeMR
			mr := min(nativeMR, m-i0)
			if mr < nativeMR && ap == nil {
				pbufs := nativePool.Get().(*nativeBuffers)
				defer nativePool.Put(pbufs)
				ap = nativeAlign(&pbufs.a, g.kc*nativeMR)
			}
			for pc := 0; pc < g.k; pc += g.kc {
				kc := min(g.kc, g.k-pc)
				beta := g.beta
				if pc > 0 {
					beta = 1
				}
				at, row, step := g.aAt(i0, pc)
				if mr < nativeMR {
					g.packA(ap, i0, mr, pc, kc)
					at, row, step = 0, 1, nativeMR
				}
				a := g.a[at:]
				if mr < nativeMR {
					a = ap
				}
				for jr := 0; jr < n; jr += nativeNR {
					nr := min(nativeNR, n-jr)
					bpan := bp[pc*cols+jr*kc:]
					c := g.c[i0*g.ldc+jr:]
					if mr < nativeMR || nr < nativeNR {
						g.kernStrided(kc, a, row, step, bpan, nativeNR, tile[:], nativeNR, 1, 0)
						nativeMerge(mr, nr, &tile, c, g.ldc, g.alpha, beta)
						continue
					}
					g.kernStrided(kc, a, row, step, bpan, nativeNR, c, g.ldc, g.alpha, beta)
				}
			}
			if g.done != nil {
				g.done(i0, i0+mr, 0, n)
			}
		}
	})
}

// runThinM computes C (m ≤ 3·nativeMR) by panels of nativeNR columns, on
// up to workers goroutines (chunks of whole panels), and returns how many
// it used. op(A) is packed once, all k slices; op(B)'s full panels are
// read where they lie, a last narrower one is packed (zero columns).
func (g *nativeGemm) runThinM(workers, m, n int) int {
	bufs := nativePool.Get().(*nativeBuffers)
	defer nativePool.Put(bufs)
	rows := (m + nativeMR - 1) / nativeMR * nativeMR
	ap := nativeAlign(&bufs.a, g.k*rows) // k slice pc at ap[pc·rows:]
	for pc := 0; pc < g.k; pc += g.kc {
		g.packA(ap[pc*rows:], 0, m, pc, min(g.kc, g.k-pc))
	}
	nt := (n + nativeNR - 1) / nativeNR
	return nativeChunked(workers, nt, func(t0, t1 int) {
		var tile [nativeMR * nativeNR]float32
		var bp []float32 // a packed last panel, from the pool
		for t := t0; t < t1; t++ {
			j0 := t * nativeNR
			nr := min(nativeNR, n-j0)
			if nr < nativeNR && bp == nil {
				pbufs := nativePool.Get().(*nativeBuffers)
				defer nativePool.Put(pbufs)
				bp = nativeAlign(&pbufs.b, g.kc*nativeNR)
			}
			for i0 := 0; i0 < m; i0 += nativeMR {
				mr := min(nativeMR, m-i0)
				for pc := 0; pc < g.k; pc += g.kc {
					kc := min(g.kc, g.k-pc)
					beta := g.beta
					if pc > 0 {
						beta = 1
					}
					apan := ap[pc*rows+i0*kc:]
					c := g.c[i0*g.ldc+j0:]
					switch {
					case nr < nativeNR:
						g.packBFrom(bp, g.b, g.ldb, pc, kc, j0, nr)
						g.kern(kc, apan, bp, tile[:], nativeNR, 1, 0)
						nativeMerge(mr, nr, &tile, c, g.ldc, g.alpha, beta)
					case mr < nativeMR:
						g.kernStrided(kc, apan, 1, nativeMR, g.b[pc*g.ldb+j0:], g.ldb, tile[:], nativeNR, 1, 0)
						nativeMerge(mr, nr, &tile, c, g.ldc, g.alpha, beta)
					default:
						g.kernStrided(kc, apan, 1, nativeMR, g.b[pc*g.ldb+j0:], g.ldb, c, g.ldc, g.alpha, beta)
					}
				}
				if g.done != nil {
					g.done(i0, i0+mr, j0, j0+nr)
				}
			}
		}
	})
}

// nativeChunked runs body on chunks [lo, hi) of units (row tiles,
// column panels), nativeChunksPerWorker a worker claimed as the workers
// come free, as parallelRows deals its chunks; with fewer units than
// that, on the caller alone. It returns how many goroutines ran.
func nativeChunked(workers, units int, body func(lo, hi int)) int {
	chunks := nativeChunksPerWorker * workers
	if workers < 2 || units < chunks {
		body(0, units)
		return 1
	}
	var next atomic.Int64
	nativeParallel(workers, func() {
		for {
			ch := int(next.Add(1)) - 1
			if ch >= chunks {
				return
			}
			body(units*ch/chunks, units*(ch+1)/chunks)
		}
	})
	return workers
}
