//go:build !amd64 || purego

package nn

func sigmoidFast(dst, src []float32) int            { return 0 }
func haveSigmoidFast() bool                         { return false }
func expfSubFast(dst, src []float32, m float32) int { return 0 }

func mulMulFast(y, a, b, c []float32) int                  { return 0 }
func swigluGradAFast(d, g, u, s, a []float32) int          { return 0 }
func addScaledFast(y, a, b []float32, s float32) int       { return 0 }
func scaleFast(y, x []float32, s float32) int              { return 0 }
func mulSubFast(y, a, b []float32, s float32) int          { return 0 }
func scaleMulFast(y, x, w []float32, s float32) int        { return 0 }
func rmsGradFast(d, gr, w, x []float32, c, rs float32) int { return 0 }
func accMulMulFast(p, gr, x []float32, s float32) int      { return 0 }
func maxFast(x []float32) (float32, bool)                  { return 0, false }

const haveAVX512, haveAVX2, haveMaxAVX2 = false, false, false // no assembly: the scalar loops run

func expSubSumFast(dst, src []float32, m float32, acc *[16]float32) (int, float32) { return 0, 0 }
func dotFast(a, b []float32) (float32, bool)                                       { return 0, false }

func sumSqFast(x []float32, acc *[16]float64) int        { return 0 }
func rmsDotFast(g, w, x []float32, acc *[16]float64) int { return 0 }

func ropeHeadsFast(row, c, s []float32, sign float32, half, heads int) int { return 0 }

func sum8Fast(x []float32, acc *[8]float64) int { return 0 }
