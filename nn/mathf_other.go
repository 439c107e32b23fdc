//go:build !amd64 || purego

package nn

func sigmoidFast(dst, src []float32) int            { return 0 }
func haveSigmoidFast() bool                         { return false }
func expfSubFast(dst, src []float32, m float32) int { return 0 }
