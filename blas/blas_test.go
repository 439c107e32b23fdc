package blas

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// backends returns every backend this machine can run; OpenBLAS and oneDNN
// are skipped (with a note) where the library is absent.
func backends(t testing.TB) []Backend {
	bs := []Backend{Gonum{}, Native{}, Native{Workers: 1}}
	if o, err := OpenOpenBLAS(0); err == nil {
		bs = append(bs, o)
	} else {
		t.Logf("OpenBLAS not tested: %v", err)
	}
	if d, err := OpenOneDNN(0); err == nil {
		bs = append(bs, d)
	} else {
		t.Logf("oneDNN not tested: %v", err)
	}
	return bs
}

// naive is the float64 reference: a triple loop over the row-major definition.
func naive(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	at := func(i, p int) float64 {
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	bt := func(p, j int) float64 {
		if transB {
			return b[j*ldb+p]
		}
		return b[p*ldb+j]
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += at(i, p) * bt(p, j)
			}
			c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
		}
	}
}

func TestGemmAgainstNaive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, be := range backends(t) {
		for _, tc := range []struct {
			m, n, k, pad int
			alpha, beta  float64
		}{
			{3, 4, 5, 0, 1, 0}, {17, 9, 33, 3, 0.5, 1}, {64, 65, 7, 1, -2, 0.25}, {1, 1, 1, 0, 1, 1}, {5, 3, 0, 0, 1, 0.5},
		} {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					name := fmt.Sprintf("%s/%dx%dx%d/tA=%v/tB=%v", be.Name(), tc.m, tc.n, tc.k, ta, tb)
					rowsA, colsA := tc.m, tc.k
					if ta {
						rowsA, colsA = tc.k, tc.m
					}
					rowsB, colsB := tc.k, tc.n
					if tb {
						rowsB, colsB = tc.n, tc.k
					}
					lda, ldb, ldc := max(1, colsA+tc.pad), max(1, colsB+tc.pad), tc.n+tc.pad
					a := randSlice(rng, rowsA*lda)
					b := randSlice(rng, rowsB*ldb)
					c := randSlice(rng, tc.m*ldc)
					want := append([]float64(nil), c...)
					naive(ta, tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)

					c64 := append([]float64(nil), c...)
					Gemm(be, ta, tb, tc.m, tc.n, tc.k, tc.alpha, a, lda, b, ldb, tc.beta, c64, ldc)
					c32 := to32(c)
					Gemm(be, ta, tb, tc.m, tc.n, tc.k, float32(tc.alpha), to32(a), lda, to32(b), ldb, float32(tc.beta), c32, ldc)
					for i := range want {
						if d := math.Abs(c64[i] - want[i]); d > 1e-12*(1+math.Abs(want[i])) {
							t.Fatalf("%s float64 [%d] = %v, want %v", name, i, c64[i], want[i])
						}
						if d := math.Abs(float64(c32[i]) - want[i]); d > 1e-5*(1+math.Abs(want[i]))*math.Sqrt(float64(tc.k+1)) {
							t.Fatalf("%s float32 [%d] = %v, want %v", name, i, c32[i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestOpenUnknown(t *testing.T) {
	if _, err := Open("mkl", 0); err == nil || err.Error() != `unknown BLAS backend "mkl" (want auto, openblas, onednn, native or gonum)` {
		t.Fatalf("Open(mkl) error = %v", err)
	}
	b, err := Open("gonum", 0)
	if err != nil || b.Name() != "gonum (pure Go)" {
		t.Fatalf("Open(gonum) = %v, %v", b, err)
	}
}

func TestOpenBLASMissingLibrary(t *testing.T) {
	t.Setenv("MIXTUNE_OPENBLAS", "/nonexistent/libopenblas.so.0")
	t.Setenv("MIXTUNE_ONEDNN", "/nonexistent/libdnnl.so.2")
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // auto caches its calibration there
	if _, err := OpenOpenBLAS(0); err == nil {
		t.Fatal("OpenOpenBLAS with a missing library succeeded")
	}
	if _, err := Open("onednn", 0); err == nil {
		t.Fatal(`Open("onednn") with a missing library succeeded`)
	}
	b, err := Open("auto", 0)
	if _, native := b.(Native); err != nil || !native {
		t.Fatalf("auto without OpenBLAS or oneDNN = %v, %v; want the native fallback", b.Name(), err)
	}
}

func randSlice(rng *rand.Rand, n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = rng.Float64()*2 - 1
	}
	return s
}

func to32(s []float64) []float32 {
	r := make([]float32, len(s))
	for i, v := range s {
		r[i] = float32(v)
	}
	return r
}

// benchShapes are the benchmark model's GEMM shapes: the q projection
// forward (x·Wᵀ), the FFN up projection, an input gradient (dy·W), and one
// attention head's scores (QKᵀ with a strided Q).
var benchShapes = []struct {
	name          string
	tA, tB        bool
	m, n, k       int
	lda, ldb, ldc int
	la, lb, lc    int
}{
	{"xWt_1024x256x256", false, true, 1024, 256, 256, 256, 256, 256, 1024 * 256, 256 * 256, 1024 * 256},
	{"xWt_1024x688x256", false, true, 1024, 688, 256, 256, 256, 688, 1024 * 256, 688 * 256, 1024 * 688},
	{"dyW_1024x256x688", false, false, 1024, 256, 688, 688, 256, 256, 1024 * 688, 688 * 256, 1024 * 256},
	{"QKt_128x128x32", false, true, 128, 128, 32, 256, 256, 128, 128 * 256, 128 * 256, 128 * 128},
}

// BenchmarkSgemm times every backend on benchShapes.
func BenchmarkSgemm(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, be := range backends(b) {
		for _, s := range benchShapes {
			a, bm, c := to32(randSlice(rng, s.la)), to32(randSlice(rng, s.lb)), make([]float32, s.lc)
			b.Run(strings.Fields(be.Name())[0]+"/"+s.name, func(b *testing.B) {
				for b.Loop() {
					be.Sgemm(s.tA, s.tB, s.m, s.n, s.k, 1, a, s.lda, bm, s.ldb, 0, c, s.ldc)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// Splitting a product over goroutines must not change a single bit: each
// row of C is computed by one call with the same k order.
func TestOpenBLASSplitIsBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var ref []float32
	for _, workers := range []int{1, 2, 3} {
		o, err := OpenOpenBLAS(workers)
		if err != nil {
			t.Skip(err)
		}
		for _, ta := range []bool{false, true} {
			m, n, k := 1024, 96, 300
			a, b := to32(randSlice(rand.New(rand.NewPCG(7, 8)), m*k)), to32(randSlice(rand.New(rand.NewPCG(9, 10)), n*k))
			c := make([]float32, m*n)
			lda := k
			if ta {
				lda = m
			}
			o.Sgemm(ta, true, m, n, k, 1, a, lda, b, k, 0, c, n)
			if workers == 1 {
				ref = append(ref, c...)
				continue
			}
			off := 0
			if ta {
				off = m * n
			}
			for i := range c {
				if math.Float32bits(c[i]) != math.Float32bits(ref[off+i]) {
					t.Fatalf("%d goroutines, transA=%v: element %d differs", workers, ta, i)
				}
			}
		}
	}
	_ = rng
}
