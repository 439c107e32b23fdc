package vulkan

import "fmt"

// BiasAdd records y[r, j] = x[r, j] + b[j] over rows×d fp32 values
// (packed rows), one rounded sum each: the CPU's bits. x and y may be
// the same buffer.
func (ks *Kernels) BiasAdd(r *Recorder, x, b, y *Buffer, rows, d int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: BiasAdd %d×%d: %w", rows, d, err) }
	if rows < 0 || d <= 0 {
		return wrap(fmt.Errorf("rows must be ≥ 0 and d > 0"))
	}
	if rows == 0 {
		return nil
	}
	for name, m := range map[string]struct {
		buf  *Buffer
		rows int
	}{"x": {x, rows}, "b": {b, 1}, "y": {y, rows}} {
		if err := extent(name, m.buf, 0, m.rows, d, d, 4); err != nil {
			return wrap(err)
		}
	}
	if y == b {
		return wrap(fmt.Errorf("y must not share a buffer with b"))
	}
	n := rows * d
	return ks.dispatch(r, wrap, "bias_add.spv", []*Buffer{x, b, y}, pushWords(n, d), ks.groups1D(n))
}

// BiasGrad records db[j] = Σ_r g[r, j] over rows of length d, summing
// each block of chunk rows in row order and then the blocks in order
// (nn.BiasAttrs.RowChunk: the CPU's order, so its bits).
func (ks *Kernels) BiasGrad(r *Recorder, g, db *Buffer, rows, d, chunk int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: BiasGrad %d×%d: %w", rows, d, err) }
	if rows < 0 || d <= 0 || chunk <= 0 {
		return wrap(fmt.Errorf("rows must be ≥ 0, d and chunk > 0 (chunk %d)", chunk))
	}
	if err := extent("db", db, 0, 1, d, d, 4); err != nil {
		return wrap(err)
	}
	if rows > 0 {
		if err := extent("g", g, 0, rows, d, d, 4); err != nil {
			return wrap(err)
		}
	}
	if g == db {
		return wrap(fmt.Errorf("db must not share a buffer with g"))
	}
	return ks.dispatch(r, wrap, "bias_grad.spv", []*Buffer{g, db}, pushWords(rows, d, chunk), ks.groups1D(d))
}
