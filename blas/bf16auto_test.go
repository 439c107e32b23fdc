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
