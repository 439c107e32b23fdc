package blas

// The model of TDPBF16PS (Intel SDM, "TDPBF16PS—Dot Product of BF16 Tiles
// Accumulated into Packed Single Precision Tile", Operation): for each
// element (m, n) of the destination tile, two fp32 temporaries start from
// zero and, over the K pairs of the source tiles in order (K = 16 here),
//
//	even += a[m][k].bf16[0] · b[k][n].bf16[0]
//	odd  += a[m][k].bf16[1] · b[k][n].bf16[1]
//
// each an fp32 FMA; then dst[m][n] += even + odd, the pair's sum rounded
// first. Every step rounds to nearest even with DAZ and FTZ (denormal
// inputs read as zero, denormal results flushed); MXCSR is not read.
// roundFTZ, f32DAZ and bf16DAZ (native_bf16_model.go) compute one such
// step exactly: the product of two bf16 values is exact in float64.

// tdpbf16psModel is one element of TDPBF16PS: c plus the dot product of
// the K pairs a[p] and b[p] (dwords, the even element in the low half).
func tdpbf16psModel(c float32, a, b []uint32) float32 {
	var even, odd float32
	for p := range a {
		even = roundFTZ(f32DAZ(even) + bf16DAZ(uint16(a[p]))*bf16DAZ(uint16(b[p])))
		odd = roundFTZ(f32DAZ(odd) + bf16DAZ(uint16(a[p]>>16))*bf16DAZ(uint16(b[p]>>16)))
	}
	return roundFTZ(f32DAZ(c) + f32DAZ(roundFTZ(f32DAZ(even)+f32DAZ(odd))))
}

// amxModelKernel is amxK32x32 computed with the model of TDPBF16PS, 16
// pairs per instruction as the kernel's loop takes them; the epilogue is
// scaleBF16Sum's.
func amxModelKernel(kcp int, a, b []uint32, acc, c []float32, ldc int, alpha, beta float32, mode int) {
	if kcp <= 0 || kcp%amxKStep != 0 {
		panic("blas: AMX kernel: k slice not a positive multiple of 16 pairs")
	}
	var col [amxKStep]uint32
	for i := 0; i < amxMR; i++ {
		for j := 0; j < bf16NR; j++ {
			var s float32
			if mode&bf16Load != 0 {
				s = acc[i*bf16NR+j]
			}
			for p0 := 0; p0 < kcp; p0 += amxKStep {
				for p := range col {
					col[p] = b[(p0+p)*bf16NR+j]
				}
				s = tdpbf16psModel(s, a[i*kcp+p0:i*kcp+p0+amxKStep], col[:])
			}
			finishBF16Sum(s, mode, acc, i*bf16NR+j, c, i*ldc+j, alpha, beta)
		}
	}
}

// NewNativeAMXGo returns NativeBF16's driver as it runs the AMX kernel
// (32×32 tiles, k padded to 16 pairs, op(A) packed row-major) on a Go
// kernel that computes TDPBF16PS's semantics above, exactly and slowly:
// the same bits as the AMX kernel, on any CPU. It exists for tests: of
// callers, on machines without AMX.
func NewNativeAMXGo(workers int) *NativeBF16 {
	if workers <= 0 {
		workers = 1
	}
	micro := amxMicro
	micro.kern = amxModelKernel
	return &NativeBF16{workers: workers, micro: micro, name: "native bf16 driver on a Go model of AMX TDPBF16PS (tests only)"}
}
