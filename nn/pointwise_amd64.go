//go:build amd64 && !purego

package nn

//go:noescape
func mulMulAVX2(y, a, b, c *float32, n int)

//go:noescape
func swigluGradAAVX2(d, gr, u, s, a *float32, n int)

//go:noescape
func addScaledAVX2(y, a, b *float32, s float32, n int)

//go:noescape
func scaleAVX2(y, x *float32, s float32, n int)

// The fast prefixes below run the leading multiple of 8 of a loop in
// assembly where haveAVX2 (which rules out a Go that fuses FMAs, whose
// scalar loops the assembly would not match) and return its length; the
// callers finish the rest in Go. Every slice is at least as long as the
// first.

func mulMulFast(y, a, b, c []float32) int {
	n := len(y) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _ = a[n-1], b[n-1], c[n-1]
	mulMulAVX2(&y[0], &a[0], &b[0], &c[0], n)
	return n
}

func swigluGradAFast(d, g, u, s, a []float32) int {
	n := len(d) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _, _ = g[n-1], u[n-1], s[n-1], a[n-1]
	swigluGradAAVX2(&d[0], &g[0], &u[0], &s[0], &a[0], n)
	return n
}

func addScaledFast(y, a, b []float32, s float32) int {
	n := len(y) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1]
	addScaledAVX2(&y[0], &a[0], &b[0], s, n)
	return n
}

// maxFast is max over x (at least 16 values) in AVX2, and true, where
// that is exactly Go's max: a maximum that is not zero over values none of
// which is NaN (VMAXPS returns its second operand for a NaN or a pair of
// zeros, where Go's max gives NaN and orders −0 below +0). Otherwise
// false: the caller's scalar loop decides.
func maxFast(x []float32) (float32, bool) {
	if !haveMaxAVX2 || len(x) < 16 {
		return 0, false
	}
	m, nan := maxAVX2(&x[0], len(x))
	if nan != 0 || m == 0 {
		return 0, false
	}
	return m, true
}

//go:noescape
func maxAVX2(x *float32, n int) (m float32, nan int)

func scaleFast(y, x []float32, s float32) int {
	n := len(y) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_ = x[n-1]
	scaleAVX2(&y[0], &x[0], s, n)
	return n
}

//go:noescape
func mulSubAVX2(y, a, b *float32, s float32, n int)

func mulSubFast(y, a, b []float32, s float32) int {
	n := len(y) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1]
	mulSubAVX2(&y[0], &a[0], &b[0], s, n)
	return n
}

//go:noescape
func scaleMulAVX2(y, x, w *float32, s float32, n int)

//go:noescape
func rmsGradAVX2(d, gr, w, x *float32, c, rs float32, n int)

//go:noescape
func accMulMulAVX2(p, gr, x *float32, s float32, n int)

func scaleMulFast(y, x, w []float32, s float32) int {
	n := len(y) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _ = x[n-1], w[n-1]
	scaleMulAVX2(&y[0], &x[0], &w[0], s, n)
	return n
}

func rmsGradFast(d, gr, w, x []float32, c, rs float32) int {
	n := len(d) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _, _ = gr[n-1], w[n-1], x[n-1]
	rmsGradAVX2(&d[0], &gr[0], &w[0], &x[0], c, rs, n)
	return n
}

func accMulMulFast(p, gr, x []float32, s float32) int {
	n := len(p) &^ 7
	if !haveAVX2 || n == 0 {
		return 0
	}
	_, _ = gr[n-1], x[n-1]
	accMulMulAVX2(&p[0], &gr[0], &x[0], s, n)
	return n
}

//go:noescape
func ropeHeadsAVX2(row, c, s *float32, sign float32, n8, half, heads int)

// ropeHeadsFast rotates the first half&^7 pairs of every head of row
// (heads·2·half values) by c and s as RotateRows does, in one call, where
// the CPU has AVX2, and returns how many pairs of each head it did.
func ropeHeadsFast(row, c, s []float32, sign float32, half, heads int) int {
	n8 := half &^ 7
	if !haveAVX2 || n8 == 0 || heads == 0 {
		return 0
	}
	_, _, _ = row[heads*2*half-1], c[n8-1], s[n8-1]
	ropeHeadsAVX2(&row[0], &c[0], &s[0], sign, n8, half, heads)
	return n8
}
