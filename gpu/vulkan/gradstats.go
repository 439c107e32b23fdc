package vulkan

import "fmt"

// GradStatsGroups is how many workgroups GradStats's first pass uses for
// n values: a function of n alone, so the reduction order, and with it
// the bits of the sum, are the same on every device.
func GradStatsGroups(n int) int { return max(1, min(256, (n+4095)/4096)) }

// GradStats records the statistics of the n fp32 values of g starting at
// value off: their sum of squares (fp32), how many are zero and how many
// are NaN or ±Inf, written as three 32-bit words at out[3·slot..]. part
// holds the first pass's partial results: 3·GradStatsGroups(n) words.
// See shaders/gradstats.comp for the order and the error bound.
func (ks *Kernels) GradStats(r *Recorder, g *Buffer, off, n int, part, out *Buffer, slot int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: GradStats of %d values: %w", n, err) }
	if n < 1 || off < 0 || slot < 0 {
		return wrap(fmt.Errorf("bad count, offset %d or slot %d", off, slot))
	}
	groups := GradStatsGroups(n)
	if err := extent("g", g, off, 1, n, n, 4); err != nil {
		return wrap(err)
	}
	if err := extent("part", part, 0, 1, 3*groups, 3*groups, 4); err != nil {
		return wrap(err)
	}
	if err := extent("out", out, 3*slot, 1, 3, 3, 4); err != nil {
		return wrap(err)
	}
	k, err := ks.kernel("gradstats.spv", 3, 5*4)
	if err != nil {
		return wrap(err)
	}
	if err := r.Dispatch(k, []*Buffer{g, part, out}, pushWords(n, groups, 0, slot, off), uint32(groups), 1, 1); err != nil {
		return wrap(err)
	}
	if err := r.Dispatch(k, []*Buffer{g, part, out}, pushWords(n, groups, 1, slot, off), 1, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}
