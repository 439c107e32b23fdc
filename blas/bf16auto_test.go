package blas

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// widenBF16 is a bf16 GEMM that widens its operands and runs Native's
// Sgemm: something to compare with the emulation on any CPU.
type widenBF16 struct{}

func (widenBF16) Name() string { return "widen to native fp32" }

func (widenBF16) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	af, bf := make([]float32, len(a)), make([]float32, len(b))
	amp.BF16.FromBits16Slice(af, a)
	amp.BF16.FromBits16Slice(bf, b)
	Native{Workers: 1}.Sgemm(transA, transB, m, n, k, alpha, af, lda, bf, ldb, beta, c, ldc)
}

// TestMeasureBF16Cache: the comparison is measured once and then read
// from the cache with the same figures; CacheOff writes nothing; a busy
// machine's figures are not cached.
func TestMeasureBF16Cache(t *testing.T) {
	if testing.Short() {
		t.Skip("times the calibration products (seconds)")
	}
	dir := t.TempDir()
	env := func(string) string { return "" }
	off, _ := MeasureBF16(Native{Workers: 1}, widenBF16{}, 1, AutoOptions{Cache: CacheOff, Dir: dir, Getenv: env})
	if off.Emulate <= 0 || off.Hardware <= 0 || !strings.Contains(off.Source, "not cached") {
		t.Fatalf("CacheOff: %+v", off)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("CacheOff wrote %d files", len(files))
	}
	// a machine whose CPU time says it was busy: measured, not cached
	idle := func() float64 { return 0 }
	busy, w := measureBF16(Native{Workers: 1}, widenBF16{}, 1, AutoOptions{Dir: dir, Getenv: env}, idle)
	if !strings.Contains(busy.Source, "busy machine, not cached") || len(w) != 1 {
		t.Fatalf("no CPU time used: %+v, %q; want a busy machine's figures, not cached", busy, w)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("a busy measurement wrote %d files", len(files))
	}
	unknown := func() float64 { return -1 } // quiet as far as the check goes
	first, _ := measureBF16(Native{Workers: 1}, widenBF16{}, 1, AutoOptions{Dir: dir, Getenv: env}, unknown)
	files, _ := filepath.Glob(filepath.Join(dir, "bf16-*.json"))
	if len(files) != 1 || !strings.Contains(first.Source, "cached "+files[0]) {
		t.Fatalf("first measurement %+v, cache files %v", first, files)
	}
	again, _ := MeasureBF16(Native{Workers: 1}, widenBF16{}, 1, AutoOptions{Dir: dir, Getenv: env})
	if again.Emulate != first.Emulate || again.Hardware != first.Hardware || again.Source != "cached "+files[0] {
		t.Fatalf("second call %+v, want the cached %+v", again, first)
	}
	// another thread count is another machine as far as the cache goes
	other, _ := MeasureBF16(Native{Workers: 2}, widenBF16{}, 2, AutoOptions{Cache: CacheOff, Dir: dir, Getenv: env})
	if strings.HasPrefix(other.Source, "cached") {
		t.Fatalf("2 threads read the 1-thread cache: %+v", other)
	}
}

// offByOneBF16 is a bf16 GEMM with a planted fault: it drops the last
// term of every sum, as a kernel mishandling a k tail would.
type offByOneBF16 struct{ widenBF16 }

func (offByOneBF16) Name() string { return "drops the last k" }

func (offByOneBF16) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	widenBF16{}.GemmBF16(transA, transB, m, n, k-1, alpha, a, lda, b, ldb, beta, c, ldc)
}

// amxDropsLastStep is the AMX driver with a planted fault in its kernel:
// the last 16 pairs of every k slice are left out, as a kernel
// mishandling its loop count would.
func amxDropsLastStep(workers int) *NativeBF16 {
	nb := NewNativeAMXGo(workers)
	nb.name = "AMX driver dropping a k step"
	nb.micro.kern = func(kcp int, a, b []uint32, acc, c []float32, ldc int, alpha, beta float32, mode int) {
		if kcp > amxKStep {
			aa := make([]uint32, amxMR*(kcp-amxKStep)) // op(A)'s rows, shortened
			for r := 0; r < amxMR; r++ {
				copy(aa[r*(kcp-amxKStep):], a[r*kcp:r*kcp+kcp-amxKStep])
			}
			a, kcp = aa, kcp-amxKStep
		}
		amxModelKernel(kcp, a, b, acc, c, ldc, alpha, beta, mode)
	}
	return nb
}

// TestMeasureBF16RefusesWrongProducts: a bf16 GEMM is checked against
// float64 before it is timed or read from the cache; one giving wrong
// products (a GEMM dropping a term; the AMX driver on a kernel dropping a
// k step) is never faster than the emulation, and says why; correct ones
// (widening, and the native driver on the Go models of VDPBF16PS and of
// TDPBF16PS, both ways nn calls it) pass the check.
func TestMeasureBF16RefusesWrongProducts(t *testing.T) {
	for _, g := range []BF16Gemmer{widenBF16{}, NewNativeBF16Go(3), NewNativeAMXGo(3)} {
		if err := CheckBF16(g); err != nil {
			t.Errorf("%s: %v", g.Name(), err)
		}
	}
	for _, g := range []BF16Gemmer{offByOneBF16{}, amxDropsLastStep(2)} {
		s, w := MeasureBF16(Native{Workers: 1}, g, 1, AutoOptions{Cache: CacheUse, Dir: t.TempDir(), Getenv: func(string) string { return "" }})
		if s.Faster() || !strings.Contains(s.Source, "checked:") || len(w) != 1 || !strings.Contains(w[0], "wrong products") {
			t.Fatalf("%s: %+v, warnings %q; want it refused before timing", g.Name(), s, w)
		}
	}
}
