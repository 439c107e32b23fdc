//go:build !purego

package blas

import "golang.org/x/sys/cpu"

// nativeAsmImpl returns the AVX2/FMA implementation when the CPU and OS
// support it (x/sys/cpu checks that the OS saves the YMM state), with the
// 12×16 AVX-512 kernel where the CPU has AVX-512F; nil otherwise.
func nativeAsmImpl() *nativeImpl {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		impl := &nativeImpl{name: "AVX2/FMA", kern: nativeKernelAVX2, packA6: nativePackA6AVX, packBT16: nativePackBT16AVX, packB16: nativePackB16AVX,
			kernStrided: nativeKernelStridedAVX2}
		if cpu.X86.HasAVX512F {
			// Same bits as the AVX2 kernel (tested tile by tile); the
			// name says which one runs, for bench output and READMEs.
			impl.kern12 = nativeKernel12AVX512
			impl.name = "AVX-512/FMA"
		}
		return impl
	}
	return nil
}

// nativeKernel12AVX512 is a nativeKernel over two consecutive micro-panels
// of packed A: a holds 2·kc·nativeMR floats and C 2·nativeMR rows.
func nativeKernel12AVX512(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	_ = a[2*kc*nativeMR-1]
	_ = b[kc*nativeNR-1]
	_ = c[(2*nativeMR-1)*ldc+nativeNR-1]
	load := 1
	if beta == 0 {
		load = 0
	}
	sgemm12x16AVX512(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, load)
}

// sgemm12x16AVX512 is sgemm6x16AVX2 on a 12×16 tile: a points at two
// consecutive 6-row micro-panels of packed A.
//
//go:noescape
func sgemm12x16AVX512(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int)

// The wrappers bound-check everything the assembly touches, which then runs
// unchecked.

func nativeKernelAVX2(kc int, a, b, c []float32, ldc int, alpha, beta float32) {
	_ = a[kc*nativeMR-1]
	_ = b[kc*nativeNR-1]
	_ = c[(nativeMR-1)*ldc+nativeNR-1]
	load := 1
	if beta == 0 {
		load = 0
	}
	sgemm6x16AVX2(kc, &a[0], &b[0], &c[0], ldc, alpha, beta, load)
}

func nativeKernelStridedAVX2(kc int, a []float32, aRow, aStep int, b []float32, bStep int, c []float32, ldc int, alpha, beta float32) {
	_ = a[(nativeMR-1)*aRow+(kc-1)*aStep]
	_ = b[(kc-1)*bStep+nativeNR-1]
	_ = c[(nativeMR-1)*ldc+nativeNR-1]
	load := 1
	if beta == 0 {
		load = 0
	}
	sgemm6x16StridedAVX2(kc, &a[0], aRow, aStep, &b[0], bStep, &c[0], ldc, alpha, beta, load)
}

func nativePackA6AVX(dst, a []float32, lda, kc int) {
	if k8 := kc &^ 7; k8 > 0 {
		_ = dst[k8*nativeMR-1]
		_ = a[(nativeMR-1)*lda+k8-1]
		packA6AVX(k8/8, &a[0], lda, &dst[0])
	}
	if kc&7 != 0 {
		k8 := kc &^ 7
		nativePackA6Go(dst[k8*nativeMR:], a[k8:], lda, kc-k8)
	}
}

func nativePackBT16AVX(dst, b []float32, ldb, kc int) {
	if k8 := kc &^ 7; k8 > 0 {
		_ = dst[k8*nativeNR-1]
		_ = b[(nativeNR-1)*ldb+k8-1]
		packBT16AVX(k8/8, &b[0], ldb, &dst[0])
	}
	if kc&7 != 0 {
		k8 := kc &^ 7
		nativePackBT16Go(dst[k8*nativeNR:], b[k8:], ldb, kc-k8)
	}
}

func nativePackB16AVX(dst, b []float32, ldb, kc int) {
	if k4 := kc &^ 3; k4 > 0 {
		_ = dst[k4*nativeNR-1]
		_ = b[(k4-1)*ldb+nativeNR-1]
		packB16AVX(k4/4, &b[0], ldb, &dst[0])
	}
	if kc&3 != 0 {
		k4 := kc &^ 3
		nativePackB16Go(dst[k4*nativeNR:], b[k4*ldb:], ldb, kc-k4)
	}
}

// sgemm6x16AVX2 computes the 6×16 tile C = alpha·acc + beta·C (C not read
// when load == 0) with acc = Σ_p a[6p:6p+6]ᵀ·b[16p:16p+16], kc ≥ 1, ldc
// in elements.
//
//go:noescape
func sgemm6x16AVX2(kc int, a, b, c *float32, ldc int, alpha, beta float32, load int)

// sgemm6x16StridedAVX2 is sgemm6x16AVX2 reading element (i, p) of op(A) at
// a[i·aRow + p·aStep] and row p of op(B) at b[p·bStep] (strides in
// elements): the same bits as on the packed panels.
//
//go:noescape
func sgemm6x16StridedAVX2(kc int, a *float32, aRow, aStep int, b *float32, bStep int, c *float32, ldc int, alpha, beta float32, load int)

// packA6AVX packs 8·k8 columns of six rows of a (row stride lda elements)
// into dst[p·6+r], k8 ≥ 1.
//
//go:noescape
func packA6AVX(k8 int, a *float32, lda int, dst *float32)

// packBT16AVX packs 8·k8 columns of sixteen rows of b (row stride ldb
// elements) into dst[p·16+j], k8 ≥ 1.
//
//go:noescape
func packBT16AVX(k8 int, b *float32, ldb int, dst *float32)

// packB16AVX packs 4·k4 rows of sixteen floats of b (row stride ldb
// elements) into dst[p·16+j], k4 ≥ 1.
//
//go:noescape
func packB16AVX(k4 int, b *float32, ldb int, dst *float32)
