package vulkan

import (
	"fmt"
	"math"
)

// rmsDWChunks is how RMSNormWeightGrad splits rows rows: chunks of
// chunkRows consecutive rows (the last may be shorter), about 32 rows
// each as the CPU's reduceChunk, but never more than 256 chunks (longer
// ones then) so the second pass stays short. Both depend on rows only, so
// the summation order is fixed for a shape.
func rmsDWChunks(rows int) (chunks, chunkRows int) {
	chunks = min((rows+31)/32, 256)
	chunkRows = (rows + chunks - 1) / chunks
	return (rows + chunkRows - 1) / chunkRows, chunkRows
}

// RMSNormWeightGradScratch is the number of float32 values the part
// buffer of RMSNormWeightGrad must hold for rows rows of d values.
func RMSNormWeightGradScratch(rows, d int) int {
	if rows <= 0 {
		return 0
	}
	chunks, _ := rmsDWChunks(rows)
	return chunks * d
}

// RMSNormBackward records the per-row part of RMSNorm's backward over rows
// rows of d values (packed): rstd[r] = 1/sqrt(mean(x[r]²) + eps) and,
// unless dx is nil, dx = rstd·(g⊙w − x·(Σ g⊙w⊙x)·rstd²/d) as nn's RMSNorm
// backward computes it (the sums in fp32 here; see
// shaders/rmsnorm_bwd.comp).
func (ks *Kernels) RMSNormBackward(r *Recorder, x, w, g, dx, rstd *Buffer, rows, d int, eps float64) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: RMSNormBackward %d×%d: %w", rows, d, err) }
	if rows < 0 || d <= 0 || !(eps >= 0) {
		return wrap(fmt.Errorf("rows must be ≥ 0, d > 0 and eps ≥ 0 (eps %g)", eps))
	}
	if rows == 0 {
		return nil
	}
	wantDX := dx != nil
	checks := []matrixCheck{{"x", x, rows, d}, {"w", w, 1, d}, {"g", g, rows, d}, {"rstd", rstd, 1, rows}}
	if wantDX {
		checks = append(checks, matrixCheck{"dx", dx, rows, d})
	} else {
		dx = rstd // bound but never written
	}
	if err := checkMatrices(checks, 3); err != nil {
		return wrap(err)
	}
	if wantDX && dx == rstd {
		return wrap(fmt.Errorf("dx and rstd must be two buffers"))
	}
	k, err := ks.kernel("rmsnorm_bwd.spv", 5, 4*4)
	if err != nil {
		return wrap(err)
	}
	push := pushWords(uint32(rows), uint32(d), float32(eps), wantDX)
	groups := min(uint32(rows), ks.d.Physical.MaxWorkgroupCount[0], 65535)
	if err := r.Dispatch(k, []*Buffer{x, w, g, dx, rstd}, push, groups, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}

// RMSNormWeightGrad records dw[j] = Σ_r g[r, j]·x[r, j]·rstd[r] over rows
// rows of d values, with rstd from RMSNormBackward: partial sums over
// fixed chunks of rows into part (RMSNormWeightGradScratch values), then
// their sum in chunk order, so the result is the same at every run and on
// every device that rounds fp32 as IEEE 754 says.
func (ks *Kernels) RMSNormWeightGrad(r *Recorder, x, g, rstd, part, dw *Buffer, rows, d int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: RMSNormWeightGrad %d×%d: %w", rows, d, err) }
	if rows <= 0 || d <= 0 || rows > math.MaxInt32 {
		return wrap(fmt.Errorf("rows and d must be > 0"))
	}
	chunks, chunkRows := rmsDWChunks(rows)
	if err := checkMatrices([]matrixCheck{{"x", x, rows, d}, {"g", g, rows, d}, {"rstd", rstd, 1, rows},
		{"part", part, chunks, d}, {"dw", dw, 1, d}}, 3); err != nil {
		return wrap(err)
	}
	if part == dw {
		return wrap(fmt.Errorf("part and dw must be two buffers"))
	}
	k, err := ks.kernel("rmsnorm_bwd_dw.spv", 5, 5*4)
	if err != nil {
		return wrap(err)
	}
	bufs := []*Buffer{x, g, rstd, part, dw}
	for mode, n := range []int{chunks * d, d} {
		push := pushWords(uint32(rows), uint32(d), uint32(chunkRows), uint32(chunks), uint32(mode))
		if err := r.Dispatch(k, bufs, push, ks.groups1D(n), 1, 1); err != nil {
			return wrap(err)
		}
	}
	return nil
}

// matrixCheck is a packed rows×cols float32 (or int32) operand of a kernel.
type matrixCheck struct {
	name       string
	b          *Buffer
	rows, cols int
}

// checkMatrices checks that each operand fits its buffer and that none of
// the first inputs operands (read only) shares a buffer with one of the
// others (written).
func checkMatrices(ms []matrixCheck, inputs int) error {
	for _, m := range ms {
		if err := extent(m.name, m.b, 0, m.rows, m.cols, m.cols, 4); err != nil {
			return err
		}
	}
	for _, in := range ms[:inputs] {
		for _, out := range ms[inputs:] {
			if in.b == out.b {
				return fmt.Errorf("%s must not share a buffer with %s", out.name, in.name)
			}
		}
	}
	return nil
}
