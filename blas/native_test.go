package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// nativeImpls are the implementations this machine runs: the portable one
// always, the assembly one where the CPU has it.
func nativeImpls(t testing.TB) map[string]*nativeImpl {
	is := map[string]*nativeImpl{"portable": nativeGo}
	if nativeAsm != nil {
		is["asm"] = nativeAsm
	} else {
		t.Logf("no assembly kernel on this machine; only the portable one is tested")
	}
	return is
}

// nativeCase is one Sgemm call with tight slices: each matrix slice ends at
// its last element, so any read or write past it panics.
type nativeCase struct {
	tA, tB        bool
	m, n, k       int
	lda, ldb, ldc int
	alpha, beta   float32
	a, b, c       []float32
}

func newNativeCase(rng *rand.Rand, tA, tB bool, m, n, k, pad int, alpha, beta float32) *nativeCase {
	rowsA, colsA := m, k
	if tA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if tB {
		rowsB, colsB = n, k
	}
	tc := &nativeCase{tA: tA, tB: tB, m: m, n: n, k: k, alpha: alpha, beta: beta,
		lda: max(1, colsA+pad), ldb: max(1, colsB+pad), ldc: max(1, n+pad)}
	tc.a = randF32(rng, tight(rowsA, colsA, tc.lda))
	tc.b = randF32(rng, tight(rowsB, colsB, tc.ldb))
	tc.c = randF32(rng, tight(m, n, tc.ldc))
	if beta == 0 {
		// BLAS: beta == 0 overwrites C without reading it.
		for i := range m {
			for j := range n {
				tc.c[i*tc.ldc+j] = float32(math.NaN())
			}
		}
	}
	return tc
}

// tight is the shortest slice length holding a rows×cols matrix with row
// stride ld.
func tight(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

func randF32(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.Float64()*2 - 1)
	}
	return s
}

func (tc *nativeCase) String() string {
	return fmt.Sprintf("tA=%v/tB=%v/%dx%dx%d/ld=%d,%d,%d/alpha=%v/beta=%v", tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.lda, tc.ldb, tc.ldc, tc.alpha, tc.beta)
}

func (tc *nativeCase) run(impl *nativeImpl, workers int) []float32 {
	c, _ := tc.runUsed(impl, workers)
	return c
}

// runUsed also returns how many goroutines computed the product. It splits
// products of any size, as far as their tiles allow.
func (tc *nativeCase) runUsed(impl *nativeImpl, workers int) ([]float32, int) {
	c := append([]float32(nil), tc.c...)
	used := nativeSgemm(impl, nativeSplit{workers: workers}, tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, c, tc.ldc)
	return c, used
}

// check compares got with a float64 reference computed from the same
// float32 inputs. Each element may be off by 1e-6·√(k+1) times its scale
// |alpha|·Σ|a||b| + |beta·c|; elements of C outside the m×n matrix (the
// padding of strided rows) must be untouched, bit for bit.
func (tc *nativeCase) check(t *testing.T, name string, got []float32) {
	t.Helper()
	in := make([]bool, len(tc.c))
	at := func(i, p int) float64 {
		if tc.tA {
			return float64(tc.a[p*tc.lda+i])
		}
		return float64(tc.a[i*tc.lda+p])
	}
	bt := func(p, j int) float64 {
		if tc.tB {
			return float64(tc.b[j*tc.ldb+p])
		}
		return float64(tc.b[p*tc.ldb+j])
	}
	alpha, beta := float64(tc.alpha), float64(tc.beta)
	for i := range tc.m {
		for j := range tc.n {
			idx := i*tc.ldc + j
			in[idx] = true
			var s, mag float64
			for p := range tc.k {
				s += at(i, p) * bt(p, j)
				mag += math.Abs(at(i, p) * bt(p, j))
			}
			want, scale := alpha*s, math.Abs(alpha)*mag
			if beta != 0 {
				want += beta * float64(tc.c[idx])
				scale += math.Abs(beta * float64(tc.c[idx]))
			}
			g := float64(got[idx])
			if math.IsNaN(g) || math.Abs(g-want) > 1e-6*math.Sqrt(float64(tc.k+1))*scale {
				t.Fatalf("%s %v: C[%d][%d] = %v, want %v (scale %v)", name, tc, i, j, g, want, scale)
			}
		}
	}
	for idx := range got {
		if !in[idx] && math.Float32bits(got[idx]) != math.Float32bits(tc.c[idx]) {
			t.Fatalf("%s %v: C padding [%d] changed from %v to %v", name, tc, idx, tc.c[idx], got[idx])
		}
	}
}

