package blas

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The 12×16 kernel gives the bits of two 6×16 kernel calls, tile by tile
// (every k remainder of the unrolled loop, alpha and beta cases) and in
// whole products, where it replaces pairs of full tiles.
func TestNativeKernel12SameBits(t *testing.T) {
	if nativeAsm == nil || nativeAsm.kern12 == nil {
		t.Skip("no 12×16 kernel on this CPU")
	}
	impl := nativeAsm
	rng := rand.New(rand.NewPCG(13, 14))
	const ldc = nativeNR + 3
	for _, kc := range []int{1, 2, 3, 4, 5, 7, 8, 9, 64, 255, 256} {
		for _, ab := range [][2]float32{{1, 0}, {0.3, 0}, {1.7, -0.6}, {-1, 1}} {
			a, b := randF32(rng, 2*kc*nativeMR), randF32(rng, kc*nativeNR)
			c0 := randF32(rng, (2*nativeMR-1)*ldc+nativeNR)
			got, want := append([]float32(nil), c0...), append([]float32(nil), c0...)
			impl.kern12(kc, a, b, got, ldc, ab[0], ab[1])
			impl.kern(kc, a[:kc*nativeMR], b, want, ldc, ab[0], ab[1])
			impl.kern(kc, a[kc*nativeMR:], b, want[nativeMR*ldc:], ldc, ab[0], ab[1])
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("kc=%d alpha=%v beta=%v: C[%d] = %v, two 6×16 tiles give %v", kc, ab[0], ab[1], i, got[i], want[i])
				}
			}
		}
	}
	without := *impl
	without.kern12 = nil
	for _, s := range []struct {
		tA, tB  bool
		m, n, k int
		beta    float32
	}{
		{false, true, 301, 203, 700, 0},
		{true, false, 150, 1100, 600, 0.5},
		{false, false, 250, 1030, 300, 1},
		{true, true, 255, 70, 1000, -0.5},
		{false, true, 12, 16, 5, 0},
	} {
		tc := newNativeCase(rng, s.tA, s.tB, s.m, s.n, s.k, 2, 0.75, s.beta)
		for _, w := range []int{1, 2} {
			got, want := tc.run(impl, w), tc.run(&without, w)
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%v workers=%d: C[%d] = %v, without the 12×16 kernel %v", tc, w, i, got[i], want[i])
				}
			}
		}
	}
}
