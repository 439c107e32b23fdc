//go:build amd64 && !purego

package amp

import "golang.org/x/sys/cpu"

// On amd64 with AVX2, slices are rounded eight values at a time in
// assembly: the same integer recipe as roundBF16 and roundFP16 (see
// TestRoundExhaustive), which is what keeps the cost of
// emulating a low precision small.
var haveAVX2 = cpu.X86.HasAVX2

// haveAVX512 (F, with the OS saving the ZMM state, and POPCNT): bf16 and
// fp16 rounding run sixteen values at a time, with the underflow count in
// the same pass.
var haveAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasPOPCNT

//go:noescape
func roundBF16CountAVX512(dst, src *float32, n int, limit uint32) int

// roundBF16Fast rounds the leading multiple of 16 values of src into dst
// (which may be src) in assembly where the CPU allows, counting the
// values of magnitude in (0, limit]; it returns how many values it did
// and the count.
func roundBF16Fast(dst, src []float32, limit uint32) (done, under int) {
	return roundFast(roundBF16CountAVX512, dst, src, limit)
}

// roundFast runs an AVX-512 rounding kernel over the leading multiple of
// 16 values of src, where the CPU has AVX-512.
func roundFast(kernel func(dst, src *float32, n int, limit uint32) int, dst, src []float32, limit uint32) (done, under int) {
	n := len(src) &^ 15
	if !haveAVX512 || n == 0 {
		return 0, 0
	}
	_ = dst[n-1]
	return n, kernel(&dst[0], &src[0], n, limit)
}

//go:noescape
func roundFP16CountAVX512(dst, src *float32, n int, limit uint32) int

// roundFP16Fast is roundBF16Fast for fp16.
func roundFP16Fast(dst, src []float32, limit uint32) (done, under int) {
	return roundFast(roundFP16CountAVX512, dst, src, limit)
}

//go:noescape
func roundFP16AVX2(xs []float32)

func roundBF16Slice(xs []float32) {
	if n, _ := roundBF16Fast(xs, xs, 0); n > 0 {
		xs = xs[n:]
	}
	n := len(xs) &^ 7
	if haveAVX2 && n > 0 {
		roundBF16ToAVX2(xs[:n], xs[:n])
		xs = xs[n:]
	}
	for i, x := range xs {
		xs[i] = roundBF16(x)
	}
}

func roundFP16Slice(xs []float32) {
	if n, _ := roundFP16Fast(xs, xs, 0); n > 0 {
		xs = xs[n:]
	}
	n := len(xs) &^ 7
	if haveAVX2 && n > 0 {
		roundFP16AVX2(xs[:n])
		xs = xs[n:]
	}
	for i, x := range xs {
		xs[i] = roundFP16(x)
	}
}

//go:noescape
func widenBF16AVX2(dst []float32, src []uint16)

//go:noescape
func widenFP16F16C(dst []float32, src []uint16)

//go:noescape
func roundBF16ToAVX2(dst, src []float32)

// roundBF16To8 rounds the leading multiple of 8 values of src into dst
// (which may be src) in AVX2 where the CPU has it, and returns how many
// it rounded: what the AVX-512 kernels leave, on CPUs without them.
func roundBF16To8(dst, src []float32) int {
	n := len(src) &^ 7
	if n == 0 || !haveAVX2 {
		return 0
	}
	roundBF16ToAVX2(dst[:n], src[:n])
	return n
}

// roundFP16To8 is roundBF16To8 for fp16: copied into dst where it is
// not src, then rounded in place.
func roundFP16To8(dst, src []float32) int {
	n := len(src) &^ 7
	if n == 0 || !haveAVX2 {
		return 0
	}
	if &dst[0] != &src[0] {
		copy(dst[:n], src[:n])
	}
	roundFP16AVX2(dst[:n])
	return n
}

//go:noescape
func narrowBF16AVX2(dst []uint16, src []float32)

// narrow16Fast encodes the leading multiple of 8 values of src as bf16
// bits in assembly where the CPU allows (fp16 never: it stays on the
// scalar path), and returns how many it encoded. bf16 GEMMs that take
// bits (oneDNN's) have their fp32 operands encoded on every call.
func narrow16Fast(f Format, dst []uint16, src []float32) int {
	n := len(src) &^ 7
	if n == 0 || f != BF16 || !haveAVX2 {
		return 0
	}
	narrowBF16AVX2(dst[:n], src[:n])
	return n
}

func cpuidECX1() uint32

// haveF16C: the CPU converts fp16 to float32 in hardware (CPUID.1:ECX
// bit 29), exactly (subnormals included) and quieting NaNs, as
// fp16FromBits does (TestWidenAllValues).
var haveF16C = haveAVX2 && cpuidECX1()&(1<<29) != 0

// widen16Fast widens the leading multiple of 8 values of src in assembly
// where the CPU allows, and returns how many it widened. Widening 16-bit
// base weights runs inside every matmul over them.
func widen16Fast(f Format, dst []float32, src []uint16) int {
	n := len(src) &^ 7
	switch {
	case n == 0:
		return 0
	case f == BF16 && haveAVX2:
		widenBF16AVX2(dst[:n], src[:n])
	case f == FP16 && haveF16C:
		widenFP16F16C(dst[:n], src[:n])
	default:
		return 0
	}
	return n
}

//go:noescape
func countUnderflowAVX2(xs []float32, limit uint32) int

func countUnderflow(xs []float32, limit uint32) int {
	n := 0
	for haveAVX2 && len(xs) >= 8 {
		m := min(len(xs), 1<<30) &^ 7
		n += countUnderflowAVX2(xs[:m], limit)
		xs = xs[m:]
	}
	return n + countUnderflowScalar(xs, limit)
}