// nativeSizes cover single elements, tile edges (6×16 tiles ±1), k-blocking
// (k past nativeKC, split in nearly equal slices), MC and NC blocking, and
// empty products.
var nativeSizes = [][3]int{
	{1, 1, 1}, {5, 15, 17}, {6, 16, 1}, {7, 17, 3}, {6, 16, 8}, {12, 32, 5}, {11, 31, 2}, {13, 33, 9},
	{18, 48, 256}, {19, 47, 257}, {5, 20, 600}, {150, 20, 7}, {2, 1030, 5}, {40, 1, 3}, {1, 40, 3},
	{4, 5, 0}, {0, 5, 3}, {5, 0, 3}, {0, 0, 0},
}

func TestNativeSgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	abs := [][2]float32{{1, 0}, {0.5, 1}, {-2, 0.25}, {1, 1}, {0, 2}, {0, 0}, {-1.5, -1}}
	for kname, impl := range nativeImpls(t) {
		for _, sz := range nativeSizes {
			for _, pad := range []int{0, 3} {
				for _, ab := range abs {
					for _, tA := range []bool{false, true} {
						for _, tB := range []bool{false, true} {
							tc := newNativeCase(rng, tA, tB, sz[0], sz[1], sz[2], pad, ab[0], ab[1])
							for _, w := range []int{1, 2} {
								tc.check(t, fmt.Sprintf("%s/workers=%d", kname, w), tc.run(impl, w))
							}
						}
					}
				}
			}
		}
	}
}

// TestNativeSgemmBackend runs the exported type, whichever kernel it picks,
// with the shapes the model uses (strided attention heads included).
func TestNativeSgemmBackend(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	be := Native{}
	for _, s := range []struct {
		tA, tB  bool
		m, n, k int
		pad     int
	}{
		{false, true, 64, 96, 80, 0}, {false, false, 64, 80, 96, 0}, {true, false, 96, 80, 64, 0}, {false, true, 37, 37, 32, 224},
	} {
		tc := newNativeCase(rng, s.tA, s.tB, s.m, s.n, s.k, s.pad, 1, 0)
		c := append([]float32(nil), tc.c...)
		be.Sgemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.a, tc.lda, tc.b, tc.ldb, tc.beta, c, tc.ldc)
		tc.check(t, be.Name(), c)
	}
	want := "native (Go, portable kernel)"
	if cpuHasAVX2FMA() {
		want = "native (Go, AVX2/FMA kernel)"
		if cpuHasAVX512F() {
			want = "native (Go, AVX-512/FMA kernel)"
		}
	}
	if be.Name() != want {
		t.Fatalf("Name() = %q, want %q", be.Name(), want)
	}
}

// TestNativeDeterminism: each element of C is summed in one fixed order, so
// the worker count cannot change a single bit. The shapes are big enough
// that every worker count really splits the product, by rows (op(B) packed
// once and shared) or by columns.
func TestNativeDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for kname, impl := range nativeImpls(t) {
		for _, s := range []struct {
			tA, tB  bool
			m, n, k int
			pad     int
			beta    float32
		}{
			{false, true, 301, 203, 700, 3, 0},   // by rows, k in three slices
			{true, false, 12, 1100, 600, 0, 0.5}, // by columns, past NC
			{false, false, 250, 1030, 300, 1, 1}, // by rows, past NC
			{true, true, 255, 70, 1000, 2, -0.5}, // by rows, edge tiles
			{false, true, 150, 1030, 1030, 0, 1}, // by rows (2, 3) or columns (7), op(B) shared in two k spans
		} {
			tc := newNativeCase(rng, s.tA, s.tB, s.m, s.n, s.k, s.pad, 0.75, s.beta)
			ref, used := tc.runUsed(impl, 1)
			if used != 1 {
				t.Fatalf("%s %v: workers=1 used %d goroutines", kname, tc, used)
			}
			tc.check(t, kname+"/workers=1", ref)
			for _, w := range []int{2, 3, 7} {
				got, used := tc.runUsed(impl, w)
				if used != w {
					t.Fatalf("%s %v: workers=%d used %d goroutines; the test needs a bigger product", kname, tc, w, used)
				}
				for i := range ref {
					if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
						t.Fatalf("%s %v: workers=%d C[%d] = %v, workers=1 gave %v", kname, tc, w, i, got[i], ref[i])
					}
				}
			}
		}
	}
}

