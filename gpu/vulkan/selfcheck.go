package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/mixtune/mixtune/amp"
)

// selfCheck runs a tensor-core variant on the device before any product
// is given to it, and refuses it where it is wrong: a driver's
// cooperative-matrix support is reported by the driver, not proven, and
// a wrong product would train silently. Small products in every
// transpose combination, below one tile, across a ragged edge (α, β ≠ 0)
// and over whole aligned tiles (β = 0), with fp32 and 16-bit B, are held
// to a float64 reference within γ_{k+2}·(|α|Σ|a||b| + |βc|) with
// u = 2^-23 (the products of f's values
// are exact in fp32; tensor cores may truncate their fp32 sums). It takes
// milliseconds, once per device.
func (ks *Kernels) selfCheck(f Rounding, t gemmKernels) (err error) {
	prev, had := ks.gemm[f]
	ks.gemm[f] = t
	defer func() {
		if had {
			ks.gemm[f] = prev
		} else {
			delete(ks.gemm, f)
		}
	}()
	half := BF16
	if f == RoundFP16 {
		half = FP16
	}
	rng := rand.New(rand.NewPCG(23, 29))
	// 264×272×40 holds whole tiles of every coopTile, aligned: their
	// 16-byte loads, and with β = 0 C stored straight from the fragments.
	for _, sh := range [][3]int{{3, 5, 7}, {130, 70, 48}, {264, 272, 40}} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, b16 := range []bool{false, true} {
				if t.a16 == nil && ((b16 && t.b16 == nil) || (!b16 && t.f32 == nil)) {
					continue // an A16 build (Gemm narrows first) takes both
				}
				c := GemmCheck{M: sh[0], N: sh[1], K: sh[2], TransA: tr[0], TransB: tr[1], B16: b16, BHalf: half, Operands: f, OverwriteC: sh[0] == 264, Splits: 1}
				if _, err := ks.CheckGemm(rng, c); err != nil {
					return fmt.Errorf("self-check of %s, %d×%d×%d transA=%v transB=%v 16-bit B=%v: %w", t.v.Name, sh[0], sh[1], sh[2], tr[0], tr[1], b16, err)
				}
			}
		}
	}
	return nil
}

// GemmCheck is one product CheckGemm runs: its shape, B's storage, and
// the format its operands' values have (Operands: the variant Gemm takes
// for them).
type GemmCheck struct {
	M, N, K        int
	TransA, TransB bool
	B16            bool
	BHalf          Half
	Operands       Rounding
	AScale         float64 // A's values scaled by it before rounding (0: 1), e.g. to reach fp16 subnormals
	// OverwriteC runs it with β = 0 over a C of NaNs, which a kernel
	// must not read then.
	OverwriteC bool
	// Splits is GemmArgs.Splits (0: split-K where Gemm chooses it; 1: one
	// pass, on the variant Operands picks).
	Splits int
}

// CheckGemm runs one product of normal random values (rounded to
// c.Operands' format; B to BHalf when B16) with α = 1.25, β = −0.5 (β = 0
// with OverwriteC) on the device and holds every element to a float64 reference within
// γ_{k+2}·(|α|Σ|a||b| + |βc|), u = 2^-24 for fp32 operands and 2^-23 for
// 16-bit ones (tensor cores may truncate fp32 sums); a product Gemm splits
// into S chunks of at most c values of K (split-K, on the scalar kernel)
// within γ_{c+S+1}, u = 2^-24. It returns the worst error as a fraction
// of its bound.
func (ks *Kernels) CheckGemm(rng *rand.Rand, c GemmCheck) (float64, error) {
	d, m, n, k := ks.d, c.M, c.N, c.K
	a, b, cv := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	for _, xs := range [][]float32{a, b, cv} {
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
	}
	beta := -0.5
	if c.OverwriteC {
		beta = 0
		for i := range cv {
			cv[i] = float32(math.NaN())
		}
	}
	if c.AScale != 0 {
		for i := range a {
			a[i] *= float32(c.AScale)
		}
	}
	u := 0x1p-24
	if c.Operands != NoRounding {
		round := amp.BF16
		if c.Operands == RoundFP16 {
			round = amp.FP16
		}
		round.RoundSlice(a)
		round.RoundSlice(b)
		u = 0x1p-23
	}
	var hs []uint16
	if c.B16 {
		f := c.BHalf.format()
		hs = make([]uint16, len(b))
		for i := range b {
			hs[i] = f.Bits16(b[i])
			b[i] = f.FromBits16(hs[i])
		}
	}
	var bufs []*Buffer
	defer func() {
		for _, x := range bufs {
			x.Free()
		}
	}()
	newBuf := func(size int) (*Buffer, error) {
		x, err := d.NewBuffer(size)
		if err == nil {
			bufs = append(bufs, x)
		}
		return x, err
	}
	A, err := newBuf(4 * len(a))
	if err == nil {
		err = A.WriteFloat32(0, a)
	}
	var C, B *Buffer
	if err == nil {
		C, err = newBuf(4 * len(cv))
	}
	if err == nil {
		err = C.WriteFloat32(0, cv)
	}
	if err == nil && c.B16 {
		if B, err = newBuf(2*len(hs) + 2); err == nil {
			err = B.WriteUint16(0, hs)
		}
	} else if err == nil {
		if B, err = newBuf(4 * len(b)); err == nil {
			err = B.WriteFloat32(0, b)
		}
	}
	if err != nil {
		return 0, err
	}
	lda, ldb := k, n
	if c.TransA {
		lda = m
	}
	if c.TransB {
		ldb = k
	}
	const alpha = 1.25
	r, err := d.NewRecorder()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	g := GemmArgs{M: m, N: n, K: k, TransA: c.TransA, TransB: c.TransB, Alpha: alpha, Beta: float32(beta),
		A: A, B: B, C: C, Lda: lda, Ldb: ldb, Ldc: n, B16: c.B16, BHalf: c.BHalf, Operands: c.Operands, Splits: c.Splits}
	if err := ks.Gemm(r, g); err != nil {
		return 0, err
	}
	if err := r.Submit(); err != nil {
		return 0, err
	}
	got := make([]float32, m*n)
	if err := C.ReadFloat32(0, got); err != nil {
		return 0, err
	}
	nu := float64(k+2) * u
	if chunks, chunk := ks.SplitK(g); chunks > 1 { // split-K: on the scalar kernel
		nu = float64(chunk+chunks+1) * 0x1p-24
	}
	gk := nu / (1 - nu)
	worst := 0.0
	for i := range m {
		for j := range n {
			var s, sa float64
			for p := range k {
				ai, bi := i*lda+p, p*ldb+j
				if c.TransA {
					ai = p*lda + i
				}
				if c.TransB {
					bi = j*ldb + p
				}
				x := float64(a[ai]) * float64(b[bi])
				s += x
				sa += math.Abs(x)
			}
			want, bound := alpha*s, gk*alpha*sa
			if beta != 0 {
				want += beta * float64(cv[i*n+j])
				bound += gk * math.Abs(beta*float64(cv[i*n+j]))
			}
			e := math.Abs(float64(got[i*n+j]) - want)
			if !(e <= bound) {
				return 0, fmt.Errorf("C[%d,%d] = %g, want %g ± %.3g", i, j, got[i*n+j], want, bound)
			}
			worst = max(worst, e/bound)
		}
	}
	return worst, nil
}
