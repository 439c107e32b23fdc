package vulkan

import (
	"fmt"
	"math"
)

// DropoutMask is the draw of one dropout op's keep mask (nn.DropoutAttrs):
// a Rows×Cols mask from the noise key Key, the op's noise id ID and the
// index of its first row in the whole batch RowOffset, each element kept
// with probability 1 − P.
type DropoutMask struct {
	Rows, Cols    int
	Key           uint64
	ID, RowOffset int
	P             float64
}

// Words is the mask's size in 32-bit words: each row's bits start a word.
func (m DropoutMask) Words() int { return m.Rows * m.wordsPerRow() }

func (m DropoutMask) wordsPerRow() int { return (m.Cols + 31) / 32 }

// Dropout records the draw of m into mask (m.Words() words), bit for bit
// the CPU's (shaders/dropout_mask.comp).
func (ks *Kernels) Dropout(r *Recorder, m DropoutMask, mask *Buffer) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: dropout mask %d×%d: %w", m.Rows, m.Cols, err) }
	if m.Rows < 0 || m.Cols <= 0 || !(m.P >= 0 && m.P < 1) {
		return wrap(fmt.Errorf("rows must be ≥ 0, cols > 0 and p in [0, 1) (p %g)", m.P))
	}
	if m.Rows == 0 {
		return nil
	}
	if err := extent("mask", mask, 0, 1, m.Words(), m.Words(), 4); err != nil {
		return wrap(err)
	}
	// kept when the top 53 bits u satisfy u/2^53 ≥ p, that is u ≥ ⌈p·2^53⌉
	// (p·2^53 is exact: a power-of-two scaling)
	thr := uint64(math.Ceil(m.P * (1 << 53)))
	push := pushWords(m.Rows, m.Cols, m.wordsPerRow(), uint32(m.Key), uint32(m.Key>>32),
		uint32(m.ID), uint32(m.RowOffset), uint32(thr), uint32(thr>>32))
	return ks.dispatch(r, wrap, "dropout_mask.spv", []*Buffer{mask}, push, ks.groups1D(m.Words()))
}

// DropoutApply records y = x·scale where mask (drawn by Dropout for
// rows×cols) keeps the value and 0 elsewhere: the forward pass on x, the
// backward pass on the output's gradient. x and y may be the same buffer.
func (ks *Kernels) DropoutApply(r *Recorder, mask, x, y *Buffer, rows, cols int, scale float32) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: dropout %d×%d: %w", rows, cols, err) }
	if rows < 0 || cols <= 0 {
		return wrap(fmt.Errorf("rows must be ≥ 0 and cols > 0"))
	}
	if rows == 0 {
		return nil
	}
	m := DropoutMask{Rows: rows, Cols: cols}
	if err := extent("mask", mask, 0, 1, m.Words(), m.Words(), 4); err != nil {
		return wrap(err)
	}
	n := rows * cols
	if err := checkN(n, map[string]*Buffer{"x": x, "y": y}); err != nil {
		return wrap(err)
	}
	if mask == x || mask == y {
		return wrap(fmt.Errorf("the mask must not share a buffer with x or y"))
	}
	push := pushWords(n, cols, m.wordsPerRow(), scale)
	return ks.dispatch(r, wrap, "dropout_apply.spv", []*Buffer{mask, x, y}, push, ks.groups1D(n))
}