// TestNativeSplitPolicy: Native's own policy keeps small products on one
// goroutine and splits large ones, by rows or, for few rows, by columns.
func TestNativeSplitPolicy(t *testing.T) {
	for _, s := range []struct {
		m, n, k, workers, want int
	}{
		{128, 128, 32, 2, 1},   // attention head: too small
		{128, 128, 96, 2, 1},   // below nativeParallelWork per worker
		{256, 256, 64, 2, 2},   // 4M multiply-adds: worth a second worker
		{1024, 256, 256, 2, 2}, // by rows
		{1024, 256, 256, 1, 1},
		{12, 2048, 1024, 2, 2}, // by columns
		{1024, 256, 256, 8, 8},
		{24, 24, 1 << 16, 8, 1}, // large k alone is never split
	} {
		a := make([]float32, s.m*s.k)
		b := make([]float32, s.k*s.n)
		c := make([]float32, s.m*s.n)
		if got := nativeSgemm(nativeBest, nativeSplit{workers: s.workers, minWork: nativeParallelWork}, false, false, s.m, s.n, s.k, 1, a, s.k, b, s.n, 0, c, s.n); got != s.want {
			t.Errorf("%dx%dx%d with %d workers used %d goroutines, want %d", s.m, s.n, s.k, s.workers, got, s.want)
		}
	}
}

// TestNativeKernels checks each kernel on one packed tile against float64,
// and that a tile computed into scratch (alpha = 1, beta = 0) and merged by
// nativeMerge is bit-identical to one computed in place: edge tiles and full
// tiles round the same.
func TestNativeKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const ldc = nativeNR + 5
	for kname, impl := range nativeImpls(t) {
		kern := impl.kern
		for _, kc := range []int{1, 2, 3, 4, 5, 7, 8, 9, 64, 255, 256} {
			for _, ab := range [][2]float32{{1, 0}, {0.3, 0}, {1.7, -0.6}, {-1, 1}} {
				a, b := randF32(rng, kc*nativeMR), randF32(rng, kc*nativeNR)
				c0 := randF32(rng, (nativeMR-1)*ldc+nativeNR)
				c := append([]float32(nil), c0...)
				if ab[1] == 0 {
					for i := range c {
						c[i] = float32(math.Inf(1))
					}
				}
				kern(kc, a, b, c, ldc, ab[0], ab[1])
				var tile [nativeMR * nativeNR]float32
				kern(kc, a, b, tile[:], nativeNR, 1, 0)
				merged := append([]float32(nil), c0...)
				nativeMerge(nativeMR, nativeNR, &tile, merged, ldc, ab[0], ab[1])
				for i := range nativeMR {
					for j := range ldc {
						idx := i*ldc + j
						if idx >= len(c) {
							break
						}
						if j >= nativeNR {
							if c[idx] != float32(math.Inf(1)) && c[idx] != c0[idx] {
								t.Fatalf("%s kc=%d: wrote C[%d][%d] outside the tile", kname, kc, i, j)
							}
							continue
						}
						var s float64
						for p := range kc {
							s += float64(a[p*nativeMR+i]) * float64(b[p*nativeNR+j])
						}
						want := float64(ab[0])*s + float64(ab[1])*float64(c0[idx])
						if d := math.Abs(float64(c[idx]) - want); !(d <= 1e-6*math.Sqrt(float64(kc+1))*(float64(kc)+2)) {
							t.Fatalf("%s kc=%d alpha=%v beta=%v: C[%d][%d] = %v, want %v", kname, kc, ab[0], ab[1], i, j, c[idx], want)
						}
						if math.Float32bits(c[idx]) != math.Float32bits(merged[idx]) {
							t.Fatalf("%s kc=%d alpha=%v beta=%v: C[%d][%d] in place %v, merged %v", kname, kc, ab[0], ab[1], i, j, c[idx], merged[idx])
						}
					}
				}
			}
		}
	}
}

