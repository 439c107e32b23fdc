package vulkan

import (
	"fmt"
	"math"
)

// RopeArgs describe a rotary position embedding over Rows rows of
// Heads·2·Half values: row r is at position Positions[r] (Rows int32
// values) or, when Positions is nil, r mod SeqLen. Inverse rotates by the
// opposite angles (RoPE's backward).
type RopeArgs struct {
	Rows, Heads, Half, SeqLen int
	Positions                 *Buffer
	Inverse                   bool
}

// RopeTableLen is the number of float32 values of a rope table for
// seqLen positions and half frequencies: the cosines, then the sines,
// each [seqLen, half] (nn.RopeTable's Cos and Sin, one after the other).
func RopeTableLen(seqLen, half int) int { return 2 * seqLen * half }

// Rope records y = x rotated as nn.RopeTable.RotateRows rotates it (HF's
// rotate_half pairing), with the cos and sin of table (RopeTableLen
// values). A position outside the table leaves its row of y unwritten:
// the caller checks positions it reads from the host.
func (ks *Kernels) Rope(r *Recorder, x, table, y *Buffer, a RopeArgs) error {
	wrap := func(err error) error {
		return fmt.Errorf("vulkan: Rope %d rows of %d heads × %d: %w", a.Rows, a.Heads, 2*a.Half, err)
	}
	if a.Rows < 0 || a.Heads <= 0 || a.Half <= 0 || a.SeqLen <= 0 {
		return wrap(fmt.Errorf("rows must be ≥ 0, heads, half and seqLen > 0"))
	}
	pairs := uint64(a.Rows) * uint64(a.Heads) * uint64(a.Half)
	if pairs > math.MaxUint32/2 {
		return wrap(fmt.Errorf("%d pairs exceed the kernel's 32-bit indexing", pairs))
	}
	if a.Rows == 0 {
		return nil
	}
	width := a.Heads * 2 * a.Half
	checks := []matrixCheck{{"x", x, a.Rows, width}, {"table", table, 1, RopeTableLen(a.SeqLen, a.Half)}}
	pos := table // bound but never read
	if a.Positions != nil {
		pos = a.Positions
		checks = append(checks, matrixCheck{"positions", pos, 1, a.Rows})
	}
	checks = append(checks, matrixCheck{"y", y, a.Rows, width})
	if err := checkMatrices(checks, len(checks)-1); err != nil {
		return wrap(err)
	}
	k, err := ks.kernel("rope.spv", 4, 6*4)
	if err != nil {
		return wrap(err)
	}
	sign := float32(1)
	if a.Inverse {
		sign = -1
	}
	push := pushWords(uint32(pairs), a.Heads, a.Half, a.SeqLen, a.Positions != nil, sign)
	if err := r.Dispatch(k, []*Buffer{x, table, pos, y}, push, ks.groups1D(int(pairs)), 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}
