package nn

import (
	"math"
	"unsafe"
)

// isF32 is a compile-time constant in each instantiation, so the branches
// below cost nothing.
func isF32[T Float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}

// exp is e^x: a float32 polynomial for float32 (within 2 ulp of the exact
// value, see TestExpf), math.Exp for float64 so gradient checks see exact
// math.
func exp[T Float](x T) T {
	if isF32[T]() {
		return T(expf(float32(x)))
	}
	return T(math.Exp(float64(x)))
}

func sqrt[T Float](x T) T { return T(math.Sqrt(float64(x))) }

func log[T Float](x T) T { return T(math.Log(float64(x))) }

// sigmoid is 1/(1+e^-x), written so that neither branch overflows.
func sigmoid[T Float](x T) T {
	if x >= 0 {
		return 1 / (1 + exp(-x))
	}
	e := exp(x)
	return e / (1 + e)
}

// expf computes e^x in float32 arithmetic: x = n·ln2 + r with |r| ≤ ln2/2,
// e^r by a degree-6 polynomial, and 2^n put into the exponent bits. It
// stays in float32 registers, unlike math.Exp on float64, which is what
// makes softmax, cross-entropy and SiLU cheap.
func expf(x float32) float32 {
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	switch {
	case x != x:
		return x
	case x > 88.72283905206835:
		return float32(math.Inf(1))
	case x < -103.972077083991796:
		return 0
	}
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*ln2hi - n*ln2lo
	// Cephes expf coefficients for e^r - 1 - r on [-ln2/2, ln2/2].
	p := float32(1.9875691500e-4)
	p = p*r + 1.3981999507e-3
	p = p*r + 8.3334519073e-3
	p = p*r + 4.1665795894e-2
	p = p*r + 1.6666665459e-1
	p = p*r + 5.0000001201e-1
	y := p*r*r + r + 1
	ni := int32(n)
	if ni < -126 { // subnormal result: scale in two steps
		return y * math.Float32frombits(uint32(ni+126+127)<<23) * math.Float32frombits(1<<23)
	}
	if ni > 127 {
		return y * 2 * math.Float32frombits(uint32(ni-1+127)<<23)
	}
	return y * math.Float32frombits(uint32(ni+127)<<23)
}

// sigmoidSlice sets dst[i] = sigmoid(src[i]) (float32), bit for bit; dst
// may be src. Sixteen at a time where the CPU allows.
func sigmoidSlice(dst, src []float32) {
	dst = dst[:len(src)]
	for len(src) >= 16 && haveSigmoidFast() {
		n := sigmoidFast(dst, src)
		dst, src = dst[n:], src[n:]
		if len(src) >= 16 { // a block that needs expf's rare paths
			for i := range 16 {
				dst[i] = sigmoid(src[i])
			}
			dst, src = dst[16:], src[16:]
		}
	}
	for i, x := range src {
		dst[i] = sigmoid(x)
	}
}

// expSubSlice sets dst[i] = exp(src[i] - m) (float32: expf), bit for bit;
// dst may be src. Sixteen at a time where the CPU allows.
func expSubSlice(dst, src []float32, m float32) {
	dst = dst[:len(src)]
	for len(src) >= 16 && haveSigmoidFast() {
		n := expfSubFast(dst, src, m)
		dst, src = dst[n:], src[n:]
		if len(src) >= 16 { // a block that needs expf's rare paths
			for i := range 16 {
				dst[i] = expf(src[i] - m)
			}
			dst, src = dst[16:], src[16:]
		}
	}
	for i, x := range src {
		dst[i] = expf(x - m)
	}
}

// expSub sets dst[i] = exp(src[i] - m), vectorized for float32 (the same
// bits as exp); dst may be src.
func expSub[T Float](dst, src []T, m T) {
	if isF32[T]() {
		expSubSlice(any(dst).([]float32), any(src).([]float32), float32(m))
		return
	}
	for i, x := range src {
		dst[i] = exp(x - m)
	}
}

// The sums of attention's softmax and of its gradient run in one fixed
// order, sum16's: element j into partial sum j mod 16, each partial in
// element order, then the partials folded in halves (fold16). Sixteen
// sums in flight are one AVX-512 register, so the assembly adds each
// block of exponentials as it computes them; the order depends on the
// row's length alone, never on threads or on the CPU.

// fold16 is s[0] + ... + s[15] as halves folded onto halves: s[k] +=
// s[k+8], then s[k] += s[k+4], s[k] += s[k+2], and s[0] + s[1].
func fold16[T Float](s *[16]T) T {
	for w := 8; w > 1; w /= 2 {
		for k := range w {
			s[k] += s[k+w]
		}
	}
	return s[0] + s[1]
}

// sum16 is Σ x in sum16's order.
func sum16[T Float](x []T) T {
	var s [16]T
	for j, v := range x {
		s[j&15] += v
	}
	return fold16(&s)
}

// dot16 is Σ a⊙b in sum16's order, each product rounded before it is
// added.
func dot16[T Float](a, b []T) T {
	if a32, ok := any(a).([]float32); ok {
		if d, ok := dotFast(a32, any(b).([]float32)); ok {
			return T(d)
		}
	}
	var s [16]T
	b = b[:len(a)]
	for j, x := range a {
		s[j&15] += T(x * b[j])
	}
	return fold16(&s)
}

// expSubSum sets dst[i] = exp(src[i] - m), as expSub does, and returns
// Σ dst in sum16's order; dst may be src.
func expSubSum[T Float](dst, src []T, m T) T {
	if !isF32[T]() || !haveAVX512 {
		expSub(dst, src, m)
		return sum16(dst[:len(src)])
	}
	d, x, m32 := any(dst).([]float32)[:len(src)], any(src).([]float32), float32(m)
	var s [16]float32
	for j := 0; j < len(x); {
		n, sum := expSubSumFast(d[j:], x[j:], m32, &s)
		if j += n; j == len(x) {
			return T(sum)
		}
		end := min(j+16, len(x)) // the block the assembly left (j is a multiple of 16)
		for i := j; i < end; i++ {
			d[i] = expf(x[i] - m32)
			s[i&15] += d[i]
		}
		j = end
	}
	return T(fold16(&s))
}
