//go:build amd64 && !purego

package nn

import (
	"math"

	"golang.org/x/sys/cpu"
)

// haveAVX512: sigmoid runs sixteen values at a time in assembly; else
// haveAVX2: eight at a time. Not where Go itself fuses expf's multiplies
// and adds into FMAs (GOAMD64=v3 and up), which the assembly's unfused
// steps would not match.
// haveMaxAVX2 is the maximum's kernel: no arithmetic to fuse, so it runs
// wherever the CPU has AVX2.
var (
	haveAVX512  = cpu.X86.HasAVX512F && !goFusesFMA
	haveAVX2    = cpu.X86.HasAVX2 && !goFusesFMA
	haveMaxAVX2 = cpu.X86.HasAVX2
)

//go:noescape
func sigmoidAVX2(dst, src *float32, n int, c8 *[14][8]float32) int

//go:noescape
func expfSubAVX2(dst, src *float32, n int, m float32, c8 *[14][8]float32) int

// expfConsts8 are expfConsts and the sign bit and exponent bias, each
// repeated over 8 lanes, as sigmoidAVX2 and expfSubAVX2 read them.
var expfConsts8 = func() (c [14][8]float32) {
	for i, v := range append(expfConsts[:], math.Float32frombits(0x80000000), math.Float32frombits(127)) {
		for j := range c[i] {
			c[i][j] = v
		}
	}
	return c
}()

//go:noescape
func sigmoidAVX512(dst, src *float32, n int, c *[12]float32) int

// expfConsts are expf's constants as float32, in sigmoidAVX512's order.
var expfConsts = [12]float32{
	1.44269504088896341, 0.5, 0.693359375, -2.12194440e-4,
	1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1,
	1, math.Float32frombits(uint32(0xffffff82)), // -126 as an int32
}

// sigmoidFast sets dst[i] = sigmoid(src[i]) for the leading values it can
// do in assembly and returns how many: a multiple of 16, stopping before
// a block of 16 that needs expf's rare paths.
func sigmoidFast(dst, src []float32) int {
	n := len(src) &^ 15
	if !haveSigmoidFast() || n == 0 {
		return 0
	}
	_ = dst[n-1]
	if !haveAVX512 {
		return sigmoidAVX2(&dst[0], &src[0], n, &expfConsts8)
	}
	return sigmoidAVX512(&dst[0], &src[0], n, &expfConsts)
}
func haveSigmoidFast() bool { return haveAVX512 || haveAVX2 }

//go:noescape
func expfSubAVX512(dst, src *float32, n int, m float32, c *[12]float32) int

// expfSubFast sets dst[i] = expf(src[i] - m) for the leading values it
// can do in assembly and returns how many (see sigmoidFast).
func expfSubFast(dst, src []float32, m float32) int {
	n := len(src) &^ 15
	if !haveSigmoidFast() || n == 0 {
		return 0
	}
	_ = dst[n-1]
	if !haveAVX512 {
		return expfSubAVX2(&dst[0], &src[0], n, m, &expfConsts8)
	}
	return expfSubAVX512(&dst[0], &src[0], n, m, &expfConsts)
}

//go:noescape
func expfSubSumAVX512(dst, src *float32, n int, m float32, c *[12]float32, acc *[16]float32) (done int, sum float32)

//go:noescape
func dotAVX512(a, b *float32, n int) float32

// expSubSumFast sets dst[i] = expf(src[i] - m) and adds each to partial
// sum acc[i mod 16], in order, for the leading values it can do in
// assembly, and returns how many: all of them, with the sum (fold16 of
// the partials), or a multiple of 16 before a block that needs expf's
// rare paths, with the partials back in acc.
func expSubSumFast(dst, src []float32, m float32, acc *[16]float32) (int, float32) {
	if !haveAVX512 || len(src) == 0 {
		return 0, 0
	}
	_ = dst[len(src)-1]
	return expfSubSumAVX512(&dst[0], &src[0], len(src), m, &expfConsts, acc)
}

// dotFast is dot16(a, b) in AVX-512, and whether the CPU allows it.
func dotFast(a, b []float32) (float32, bool) {
	if !haveAVX512 {
		return 0, false
	}
	if len(a) == 0 {
		return 0, true
	}
	_ = b[len(a)-1]
	return dotAVX512(&a[0], &b[0], len(a)), true
}

// haveF64SumsAVX512: meanSquare's and rmsDot's sixteen float64 sums and
// sum8's eight run in AVX-512 (sumSqF64AVX512, rmsDotF64AVX512,
// sum8F64AVX512). Every term they add is exact in float64, so fusing a
// product into the sum changes no bit: no condition on how Go itself
// fuses.
var haveF64SumsAVX512 = cpu.X86.HasAVX512F

//go:noescape
func sumSqF64AVX512(x *float32, n16 int, acc *[16]float64)

//go:noescape
func rmsDotF64AVX512(gr, w, x *float32, n16 int, acc *[16]float64)

// sumSqFast adds float64(x[j])² into acc[j mod 16] for the leading whole
// blocks of sixteen it can do in assembly, acc being zero, and returns
// how many values it did.
func sumSqFast(x []float32, acc *[16]float64) int {
	n := len(x) &^ 15
	if !haveF64SumsAVX512 || n == 0 {
		return 0
	}
	sumSqF64AVX512(&x[0], n/16, acc)
	return n
}

// rmsDotFast is sumSqFast for rmsDot's terms, float64(g·w)·float64(x).
func rmsDotFast(g, w, x []float32, acc *[16]float64) int {
	n := len(x) &^ 15
	if !haveF64SumsAVX512 || n == 0 {
		return 0
	}
	_, _ = g[n-1], w[n-1]
	rmsDotF64AVX512(&g[0], &w[0], &x[0], n/16, acc)
	return n
}

//go:noescape
func sum8F64AVX512(x *float32, n8 int, acc *[8]float64)

// sum8Fast adds float64(x[j]) into acc[j mod 8] for the leading whole
// blocks of eight it can do in assembly, acc being zero, and returns how
// many values it did: sum8's partial sums, each in its own order.
func sum8Fast(x []float32, acc *[8]float64) int {
	n := len(x) &^ 7
	if !haveF64SumsAVX512 || n == 0 {
		return 0
	}
	sum8F64AVX512(&x[0], n/8, acc)
	return n
}
