package blas

import (
	"runtime"
	"strconv"
)

// OneDNN calls Intel's oneDNN (libdnnl.so.2) through purego, as OpenBLAS
// is called: no cgo, no build-time dependency, and a machine without the
// library still runs on Native. Its row-major C API has an fp32 GEMM
// (dnnl_sgemm) and a bf16×bf16→fp32 one (dnnl_gemm_bf16bf16f32), which
// GemmBF16 exposes.
//
// oneDNN picks its blocking, its copy or no-copy kernels and whether to
// split k across threads by the number of OpenMP threads it may use, so
// its sums depend on that number. mixtune therefore gives each call one
// OpenMP thread (omp_set_num_threads(1) on the calling OS thread) and,
// like OpenBLAS, cuts a large product into fixed row blocks of C that
// goroutines share: results do not depend on the thread count.
type OneDNN struct {
	name    string
	workers int
	isa     uint32 // dnnl_get_effective_cpu_isa: the kernels oneDNN dispatches to
	// rowBlock is the rows of C per call in a split product.
	rowBlock int
	// ompThreads, when > 0, hands each whole product to oneDNN's own
	// OpenMP threads instead (benchmarks only: results then depend on it).
	ompThreads int
	setThreads func(int32) // omp_set_num_threads, nil if oneDNN has no OpenMP runtime
	sgemm      func(ta, tb byte, m, n, k int64, alpha float32, a *float32, lda int64, b *float32, ldb int64, beta float32, c *float32, ldc int64) int32
	bgemm      func(ta, tb byte, m, n, k int64, alpha float32, a *uint16, lda int64, b *uint16, ldb int64, beta float32, c *float32, ldc int64) int32
}

// Name says which library and runtime run.
func (o *OneDNN) Name() string { return o.name }

// Sgemm computes C = alpha·op(A)·op(B) + beta·C in float32 (row-major).
func (o *OneDNN) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if trivialGemm("onednn Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, beta, c, ldc) {
		return
	}
	o.run(transA, m, n, k, lda, ldc, func(rows, aOff, cOff int) int32 {
		return o.sgemm(dnnlOp(transA), dnnlOp(transB), int64(rows), int64(n), int64(k),
			alpha, &a[aOff], int64(lda), &b[0], int64(ldb), beta, &c[cOff], int64(ldc))
	})
}

// Dgemm computes C = alpha·op(A)·op(B) + beta·C in float64 through gonum:
// oneDNN has no float64 GEMM (mixtune only uses one for gradient checks).
func (o *OneDNN) Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	Gonum{}.Dgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// BF16 says whether GemmBF16 runs on this CPU: oneDNN 2.x implements its
// bf16 GEMM with AVX-512 instructions (emulating bf16 products where the
// CPU lacks AVX512_BF16) and answers "unimplemented" below AVX-512, on an
// AVX2-only CPU such as AMD Zen 3.
func (o *OneDNN) BF16() bool { return o.avx512() }

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C with A and B bf16 bit
// patterns and C float32 (row-major). Products of two bf16 values are
// exact in float32; they are summed in float32. It panics where BF16 is
// false.
func (o *OneDNN) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if trivialGemm("onednn GemmBF16", transA, transB, m, n, k, len(a), lda, len(b), ldb, beta, c, ldc) {
		return
	}
	o.run(transA, m, n, k, lda, ldc, func(rows, aOff, cOff int) int32 {
		return o.bgemm(dnnlOp(transA), dnnlOp(transB), int64(rows), int64(n), int64(k),
			alpha, &a[aOff], int64(lda), &b[0], int64(ldb), beta, &c[cOff], int64(ldc))
	})
}

// run calls gemm on fixed row blocks of C (splitRows), each on an OS
// thread whose OpenMP thread count is set first: the count is per thread
// and a goroutine may move between threads from one call to the next.
func (o *OneDNN) run(transA bool, m, n, k, lda, ldc int, gemm func(rows, aOff, cOff int) int32) {
	call := func(rows, aOff, cOff int, threads int32) {
		runtime.LockOSThread()
		if o.setThreads != nil {
			o.setThreads(threads)
		}
		st := gemm(rows, aOff, cOff)
		runtime.UnlockOSThread()
		if st != 0 {
			panic("blas: onednn: " + dnnlStatus(st))
		}
	}
	if o.ompThreads > 0 {
		call(m, 0, 0, int32(o.ompThreads))
		return
	}
	splitRows(o.workers, o.rowBlock, transA, m, n, k, lda, ldc, func(lo, hi, aOff, cOff int) {
		call(hi-lo, aOff, cOff, 1)
	})
}

// dnnl_cpu_isa_t masks (dnnl_types.h): an ISA includes the bits of those
// below it.
const (
	dnnlISAAVX2       = 0x7
	dnnlISAAVX512Core = 0x27
	dnnlISAAVX512BF16 = 0xe7
)

// avx512 says whether oneDNN runs its AVX-512 kernels: where its fp32 GEMM
// was measured faster than Native's AVX2/FMA kernel (README, Performance).
func (o *OneDNN) avx512() bool { return o.isa&dnnlISAAVX512Core == dnnlISAAVX512Core }

// isaLabel names the kernels oneDNN dispatches to.
func (o *OneDNN) isaLabel() string {
	switch {
	case o.isa&dnnlISAAVX512BF16 == dnnlISAAVX512BF16:
		return "AVX-512 with BF16"
	case o.isa&dnnlISAAVX512Core == dnnlISAAVX512Core:
		return "AVX-512, bf16 emulated"
	case o.isa&dnnlISAAVX2 == dnnlISAAVX2:
		return "AVX2"
	}
	return "below AVX2"
}

func dnnlOp(t bool) byte {
	if t {
		return 'T'
	}
	return 'N'
}

// dnnlStatus names a dnnl_status_t (dnnl_types.h).
func dnnlStatus(st int32) string {
	switch st {
	case 1:
		return "out of memory"
	case 2:
		return "invalid arguments"
	case 3:
		return "unimplemented (this CPU lacks the instructions, or the library was built without the kernel)"
	}
	return "status " + strconv.Itoa(int(st))
}

// oneDNNRowBlock is the rows of C per oneDNN call in a split product:
// each call packs all of op(B) again, and 256 rows were 5-15% faster than
// OpenBLAS's 128 at training shapes on one and two threads, while 512
// left one of two workers idle at 512 tokens.
const oneDNNRowBlock = 256