// TestNativePacking compares each implementation's full-panel packing of
// non-transposed A and of transposed and non-transposed B with a plain
// reading of the matrices,
// for k lengths around the assembly's 8-column blocks.
func TestNativePacking(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for kname, impl := range nativeImpls(t) {
		for _, kc := range []int{1, 7, 8, 9, 15, 16, 17, 64, 255} {
			for _, pad := range []int{0, 5} {
				ld := kc + pad
				a := randF32(rng, tight(nativeMR, kc, ld))
				dst := randF32(rng, kc*nativeMR+1)
				last := dst[kc*nativeMR]
				impl.packA6(dst, a, ld, kc)
				for p := range kc {
					for r := range nativeMR {
						if dst[p*nativeMR+r] != a[r*ld+p] {
							t.Fatalf("%s packA6 kc=%d ld=%d: [%d·6+%d] = %v, want %v", kname, kc, ld, p, r, dst[p*nativeMR+r], a[r*ld+p])
						}
					}
				}
				if dst[kc*nativeMR] != last {
					t.Fatalf("%s packA6 kc=%d: wrote past the panel", kname, kc)
				}
				b := randF32(rng, tight(nativeNR, kc, ld))
				dst = randF32(rng, kc*nativeNR+1)
				last = dst[kc*nativeNR]
				impl.packBT16(dst, b, ld, kc)
				for p := range kc {
					for j := range nativeNR {
						if dst[p*nativeNR+j] != b[j*ld+p] {
							t.Fatalf("%s packBT16 kc=%d ld=%d: [%d·16+%d] = %v, want %v", kname, kc, ld, p, j, dst[p*nativeNR+j], b[j*ld+p])
						}
					}
				}
				if dst[kc*nativeNR] != last {
					t.Fatalf("%s packBT16 kc=%d: wrote past the panel", kname, kc)
				}
				b = randF32(rng, tight(kc, nativeNR, nativeNR+pad))
				dst = randF32(rng, kc*nativeNR+1)
				last = dst[kc*nativeNR]
				impl.packB16(dst, b, nativeNR+pad, kc)
				for p := range kc {
					for j := range nativeNR {
						if dst[p*nativeNR+j] != b[p*(nativeNR+pad)+j] {
							t.Fatalf("%s packB16 kc=%d ld=%d: [%d·16+%d] = %v, want %v", kname, kc, nativeNR+pad, p, j, dst[p*nativeNR+j], b[p*(nativeNR+pad)+j])
						}
					}
				}
				if dst[kc*nativeNR] != last {
					t.Fatalf("%s packB16 kc=%d: wrote past the panel", kname, kc)
				}
			}
		}
	}
}

func TestNativeBadArguments(t *testing.T) {
	f := make([]float32, 100)
	for _, tc := range []struct {
		name          string
		tA, tB        bool
		m, n, k       int
		la, lb, lc    int
		lda, ldb, ldc int
		want          string
	}{
		{"m<0", false, false, -1, 2, 2, 100, 100, 100, 2, 2, 2, "m = -1"},
		{"n<0", false, false, 2, -1, 2, 100, 100, 100, 2, 2, 2, "n = -1"},
		{"k<0", false, false, 2, 2, -1, 100, 100, 100, 2, 2, 2, "k = -1"},
		{"lda", false, false, 2, 3, 4, 100, 100, 100, 3, 3, 3, "bad lda = 3"},
		{"ldaT", true, false, 5, 3, 4, 100, 100, 100, 4, 3, 3, "bad lda = 4"},
		{"ldb", false, false, 2, 3, 4, 100, 100, 100, 4, 2, 3, "bad ldb = 2"},
		{"ldbT", false, true, 2, 3, 4, 100, 100, 100, 4, 3, 3, "bad ldb = 3"},
		{"ldc", false, false, 2, 3, 4, 100, 100, 100, 4, 3, 2, "bad ldc = 2"},
		{"ldc n=0", false, false, 2, 0, 4, 100, 100, 100, 4, 1, 0, "bad ldc = 0"},
		{"short a", false, false, 3, 3, 4, 4*2 + 3, 100, 100, 4, 3, 3, "len(a) = 11"},
		{"short aT", true, false, 3, 3, 4, 10, 100, 100, 4, 3, 3, "len(a) = 10"},
		{"short b", false, false, 3, 3, 4, 100, 10, 100, 4, 3, 3, "len(b) = 10"},
		{"short bT", false, true, 3, 3, 4, 100, 10, 100, 4, 4, 3, "len(b) = 10"},
		{"short c", false, false, 3, 3, 4, 100, 100, 7, 4, 3, 3, "len(c) = 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.HasPrefix(msg, "blas: native Sgemm: ") || !strings.Contains(msg, tc.want) {
					t.Fatalf("panic = %v, want a message with %q", r, tc.want)
				}
			}()
			Native{}.Sgemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, 1, f[:tc.la], tc.lda, f[:tc.lb], tc.ldb, 0, f[:tc.lc], tc.ldc)
		})
	}
	// Exact lengths are accepted, including k = 0 with A and B empty.
	c := make([]float32, 9)
	Native{}.Sgemm(false, false, 3, 3, 4, 1, f[:4*2+4], 4, f[:3*3+3], 3, 0, c, 2+1)
	Native{}.Sgemm(true, true, 2, 3, 0, 1, nil, 2, nil, 1, 0, c[:6], 3)
}

