package vulkan

import "fmt"

// Rounding names the 16-bit format values are rounded to while they stay
// fp32 (a rounding point of mixed precision), or none.
type Rounding uint32

// The roundings, numbered as the shaders take them.
const (
	NoRounding Rounding = iota
	RoundBF16
	RoundFP16
)

func (r Rounding) String() string {
	switch r {
	case NoRounding:
		return "fp32"
	case RoundBF16:
		return "bf16"
	case RoundFP16:
		return "fp16"
	}
	return fmt.Sprintf("Rounding(%d)", uint32(r))
}

// checkN checks that each buffer holds n float32 values.
func checkN(n int, bufs map[string]*Buffer) error {
	if n < 0 || n > 1<<31 {
		return fmt.Errorf("bad count %d", n)
	}
	for name, b := range bufs {
		if err := extent(name, b, 0, 1, max(n, 1), max(n, 1), 4); err != nil {
			return err
		}
	}
	return nil
}

// AddScaled records z = rnd(x + rs(s·y)) over n values: rnd rounds to
// round (NoRounding keeps fp32), rs is rnd when roundScaled is set and
// s ≠ 1. x, y and z may be the same buffer.
func (ks *Kernels) AddScaled(r *Recorder, x, y, z *Buffer, n int, s float32, roundScaled bool, round Rounding) error {
	return ks.elementwise(r, "AddScaled", 0, x, y, z, n, s, roundScaled, round)
}

// Scale records z = rnd(s·x) over n values (a copy when s is 1 and round
// NoRounding); x and z may be the same buffer.
func (ks *Kernels) Scale(r *Recorder, x, z *Buffer, n int, s float32, round Rounding) error {
	return ks.elementwise(r, "Scale", 1, x, x, z, n, s, false, round)
}

// Round records the rounding of n fp32 values of x to round, in place.
func (ks *Kernels) Round(r *Recorder, x *Buffer, n int, round Rounding) error {
	if round == NoRounding {
		return nil
	}
	return ks.elementwise(r, "Round", 2, x, x, x, n, 1, false, round)
}

// ScaleCount is Scale for a gradient's rounding: it also adds the number
// of nonzero values the rounding sends to zero (amp's
// Format.Underflows) to the 64-bit count in counter's first two words
// (low, then high), which only it writes while it runs.
func (ks *Kernels) ScaleCount(r *Recorder, x, z *Buffer, n int, s float32, round Rounding, counter *Buffer) error {
	if counter == nil {
		return fmt.Errorf("vulkan: ScaleCount: no counter")
	}
	return ks.elementwiseCount(r, "ScaleCount", 1, x, x, z, n, s, false, round, counter)
}

func (ks *Kernels) elementwise(r *Recorder, name string, mode uint32, x, y, z *Buffer, n int, s float32, roundScaled bool, round Rounding) error {
	return ks.elementwiseCount(r, name, mode, x, y, z, n, s, roundScaled, round, nil)
}

// elementwiseCount is elementwise, counting underflows into counter
// when it is not nil.
func (ks *Kernels) elementwiseCount(r *Recorder, name string, mode uint32, x, y, z *Buffer, n int, s float32, roundScaled bool, round Rounding, counter *Buffer) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: %s of %d values: %w", name, n, err) }
	if round > RoundFP16 {
		return wrap(fmt.Errorf("unknown rounding %d", round))
	}
	if err := checkN(n, map[string]*Buffer{"x": x, "y": y, "z": z}); err != nil {
		return wrap(err)
	}
	if n == 0 {
		return nil
	}
	file, bufs := "elementwise.spv", []*Buffer{x, y, z}
	if counter != nil {
		if err := extent("counter", counter, 0, 1, 2, 2, 4); err != nil {
			return wrap(err)
		}
		if counter == x || counter == y || counter == z {
			return wrap(fmt.Errorf("the counter must be a buffer of its own"))
		}
		file, bufs = "elementwise_count.spv", append(bufs, counter)
	}
	k, err := ks.kernel(file, len(bufs), 5*4)
	if err != nil {
		return wrap(err)
	}
	push := pushWords(uint32(n), mode, uint32(round), roundScaled, s)
	if err := r.Dispatch(k, bufs, push, ks.groups1D(n), 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}
