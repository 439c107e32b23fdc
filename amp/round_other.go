//go:build !amd64 || purego

package amp

func roundBF16Slice(xs []float32) {
	for i, x := range xs {
		xs[i] = roundBF16(x)
	}
}

func roundFP16Slice(xs []float32) {
	for i, x := range xs {
		xs[i] = roundFP16(x)
	}
}

func countUnderflow(xs []float32, limit uint32) int { return countUnderflowScalar(xs, limit) }

func widen16Fast(Format, []float32, []uint16) int { return 0 }

func narrow16Fast(Format, []uint16, []float32) int { return 0 }

func roundBF16To8(dst, src []float32) int { return 0 }

func roundFP16To8(dst, src []float32) int { return 0 }

func roundBF16Fast(dst, src []float32, limit uint32) (done, under int) { return 0, 0 }

func roundFP16Fast(dst, src []float32, limit uint32) (done, under int) { return 0, 0 }