func TestNativeDgemm(t *testing.T) {
	a, b := []float64{1, 2, 3, 4}, []float64{5, 6, 7, 8}
	c := []float64{1, 1, 1, 1}
	Native{}.Dgemm(false, true, 2, 2, 2, 2, a, 2, b, 2, 0.5, c, 2)
	want := []float64{2*17 + 0.5, 2*23 + 0.5, 2*39 + 0.5, 2*53 + 0.5}
	for i := range c {
		if c[i] != want[i] {
			t.Fatalf("Dgemm C = %v, want %v", c, want)
		}
	}
}

// BenchmarkNativeSgemm compares Native (1 and 2 workers, and the portable
// kernel) with gonum and OpenBLAS (1 and 2 threads) on BenchmarkSgemm's
// shapes.
func BenchmarkNativeSgemm(b *testing.B) {
	type bench struct {
		name  string
		setup func() bool
		sgemm func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	}
	always := func() bool { return true }
	benches := []bench{
		{"native-1", always, Native{Workers: 1}.Sgemm},
		{"native-2", always, Native{Workers: 2}.Sgemm},
		{"portable-1", always, func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
			nativeSgemm(nativeGo, nativeSplit{workers: 1, minWork: nativeParallelWork}, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		}},
		{"gonum", always, Gonum{}.Sgemm},
	}
	for _, threads := range []int{1, 2} {
		var o *OpenBLAS
		benches = append(benches, bench{fmt.Sprintf("openblas-%d", threads), func() bool {
			var err error
			o, err = OpenOpenBLAS(threads) // sets OpenBLAS's process-wide thread count
			if err != nil {
				b.Logf("OpenBLAS not benchmarked: %v", err)
			}
			return err == nil
		}, func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, bm []float32, ldb int, beta float32, c []float32, ldc int) {
			o.Sgemm(tA, tB, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc)
		}})
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, be := range benches {
		if !be.setup() {
			continue
		}
		for _, s := range benchShapes {
			a, bm, c := randF32(rng, s.la), randF32(rng, s.lb), make([]float32, s.lc)
			b.Run(be.name+"/"+s.name, func(b *testing.B) {
				for b.Loop() {
					be.sgemm(s.tA, s.tB, s.m, s.n, s.k, 1, a, s.lda, bm, s.ldb, 0, c, s.ldc)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// TestNativeAccuracy: on bf16 inputs (what mixed precision feeds the
// kernels), the native kernels (portable, AVX2/FMA, and AVX-512 where the
// CPU has it), directly and widening a 16-bit B as they pack it, stay
// within the float32 accumulation bound γ_k·Σ|a||b| of a float64
// reference in every transpose combination and at training depths, and
// round one or two exact products correctly. The worst error relative to
// the bound is logged.
func TestNativeAccuracy(t *testing.T) {
	impls := nativeImpls(t)
	if a := impls["asm"]; a != nil && a.kern12 != nil {
		avx2 := *a
		avx2.kern12 = nil
		impls["asm-avx2"] = &avx2
	}
	rng := rand.New(rand.NewPCG(15, 16))
	worst := map[string]float64{}
	for _, k := range []int{1, 2, 3, 31, 576, 1536, 5632} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				c := newAccuracyCase(rng, 37, 53, k, ta, tb)
				for name, impl := range impls {
					got := make([]float32, c.m*c.n)
					nativeSgemm(impl, nativeSplit{workers: 2}, ta, tb, c.m, c.n, k, 1, to32(c.af), c.lda, to32(c.bf), c.ldb, 0, got, c.n)
					c.check(t, name, got, worst)
					gotW := make([]float32, c.m*c.n)
					nativeSgemmWiden(impl, nativeSplit{workers: 2}, ta, tb, c.m, c.n, k, 1, to32(c.af), c.lda, c.bu, amp.BF16.FromBits16Slice, c.ldb, 0, gotW, c.n, nil)
					for i := range got {
						if math.Float32bits(gotW[i]) != math.Float32bits(got[i]) {
							t.Fatalf("%s k=%d tA=%v tB=%v: SgemmWiden C[%d] = %v, Sgemm %v", name, k, ta, tb, i, gotW[i], got[i])
						}
					}
				}
			}
		}
	}
	for _, k := range []int{31, 576, 1536, 5632} {
		for name := range impls {
			t.Logf("%s k=%d: worst error / γ_k bound %.3g", name, k, worst[fmt.Sprintf("%s k=%d", name, k)])
		}
	}
}
