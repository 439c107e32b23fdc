package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// SgemmFinish computes what Sgemm computes and calls done on disjoint
// blocks covering C exactly once, each after its values are final: done
// here negates its block, so a block called early, twice or never leaves
// a value that differs from Sgemm's.
func TestNativeSgemmFinish(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for kname, impl := range nativeImpls(t) {
		for _, s := range []struct {
			tA, tB  bool
			m, n, k int
			beta    float32
			workers int
		}{
			{false, true, 301, 203, 700, 0, 1},
			{false, true, 301, 203, 700, 0, 3},   // by rows, k in three slices
			{true, false, 12, 1100, 600, 0.5, 2}, // by columns, past NC
			{false, false, 250, 1030, 300, 1, 2}, // by rows, past NC
			{true, true, 255, 70, 1000, -0.5, 7},
			{false, true, 150, 1030, 1030, 1, 2}, // op(B) shared in two k spans
			{false, false, 5, 7, 0, 0.5, 1},      // k = 0: C = beta·C
		} {
			tc := newNativeCase(rng, s.tA, s.tB, s.m, s.n, s.k, 1, 0.75, s.beta)
			tc.checkFinish(t, kname, impl, s.workers)
		}
	}
}

// checkFinish runs tc through nativeSgemmFinish with a done that negates
// its block and records it: every element must be finished exactly once
// and, negated back, be Sgemm's bits.
func (tc *nativeCase) checkFinish(t *testing.T, kname string, impl *nativeImpl, workers int) {
	t.Helper()
	ref := tc.run(impl, workers)
	got := append([]float32(nil), tc.c...)
	blocks := newDoneBlocks(tc.m, tc.n)
	nativeSgemmFinish(impl, nativeSplit{workers: workers}, tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, got, tc.ldc, func(i0, i1, j0, j1 int) {
		for i := i0; i < i1; i++ {
			for j := j0; j < j1; j++ {
				got[i*tc.ldc+j] = -got[i*tc.ldc+j]
			}
		}
		blocks.done(i0, i1, j0, j1)
	})
	blocks.check(t, fmt.Sprintf("%s %v", kname, tc))
	for i := range tc.m {
		for j := range tc.n {
			if g, w := math.Float32bits(-got[i*tc.ldc+j]), math.Float32bits(ref[i*tc.ldc+j]); g != w {
				t.Fatalf("%s %v: C[%d][%d] = %v, Sgemm gave %v", kname, tc, i, j, -got[i*tc.ldc+j], ref[i*tc.ldc+j])
			}
		}
	}
}

// SgemmWiden on 16-bit B gives the bits of SgemmFinish on B widened to
// float32 beforehand, with done covering C once: for bf16 and fp16 bits,
// both layouts of B, padded rows, and products split by rows (B packed
// once for all workers, past nativeNC and in several k spans) and by
// columns (each worker widening its own blocks).
func TestNativeSgemmWiden(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for kname, impl := range nativeImpls(t) {
		for _, f := range []amp.Format{amp.BF16, amp.FP16} {
			for _, s := range []struct {
				tA, tB  bool
				m, n, k int
				pad     int
				workers int
			}{
				{false, true, 301, 203, 700, 0, 1},
				{false, true, 301, 203, 700, 3, 3},
				{false, false, 250, 1030, 300, 0, 2}, // by rows, past NC
				{true, false, 12, 1100, 600, 5, 2},   // by columns
				{false, true, 150, 1030, 1030, 0, 2}, // op(B) shared in two k spans
				{false, false, 7, 5, 33, 1, 1},
			} {
				tc := newNativeCase(rng, s.tA, s.tB, s.m, s.n, s.k, s.pad, 1, 0)
				bits := make([]uint16, len(tc.b))
				for i, v := range tc.b {
					bits[i] = f.Bits16(v)
				}
				f.FromBits16Slice(tc.b, bits) // B now holds exactly the 16-bit values
				ref := append([]float32(nil), tc.c...)
				nativeSgemmFinish(impl, nativeSplit{workers: s.workers}, tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, ref, tc.ldc, func(int, int, int, int) {})
				got := append([]float32(nil), tc.c...)
				blocks := newDoneBlocks(s.m, s.n)
				nativeSgemmWiden(impl, nativeSplit{workers: s.workers}, tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, bits, f.FromBits16Slice, tc.ldb, tc.beta, got, tc.ldc, blocks.done)
				blocks.check(t, fmt.Sprintf("%s %v %v", kname, f, tc))
				for i := range s.m {
					for j := range s.n {
						if g, w := math.Float32bits(got[i*tc.ldc+j]), math.Float32bits(ref[i*tc.ldc+j]); g != w {
							t.Fatalf("%s %v %v: C[%d][%d] = %v, SgemmFinish on the widened B gave %v", kname, f, tc, i, j, got[i*tc.ldc+j], ref[i*tc.ldc+j])
						}
					}
				}
			}
		}
	}
}

