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
// transpose combination, below one tile and across a ragged edge, with
// fp32 and 16-bit B and α, β ≠ 0, are held to a float64 reference within
// γ_{k+2}·(|α|Σ|a||b| + |βc|) with u = 2^-23 (the products of f's values
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
	round, half := amp.BF16, BF16
	if f == RoundFP16 {
		round, half = amp.FP16, FP16
	}
	rng := rand.New(rand.NewPCG(23, 29))
	for _, sh := range [][3]int{{3, 5, 7}, {130, 70, 48}} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, b16 := range []bool{false, true} {
				if (b16 && t.b16 == nil) || (!b16 && t.f32 == nil) {
					continue
				}
				if err := ks.checkProduct(rng, sh[0], sh[1], sh[2], tr[0], tr[1], b16, half, round, f); err != nil {
					return fmt.Errorf("self-check of %s, %d×%d×%d transA=%v transB=%v 16-bit B=%v: %w", t.v.Name, sh[0], sh[1], sh[2], tr[0], tr[1], b16, err)
				}
			}
		}
	}
	return nil
}

// checkProduct is one product of selfCheck.
func (ks *Kernels) checkProduct(rng *rand.Rand, m, n, k int, ta, tb, b16 bool, half Half, round amp.Format, f Rounding) error {
	d := ks.d
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	for _, xs := range [][]float32{a, b, c} {
		for i := range xs {
			xs[i] = float32(rng.NormFloat64())
		}
	}
	hs := make([]uint16, len(b))
	for i := range a {
		a[i] = round.Round(a[i])
	}
	for i := range b {
		hs[i] = round.Bits16(b[i])
		b[i] = round.FromBits16(hs[i])
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
		C, err = newBuf(4 * len(c))
	}
	if err == nil {
		err = C.WriteFloat32(0, c)
	}
	if err == nil && b16 {
		if B, err = newBuf(2*len(hs) + 2); err == nil {
			err = B.WriteUint16(0, hs)
		}
	} else if err == nil {
		if B, err = newBuf(4 * len(b)); err == nil {
			err = B.WriteFloat32(0, b)
		}
	}
	if err != nil {
		return err
	}
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	const alpha, beta = 1.25, -0.5
	r, err := d.NewRecorder()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := ks.Gemm(r, GemmArgs{M: m, N: n, K: k, TransA: ta, TransB: tb, Alpha: alpha, Beta: beta,
		A: A, B: B, C: C, Lda: lda, Ldb: ldb, Ldc: n, B16: b16, BHalf: half, Operands: f}); err != nil {
		return err
	}
	if err := r.Submit(); err != nil {
		return err
	}
	got := make([]float32, m*n)
	if err := C.ReadFloat32(0, got); err != nil {
		return err
	}
	nu := float64(k+2) * 0x1p-23
	gk := nu / (1 - nu)
	for i := range m {
		for j := range n {
			var s, sa float64
			for p := range k {
				ai, bi := i*lda+p, p*ldb+j
				if ta {
					ai = p*lda + i
				}
				if tb {
					bi = j*ldb + p
				}
				x := float64(a[ai]) * float64(b[bi])
				s += x
				sa += math.Abs(x)
			}
			want := alpha*s + beta*float64(c[i*n+j])
			bound := gk * (alpha*sa + math.Abs(beta*float64(c[i*n+j])))
			if e := math.Abs(float64(got[i*n+j]) - want); !(e <= bound) {
				return fmt.Errorf("C[%d,%d] = %g, want %g ± %.3g", i, j, got[i*n+j], want, bound)
			}
		}
	}
	return nil
}
