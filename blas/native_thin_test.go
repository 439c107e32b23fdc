package blas

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// thinShapes are products that take the thin paths: LoRA's (rank 8 and
// 16 against 256 features over 1,024 tokens, and the d×r gradient over
// all of them), attention's head-dim-wide products, and the edges: C one
// column wide, one and two micro-panels, a ragged last panel, a last row
// tile of 1..5 rows, k of one element and across k slices.
var thinShapes = []struct {
	m, n, k int
	path    string // "N" or "M": which thin path takes it
}{
	{1024, 8, 256, "N"}, {256, 8, 1024, "N"}, {128, 32, 128, "N"}, {256, 64, 64, "N"},
	{6, 1, 1, "N"}, {7, 16, 3, "N"}, {13, 17, 257, "N"}, {61, 33, 600, "N"}, {40, 64, 5, "N"}, {150, 20, 7, "N"},
	{8, 256, 1024, "M"}, {9, 256, 300, "M"},
	{16, 256, 1024, "M"}, {18, 40, 7, "M"}, {1, 16, 5, "M"}, {5, 17, 1, "M"}, {6, 40, 300, "M"}, {12, 100, 600, "M"}, {11, 65, 257, "M"},
}

// TestNativeThinBits: the thin paths give the blocked path's bits, which
// TestNativeSgemm checks against float64: each element of C is summed by
// the same kernel arithmetic over the same k slices in the same order.
// Every transpose (the thin-M path takes only op(B) = B, the thin-N path
// C wider than a panel only with op(A) = Aᵀ; the other cases run the
// blocked path twice and are not counted), padded strides, alpha and beta, 1 and 3 workers (the
// big shapes really split).
func TestNativeThinBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for kname, impl := range nativeImpls(t) {
		taken := map[string]int{}
		for _, s := range thinShapes {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					for _, pad := range []int{0, 3} {
						for _, ab := range [][2]float32{{1, 0}, {0.75, 1}, {-1.5, 0.5}} {
							tc := newNativeCase(rng, tA, tB, s.m, s.n, s.k, pad, ab[0], ab[1])
							g := &nativeGemm{nativeImpl: impl, transA: tA, transB: tB}
							switch {
							case s.path == "N" && g.thinN(s.m, s.n):
								taken["N"]++
							case s.path == "M" && g.thinM(s.m, s.n):
								taken["M"]++
							case s.path == "N" && (s.n <= nativeNR || tA) || s.path == "M" && !tB:
								t.Fatalf("%s %v: does not take the thin-%s path", kname, tc, s.path)
							}
							want := append([]float32(nil), tc.c...)
							nativeSgemm(impl, nativeSplit{workers: 1, blocked: true}, tA, tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, want, tc.ldc)
							for _, w := range []int{1, 3} {
								got := tc.run(impl, w)
								for i := range got {
									if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(got[i])) && math.IsNaN(float64(want[i]))) {
										t.Fatalf("%s %v workers=%d: C[%d] = %v, the blocked path gave %v", kname, tc, w, i, got[i], want[i])
									}
								}
							}
						}
					}
				}
			}
		}
		if taken["N"] == 0 || taken["M"] == 0 {
			t.Fatalf("%s: thin paths taken %v", kname, taken)
		}
	}
}

// TestNativeThinSplit: big thin products use every worker they are
// given, small ones one, as the blocked path's policy says.
func TestNativeThinSplit(t *testing.T) {
	for _, s := range []struct {
		m, n, k, workers, want int
	}{
		{1024, 8, 256, 2, 2}, {1024, 8, 256, 1, 1}, {256, 8, 1024, 3, 3},
		{8, 256, 1024, 2, 2}, {8, 40, 64, 2, 1}, // 3 panels: fewer than 4 per worker
		{30, 8, 16, 2, 1}, // 5 row tiles
	} {
		a := make([]float32, s.m*s.k)
		b := make([]float32, s.k*s.n)
		c := make([]float32, s.m*s.n)
		if got := nativeSgemm(nativeBest, nativeSplit{workers: s.workers}, false, false, s.m, s.n, s.k, 1, a, s.k, b, s.n, 0, c, s.n); got != s.want {
			t.Errorf("%dx%dx%d with %d workers used %d goroutines, want %d", s.m, s.n, s.k, s.workers, got, s.want)
		}
	}
}

