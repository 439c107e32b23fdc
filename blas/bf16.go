package blas

import (
	"errors"
	"fmt"

	"github.com/mixtune/mixtune/internal/cpufeat"
)

// BF16Gemmer multiplies bf16 matrices: C = alpha·op(A)·op(B) + beta·C with
// A and B bf16 bit patterns and C float32 (row-major, as Backend). The
// products of two bf16 values are exact in float32 and summed in float32,
// in an order each implementation documents: its results are within the
// float32 accumulation bound γ_k·Σ|a||b| of the exact product, but not the
// bits of Sgemm on the same values.
type BF16Gemmer interface {
	// Name says which kernel runs, for logs and run records.
	Name() string
	GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int)
}

// BF16Choice is the bf16 GEMM a run uses, and why.
type BF16Choice struct {
	Gemmer BF16Gemmer
	// Units says whether it runs on the CPU's bf16 units; false where
	// oneDNN emulates them on an AVX-512 CPU without AVX512_BF16.
	Units  bool
	Reason string
}

// ErrNoBF16Gemm is returned by ChooseBF16 where no bf16 GEMM runs here.
var ErrNoBF16Gemm = errors.New("no bf16 GEMM runs on this machine")

// ChooseBF16 picks the bf16 GEMM for a run on backend be, on a CPU with
// features f: the first of BF16Candidates (amp.bf16_matmul: hardware).
// threads is how many goroutines share a large product (0: GOMAXPROCS).
func ChooseBF16(be Backend, f cpufeat.Features, threads int) (BF16Choice, error) {
	return chooseBF16(be, f, func() (*OneDNN, error) { return OpenOneDNN(threads) })
}

// BF16Candidates lists every bf16 GEMM that runs for a run on backend be,
// on a CPU with features f, best first by kind: oneDNN's
// dnnl_gemm_bf16bf16f32 (which uses AMX where the CPU has it) when be is
// oneDNN or oneDNN loads beside it and its bf16 GEMM runs; then the
// native AMX kernel where f has AMX-BF16 that the OS grants, or the
// native VDPBF16PS kernel where f has AVX512_BF16. With none it returns
// ErrNoBF16Gemm, with the reasons. amp.bf16_matmul: auto measures each
// and takes the fastest, since which one wins depends on the CPU and the
// shapes (on a Sapphire Rapids Xeon the native AMX kernel ran a training
// step faster than oneDNN 2.6's bf16 GEMM).
func BF16Candidates(be Backend, f cpufeat.Features, threads int) ([]BF16Choice, error) {
	return bf16Candidates(be, f, func() (*OneDNN, error) { return OpenOneDNN(threads) })
}

// chooseBF16 is ChooseBF16 with the oneDNN loader passed in, for tests.
func chooseBF16(be Backend, f cpufeat.Features, openOneDNN func() (*OneDNN, error)) (BF16Choice, error) {
	cs, err := bf16Candidates(be, f, openOneDNN)
	if err != nil {
		return BF16Choice{}, err
	}
	return cs[0], nil
}

// bf16Candidates is BF16Candidates with the oneDNN loader passed in, for
// tests.
func bf16Candidates(be Backend, f cpufeat.Features, openOneDNN func() (*OneDNN, error)) ([]BF16Choice, error) {
	var cs []BF16Choice
	d, _ := be.(*OneDNN)
	var loadErr error
	if d == nil {
		d, loadErr = openOneDNN()
	}
	why := ""
	if d != nil && d.BF16() {
		c := BF16Choice{Gemmer: d, Units: f.BF16Units()}
		switch {
		case f.AMX():
			c.Reason = "oneDNN's bf16 GEMM on AMX-BF16"
		case f.AVX512BF16:
			c.Reason = "oneDNN's bf16 GEMM on AVX512_BF16 (VDPBF16PS)"
		default:
			c.Reason = "oneDNN's bf16 GEMM, emulated with AVX-512 fp32 instructions: this CPU has no bf16 units"
		}
		cs = append(cs, c)
	} else {
		why = "oneDNN's bf16 GEMM needs AVX-512"
		switch {
		case errors.Is(loadErr, errNotInstalled):
			why = "oneDNN (libdnnl) is not installed"
		case loadErr != nil:
			why = loadErr.Error()
		}
	}
	nb, err := NewNativeBF16(f, workersOf(be))
	if err == nil {
		kernel := "native VDPBF16PS kernel (AVX512_BF16)"
		if nb.micro.mr == amxMR {
			kernel = "native AMX kernel (AMX-BF16 TDPBF16PS)"
		}
		if why != "" {
			kernel += "; " + why
		}
		cs = append(cs, BF16Choice{Gemmer: nb, Units: true, Reason: kernel})
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("%w: %s; native kernel: %v; CPU: %s", ErrNoBF16Gemm, why, err, f)
	}
	return cs, nil
}

// workersOf is how many goroutines backend be shares a product among
// (0, GOMAXPROCS, where it does not say).
func workersOf(be Backend) int {
	switch b := be.(type) {
	case Native:
		return b.Workers
	case *OneDNN:
		return b.workers
	}
	return 0
}

// trivialGemm checks a float32-output GEMM's arguments (a panic on a
// programmer error, as checkGemm says) and does the products with nothing
// to sum: none for an empty C, C = beta·C for k = 0. It reports whether
// that was all; la and lb are the lengths of A and B.
func trivialGemm(op string, transA, transB bool, m, n, k, la, lda, lb, ldb int, beta float32, c []float32, ldc int) bool {
	if err := checkGemm(op, transA, transB, m, n, k, la, lda, lb, ldb, len(c), ldc); err != nil {
		panic(err)
	}
	if m == 0 || n == 0 {
		return true
	}
	if k == 0 {
		scaleC(beta, c, m, n, ldc)
		return true
	}
	return false
}