// doneBlocks records which elements of an m×n C the done callbacks of a
// Finisher covered, from any goroutine.
type doneBlocks struct {
	mu   sync.Mutex
	n    int
	seen []int
}

func newDoneBlocks(m, n int) *doneBlocks { return &doneBlocks{n: n, seen: make([]int, m*n)} }

func (d *doneBlocks) done(i0, i1, j0, j1 int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := i0; i < i1; i++ {
		for j := j0; j < j1; j++ {
			d.seen[i*d.n+j]++
		}
	}
}

// check fails unless every element was finished exactly once.
func (d *doneBlocks) check(t *testing.T, what string) {
	t.Helper()
	for idx, times := range d.seen {
		if times != 1 {
			t.Fatalf("%s: C[%d][%d] finished %d times", what, idx/d.n, idx%d.n, times)
		}
	}
}

// SgemmLoad reads B only through load, in runs inside one stored row of
// B, and gives the bits of SgemmFinish on B loaded whole, with done
// covering C once: both layouts of B, padded rows, products split by rows
// (the shared panel loaded by several workers, past nativeNC and in
// several k spans) and by columns, strips cut short at the edge of op(B).
func TestNativeSgemmLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	for kname, impl := range nativeImpls(t) {
		for _, s := range []struct {
			tA, tB  bool
			m, n, k int
			pad     int
			workers int
		}{
			{false, true, 301, 203, 700, 0, 1},
			{false, true, 301, 203, 700, 3, 3},
			{false, false, 250, 1030, 300, 0, 2}, // by rows, past NC
			{false, false, 250, 1030, 300, 7, 4},
			{true, false, 12, 1100, 600, 5, 2}, // by columns
			{false, true, 150, 1030, 1030, 0, 2},
			{false, false, 150, 300, 1030, 2, 3}, // op(B) shared in several k spans
			{false, false, 7, 5, 33, 1, 1},
			{false, true, 5, 7, 0, 0, 1}, // k = 0
		} {
			tc := newNativeCase(rng, s.tA, s.tB, s.m, s.n, s.k, s.pad, 1, 0)
			// B as load reads it: each stored value v as v/8 rounded to a
			// multiple of 2^-12, so that a load that ignored the function
			// (reading tc.b) would differ
			loaded := make([]float32, len(tc.b))
			for i, v := range tc.b {
				loaded[i] = float32(math.Round(float64(v)/8*4096) / 4096)
			}
			ref := append([]float32(nil), tc.c...)
			nativeSgemmFinish(impl, nativeSplit{workers: s.workers}, tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, loaded, tc.ldb, tc.beta, ref, tc.ldc, func(int, int, int, int) {})
			var bad sync.Once
			var badRun string
			load := func(dst []float32, off int) {
				if off < 0 || off+len(dst) > len(tc.b) || (len(dst) > 0 && off/tc.ldb != (off+len(dst)-1)/tc.ldb) {
					bad.Do(func() { badRun = fmt.Sprintf("[%d, %d)", off, off+len(dst)) })
					return
				}
				for i := range dst {
					dst[i] = float32(math.Round(float64(tc.b[off+i])/8*4096) / 4096)
				}
			}
			got := append([]float32(nil), tc.c...)
			blocks := newDoneBlocks(s.m, s.n)
			nativeSgemmLoad(impl, nativeSplit{workers: s.workers}, tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, load, len(tc.b), tc.ldb, tc.beta, got, tc.ldc, blocks.done)
			if badRun != "" {
				t.Fatalf("%s %v: load asked for %s, not a run inside one row of B", kname, tc, badRun)
			}
			blocks.check(t, fmt.Sprintf("%s %v", kname, tc))
			for i := range s.m {
				for j := range s.n {
					if g, w := math.Float32bits(got[i*tc.ldc+j]), math.Float32bits(ref[i*tc.ldc+j]); g != w {
						t.Fatalf("%s %v: C[%d][%d] = %v, SgemmFinish on the loaded B gave %v", kname, tc, i, j, got[i*tc.ldc+j], ref[i*tc.ldc+j])
					}
				}
			}
		}
	}
}
