package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// gamma is γ_n = n·u/(1−n·u) with u = 2^-24: the relative bound on n
// float32 roundings in a row (Higham, Accuracy and Stability, §3.1).
func gamma(n int) float64 {
	nu := float64(n) * 0x1p-24
	return nu / (1 - nu)
}

// gemmCase is one GEMM checked against a float64 reference.
type gemmCase struct {
	m, n, k        int
	transA, transB bool
	alpha, beta    float32
	pad, off       int // extra leading-dimension columns; element offset of each matrix
	b16            bool
	half           Half
}

func (c gemmCase) String() string {
	s := fmt.Sprintf("%dx%dx%d_tA%v_tB%v_a%g_b%g_pad%d_off%d", c.m, c.n, c.k, c.transA, c.transB, c.alpha, c.beta, c.pad, c.off)
	if c.b16 {
		s += "_" + c.half.String()
	}
	return s
}

// run computes the case on the device and returns the worst error as a
// fraction of its bound. The bound on each element is
// γ_{k+2}·(|α|·Σ|a||b| + |β·c|): k fused multiply-adds into the
// accumulator, then α·acc and the fma with β·c, one rounding each; the
// float64 reference's own error is below it by a factor of 2^29.
func (c gemmCase) run(t *testing.T, ks *Kernels, d *Device, rng *rand.Rand) float64 {
	t.Helper()
	ar, ac := c.m, c.k
	if c.transA {
		ar, ac = c.k, c.m
	}
	br, bc := c.k, c.n
	if c.transB {
		br, bc = c.n, c.k
	}
	lda, ldb, ldc := ac+c.pad, bc+c.pad, c.n+c.pad
	a := make([]float32, c.off+ar*lda)
	b := make([]float32, c.off+br*ldb)
	cm := make([]float32, c.off+c.m*ldc)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	for i := range b {
		b[i] = float32(rng.NormFloat64())
	}
	for i := range cm {
		cm[i] = float32(rng.NormFloat64())
	}
	var bh []uint16
	if c.b16 {
		f := amp.BF16
		if c.half == FP16 {
			f = amp.FP16
		}
		bh = make([]uint16, len(b))
		for i := range b {
			bh[i] = f.Bits16(b[i])
			b[i] = f.FromBits16(bh[i]) // the reference multiplies the widened values
		}
	}
	newBuf := func(n int) *Buffer {
		buf, err := d.NewBuffer(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(buf.Free)
		return buf
	}
	A, C := newBuf(4*len(a)), newBuf(4*len(cm))
	var B *Buffer
	if c.b16 {
		B = newBuf(2*len(bh) + 2)
		must(t, B.WriteUint16(0, bh))
	} else {
		B = newBuf(4 * len(b))
		must(t, B.WriteFloat32(0, b))
	}
	must(t, A.WriteFloat32(0, a))
	must(t, C.WriteFloat32(0, cm))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	must(t, ks.Gemm(r, GemmArgs{
		M: c.m, N: c.n, K: c.k, TransA: c.transA, TransB: c.transB, Alpha: c.alpha, Beta: c.beta,
		A: A, B: B, C: C, Lda: lda, Ldb: ldb, Ldc: ldc, AOff: c.off, BOff: c.off, COff: c.off,
		B16: c.b16, BHalf: c.half,
	}))
	must(t, r.Submit())
	got := make([]float32, len(cm))
	must(t, C.ReadFloat32(0, got))

	worst := 0.0
	g := gamma(c.k + 2)
	for i := range c.m {
		for j := range c.n {
			var s, sa float64
			for p := range c.k {
				ai, bi := c.off+i*lda+p, c.off+p*ldb+j
				if c.transA {
					ai = c.off + p*lda + i
				}
				if c.transB {
					bi = c.off + j*ldb + p
				}
				av, bv := a[ai], b[bi]
				s += float64(av) * float64(bv)
				sa += math.Abs(float64(av) * float64(bv))
			}
			ci := c.off + i*ldc + j
			want := float64(c.alpha)*s + float64(c.beta)*float64(cm[ci])
			bound := g * (math.Abs(float64(c.alpha))*sa + math.Abs(float64(c.beta)*float64(cm[ci])))
			e := math.Abs(float64(got[ci]) - want)
			if !(e <= bound) { // also catches NaN
				t.Fatalf("C[%d,%d] = %g, want %g ± %.3g (error %.3g)", i, j, got[ci], want, bound, e)
			}
			if bound > 0 {
				worst = max(worst, e/bound)
			}
		}
	}
	// Everything outside op(A)·op(B)'s M×N block is untouched.
	for idx := range cm {
		in := idx >= c.off && (idx-c.off)%ldc < c.n && (idx-c.off)/ldc < c.m
		if !in && got[idx] != cm[idx] {
			t.Fatalf("C element %d, outside the %d×%d result, changed from %g to %g", idx, c.m, c.n, cm[idx], got[idx])
		}
	}
	return worst
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openKernels(t testing.TB) (*testEnv, *Kernels) {
	e := openTest(t)
	ks, err := NewKernels(e.dev)
	must(t, err)
	t.Cleanup(ks.Close)
	return e, ks
}

// TestGemm checks every transpose combination at sizes on and off the
// 64×64×16 tiles against a float64 reference, within the fp32
// accumulation bound.
func TestGemm(t *testing.T) {
	e, ks := openKernels(t)
	t.Logf("GEMM variant %s on %s", ks.Variant.Name, e.dev.Physical.Name)
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {64, 64, 16}, {65, 63, 17}, {128, 96, 128}, {31, 100, 1}, {128, 128, 128}}
	if testing.Short() {
		sizes = sizes[:4]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	for _, s := range sizes {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			c := gemmCase{m: s[0], n: s[1], k: s[2], transA: tr[0], transB: tr[1], alpha: 1}
			if s[0]%2 == 1 { // odd sizes also scale, accumulate into C, and use strides and offsets
				c.alpha, c.beta, c.pad, c.off = 1.5, -0.75, 3, 5
			}
			t.Run(c.String(), func(t *testing.T) { worst = max(worst, c.run(t, ks, e.dev, rng)) })
		}
	}
	t.Logf("worst error: %.3f of the bound γ_{k+2}·(|α|Σ|a||b| + |βc|)", worst)
}

// TestGemmB16 checks the GEMM that reads B as bf16 or fp16 bits against
// the float64 product of the widened values, within the same bound.
func TestGemmB16(t *testing.T) {
	e, ks := openKernels(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, h := range []Half{BF16, FP16} {
		for _, s := range [][3]int{{5, 3, 9}, {65, 63, 33}, {128, 128, 128}} {
			for _, tr := range [][2]bool{{false, false}, {true, true}, {false, true}} {
				c := gemmCase{m: s[0], n: s[1], k: s[2], transA: tr[0], transB: tr[1], alpha: 1, b16: true, half: h}
				if s[0]%2 == 1 { // odd offsets put elements in the high halves of words
					c.alpha, c.beta, c.pad, c.off = 2, 0.5, 1, 3
				}
				t.Run(c.String(), func(t *testing.T) { c.run(t, ks, e.dev, rng) })
			}
		}
	}
}

// TestGemmBetaZeroIgnoresC: with β = 0, NaN in C does not leak into the
// result (C is not read), as in BLAS.
func TestGemmBetaZeroIgnoresC(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const n = 9
	A, err := d.NewBuffer(4 * n * n)
	must(t, err)
	defer A.Free()
	C, err := d.NewBuffer(4 * n * n)
	must(t, err)
	defer C.Free()
	ones, nans := make([]float32, n*n), make([]float32, n*n)
	for i := range ones {
		ones[i], nans[i] = 1, float32(math.NaN())
	}
	must(t, A.WriteFloat32(0, ones))
	must(t, C.WriteFloat32(0, nans))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	must(t, ks.Gemm(r, GemmArgs{M: n, N: n, K: n, Alpha: 1, A: A, B: A, C: C, Lda: n, Ldb: n, Ldc: n}))
	must(t, r.Submit())
	got := make([]float32, n*n)
	must(t, C.ReadFloat32(0, got))
	for i, v := range got {
		if v != n {
			t.Fatalf("C[%d] = %g, want %d", i, v, n)
		}
	}
}

// TestBatchedDispatches records a chain of GEMMs where each reads the one
// before's output in one submission: the recorder's barriers order them.
func TestBatchedDispatches(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const n, steps = 16, 12
	bufs := make([]*Buffer, steps+1)
	for i := range bufs {
		b, err := d.NewBuffer(4 * n * n)
		must(t, err)
		defer b.Free()
		bufs[i] = b
	}
	// x_{i+1} = 2·I·x_i: x_steps = 2^steps·x_0, exactly.
	eye := make([]float32, n*n)
	for i := range n {
		eye[i*n+i] = 1
	}
	I, err := d.NewBuffer(4 * n * n)
	must(t, err)
	defer I.Free()
	must(t, I.WriteFloat32(0, eye))
	x0 := make([]float32, n*n)
	for i := range x0 {
		x0[i] = float32(i) - 100
	}
	must(t, bufs[0].WriteFloat32(0, x0))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for i := range steps {
		must(t, ks.Gemm(r, GemmArgs{M: n, N: n, K: n, Alpha: 2, A: I, B: bufs[i], C: bufs[i+1], Lda: n, Ldb: n, Ldc: n}))
	}
	if r.Len() != steps {
		t.Fatalf("recorder holds %d commands, want %d", r.Len(), steps)
	}
	must(t, r.Submit())
	got := make([]float32, n*n)
	must(t, bufs[steps].ReadFloat32(0, got))
	for i, v := range got {
		if want := x0[i] * (1 << steps); v != want {
			t.Fatalf("after %d chained GEMMs x[%d] = %g, want %g", steps, i, v, want)
		}
	}
	// A second batch on the same recorder, after the reset.
	must(t, ks.Gemm(r, GemmArgs{M: n, N: n, K: n, Alpha: 0.5, A: I, B: bufs[steps], C: bufs[0], Lda: n, Ldb: n, Ldc: n}))
	must(t, r.Submit())
	must(t, bufs[0].ReadFloat32(0, got))
	if want := x0[3] * (1 << (steps - 1)); got[3] != want {
		t.Fatalf("second batch: x[3] = %g, want %g", got[3], want)
	}
}

func BenchmarkGemm(b *testing.B) {
	e, ks := openKernels(b)
	d := e.dev
	for _, s := range []struct {
		n   int
		b16 bool
	}{{64, false}, {128, false}, {256, false}, {256, true}} {
		name := fmt.Sprintf("%d^3_fp32", s.n)
		if s.b16 {
			name = fmt.Sprintf("%d^3_bf16B", s.n)
		}
		b.Run(name, func(b *testing.B) {
			A, err := d.NewBuffer(4 * s.n * s.n)
			must(b, err)
			defer A.Free()
			B, err := d.NewBuffer(4 * s.n * s.n)
			must(b, err)
			defer B.Free()
			C, err := d.NewBuffer(4 * s.n * s.n)
			must(b, err)
			defer C.Free()
			r, err := d.NewRecorder()
			must(b, err)
			defer r.Close()
			g := GemmArgs{M: s.n, N: s.n, K: s.n, Alpha: 1, A: A, B: B, C: C, Lda: s.n, Ldb: s.n, Ldc: s.n, B16: s.b16}
			must(b, ks.Gemm(r, g)) // warm: the pipeline compiles on first use
			must(b, r.Submit())
			b.ResetTimer()
			for b.Loop() {
				must(b, ks.Gemm(r, g))
				must(b, r.Submit())
			}
			b.ReportMetric(2*float64(s.n*s.n*s.n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