// TestNativeThinFinish: on the thin paths, done covers C exactly once,
// after its values are final, and a loaded (widened) B gives the bits of
// B widened beforehand.
func TestNativeThinFinish(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for kname, impl := range nativeImpls(t) {
		for _, s := range []struct {
			tA, tB  bool
			m, n, k int
			workers int
		}{
			{false, true, 1024, 8, 256, 2}, {true, false, 256, 40, 700, 3}, {false, false, 13, 17, 5, 1},
			{true, false, 8, 256, 600, 2}, {false, false, 11, 65, 257, 1},
		} {
			tc := newNativeCase(rng, s.tA, s.tB, s.m, s.n, s.k, 1, 0.75, 0.5)
			tc.checkFinish(t, kname, impl, s.workers)

			bits := make([]uint16, len(tc.b))
			for i, v := range tc.b {
				bits[i] = amp.BF16.Bits16(v)
			}
			amp.BF16.FromBits16Slice(tc.b, bits)
			want := tc.run(impl, 1)
			wide := append([]float32(nil), tc.c...)
			nativeSgemmWiden(impl, nativeSplit{workers: s.workers}, tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, bits, amp.BF16.FromBits16Slice, tc.ldb, tc.beta, wide, tc.ldc, nil)
			for i := range want {
				if math.Float32bits(wide[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s %v: widened B: C[%d] = %v, B widened beforehand gave %v", kname, tc, i, wide[i], want[i])
				}
			}
		}
	}
}

// TestNativeStridedKernel: each implementation's strided kernel gives
// the bits of packing the panels and calling its packed kernel, reading
// op(A) by rows, transposed and packed, op(B) at any row stride, and
// writes nothing of C outside the tile.
func TestNativeStridedKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	const ldc = nativeNR + 3
	for kname, impl := range nativeImpls(t) {
		ref := nativeStridedVia(impl.kern)
		for _, kc := range []int{1, 2, 3, 8, 63, 256} {
			for _, st := range [][3]int{{1, nativeMR, nativeNR}, {kc + 2, 1, nativeNR + 5}, {1, nativeMR + 3, 40}} {
				aRow, aStep, bStep := st[0], st[1], st[2]
				a := randF32(rng, (nativeMR-1)*aRow+(kc-1)*aStep+1)
				b := randF32(rng, (kc-1)*bStep+nativeNR)
				for _, ab := range [][2]float32{{1, 0}, {0.3, 0}, {1.7, -0.6}} {
					c0 := randF32(rng, (nativeMR-1)*ldc+nativeNR)
					want, got := append([]float32(nil), c0...), append([]float32(nil), c0...)
					ref(kc, a, aRow, aStep, b, bStep, want, ldc, ab[0], ab[1])
					impl.kernStrided(kc, a, aRow, aStep, b, bStep, got, ldc, ab[0], ab[1])
					for i := range got {
						if j := i % ldc; j >= nativeNR && got[i] != c0[i] {
							t.Fatalf("%s kc=%d strides %v: wrote C[%d][%d] outside the tile", kname, kc, st, i/ldc, j)
						}
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s kc=%d strides %v alpha, beta %v: C[%d] = %v, packed %v", kname, kc, st, ab, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// BenchmarkNativeThin times the thin products of LoRA r=8 on 256
// features over 1,024 tokens (x·Aᵀ, dY·B, dB = dYᵀ·h, dA = dhᵀ·x) and
// attention's head-dim-wide products at 128 and 256 tokens, head dim 32
// and 64: Native's policy ("default": the thin paths where they apply;
// P·V, with A untransposed and C two or four panels wide, stays blocked)
// against the blocked path.
func BenchmarkNativeThin(b *testing.B) {
	type shape struct {
		name    string
		tA, tB  bool
		m, n, k int
	}
	for _, s := range []shape{
		{"LoRA-xAt", false, true, 1024, 8, 256}, {"LoRA-dh", false, false, 1024, 8, 256},
		{"LoRA-dB", true, false, 256, 8, 1024}, {"LoRA-dA", true, false, 8, 256, 1024},
		{"LoRA-r16-dA", true, false, 16, 256, 1024}, {"LoRA-r32-xAt", false, true, 1024, 32, 256},
		{"attn-PV-d32", false, false, 128, 32, 128}, {"attn-dK-d32", true, false, 128, 32, 128},
		{"attn-PV-d64", false, false, 256, 64, 256}, {"attn-dK-d64", true, false, 256, 64, 256},
	} {
		tc := newNativeCase(rand.New(rand.NewPCG(1, 2)), s.tA, s.tB, s.m, s.n, s.k, 0, 1, 0)
		flops := 2 * float64(s.m*s.n*s.k)
		for _, path := range []string{"default", "blocked"} {
			b.Run(s.name+"/"+path, func(b *testing.B) {
				split := nativeSplit{workers: 1, blocked: path == "blocked"}
				for b.Loop() {
					nativeSgemm(nativeBest, split, s.tA, s.tB, s.m, s.n, s.k, 1, tc.a, tc.lda, tc.b, tc.ldb, 0, tc.c, tc.ldc)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
