package blas

import (
	"fmt"
	"strings"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/mixtune/mixtune/internal/par"
)

// CBLAS enum values (cblas.h).
const (
	cblasRowMajor = 101
	cblasNoTrans  = 111
	cblasTrans    = 112
)

// OpenBLAS calls a system OpenBLAS through purego: no cgo, no build-time
// dependency, and a machine without the library still runs on Native.
// It is loaded with dlopen, so only where purego has it (Linux, macOS,
// FreeBSD, NetBSD); elsewhere OpenOpenBLAS says it is not available.
//
// OpenBLAS's own threads are switched off: they spin while waiting for
// work and then fight the Go scheduler for the same cores, which measured
// 2.4x slower on a training step. Instead a large product is cut into
// fixed row blocks of C that goroutines share, each calling
// single-threaded OpenBLAS, so results do not depend on the thread count.
type OpenBLAS struct {
	name    string
	core    string // openblas_get_corename: the kernels it chose, "" if unknown
	workers int
	sgemm   func(order, ta, tb, m, n, k int32, alpha float32, a *float32, lda int32, b *float32, ldb int32, beta float32, c *float32, ldc int32)
	dgemm   func(order, ta, tb, m, n, k int32, alpha float64, a *float64, lda int32, b *float64, ldb int32, beta float64, c *float64, ldc int32)
}

func (o *OpenBLAS) Name() string { return o.name }

func (o *OpenBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if err := checkGemm("openblas Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc); err != nil {
		panic(err) // a caller bug, like gonum's own argument panics: the C library cannot check slice bounds
	}
	if k == 0 {
		scaleC(beta, c, m, n, ldc)
		return
	}
	splitRows(o.workers, openBLASRowBlock, transA, m, n, k, lda, ldc, func(lo, hi, aOff, cOff int) {
		o.sgemm(cblasRowMajor, cblasOp(transA), cblasOp(transB), int32(hi-lo), int32(n), int32(k),
			alpha, &a[aOff], int32(lda), &b[0], int32(ldb), beta, &c[cOff], int32(ldc))
	})
}

func (o *OpenBLAS) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if err := checkGemm("openblas Dgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc); err != nil {
		panic(err)
	}
	if k == 0 {
		scaleC(beta, c, m, n, ldc)
		return
	}
	splitRows(o.workers, openBLASRowBlock, transA, m, n, k, lda, ldc, func(lo, hi, aOff, cOff int) {
		o.dgemm(cblasRowMajor, cblasOp(transA), cblasOp(transB), int32(hi-lo), int32(n), int32(k),
			alpha, &a[aOff], int32(lda), &b[0], int32(ldb), beta, &c[cOff], int32(ldc))
	})
}

// openBLASRowBlock is the rows of C per OpenBLAS call in a split product.
const openBLASRowBlock = 128

// splitRows calls gemm on row blocks of C, in parallel when the product
// is large enough to repay a goroutine. The blocks are always rowBlock
// rows, whatever the worker count: OpenBLAS and oneDNN pick their kernels
// by the shape they are given, so the block shape, not the thread count,
// must decide which kernel computes each row. aOff and cOff are where a
// block's rows of op(A) and C start.
func splitRows(workers, rowBlock int, transA bool, m, n, k, lda, ldc int, gemm func(lo, hi, aOff, cOff int)) {
	const minFlops = 1 << 21 // below ~2 MFLOP a single call is faster
	if m <= rowBlock || 2*m*n*k < 2*minFlops {
		gemm(0, m, 0, 0)
		return
	}
	blocks := (m + rowBlock - 1) / rowBlock
	call := func(b int) {
		lo, hi := b*rowBlock, min((b+1)*rowBlock, m)
		aOff := lo * lda
		if transA {
			aOff = lo // op(A) row i is stored column i
		}
		gemm(lo, hi, aOff, lo*ldc)
	}
	w := min(workers, blocks)
	if w <= 1 {
		for b := 0; b < blocks; b++ {
			call(b)
		}
		return
	}
	par.Run(w, func(i int) {
		for b := i; b < blocks; b += w {
			call(b)
		}
	})
}

// x86Features are the CPU features OpenBLAS's x86 kernel families need.
type x86Features struct{ avx, avx2, fma, avx512, avx512bf16, amx bool }

func hostX86Features() x86Features {
	x := cpu.X86
	return x86Features{
		avx: x.HasAVX, avx2: x.HasAVX2, fma: x.HasFMA,
		avx512:     x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512DQ,
		avx512bf16: x.HasAVX512BF16, amx: x.HasAMXBF16 && x.HasAMXTile,
	}
}

// openBLASCoreCheck refuses an OpenBLAS whose kernel family needs
// instructions this CPU lacks. OpenBLAS runs whatever OPENBLAS_CORETYPE
// names without checking, and its first product then dies of SIGILL
// (SkylakeX on an AVX2-only Zen 3 did). Families it does not list here
// (older ones, other architectures) are trusted.
func openBLASCoreCheck(core string, f x86Features) error {
	var need string
	ok := true
	switch strings.ToLower(core) {
	case "sandybridge":
		need, ok = "AVX", f.avx
	case "haswell", "zen":
		need, ok = "AVX2 and FMA", f.avx2 && f.fma
	case "skylakex":
		need, ok = "AVX-512 (F, BW, VL, DQ)", f.avx512
	case "cooperlake":
		need, ok = "AVX-512 with BF16", f.avx512 && f.avx512bf16
	case "sapphirerapids":
		need, ok = "AVX-512 with BF16 and AMX", f.avx512 && f.avx512bf16 && f.amx
	}
	if ok {
		return nil
	}
	return fmt.Errorf("OpenBLAS chose its %s kernels, which need %s, and this CPU lacks it: unset OPENBLAS_CORETYPE, or set it to a family this CPU runs", core, need)
}

func cblasOp(t bool) int32 {
	if t {
		return cblasTrans
	}
	return cblasNoTrans
}

func scaleC[T float32 | float64](beta T, c []T, m, n, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		for j := range row {
			if beta == 0 {
				row[j] = 0
			} else {
				row[j] *= beta
			}
		}
	}
}

func cString(p *byte) string {
	if p == nil {
		return ""
	}
	var b []byte
	for ptr := unsafe.Pointer(p); *(*byte)(ptr) != 0; ptr = unsafe.Add(ptr, 1) {
		b = append(b, *(*byte)(ptr))
	}
	return strings.TrimSpace(string(b))
}
