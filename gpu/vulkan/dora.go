package vulkan

import (
	"fmt"
	"math"
)

// halfCode is a 16-bit format as the shaders number formats (half.glsl:
// 1 bf16, 2 fp16, as the matching Rounding).
func halfCode(h Half) (uint32, error) {
	switch h {
	case BF16:
		return uint32(RoundBF16), nil
	case FP16:
		return uint32(RoundFP16), nil
	}
	return 0, fmt.Errorf("unknown 16-bit format %d", h)
}

// Widen16 records y = round(widen(bits)) over n 16-bit values of format h
// packed two to a word in bits (Buffer.WriteUint16's layout): the exact
// fp32 values, rounded to round (NoRounding keeps them). A frozen 16-bit
// weight read by a matmul computing in the other 16-bit format is widened
// and rounded to that format first, as nn's weights16 does.
func (ks *Kernels) Widen16(r *Recorder, h Half, bits, y *Buffer, n int, round Rounding) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: Widen16 %s of %d values: %w", h, n, err) }
	src, err := halfCode(h)
	if err != nil {
		return wrap(err)
	}
	if round > RoundFP16 {
		return wrap(fmt.Errorf("unknown rounding %d", round))
	}
	if n < 0 || n > math.MaxUint32-1 {
		return wrap(fmt.Errorf("bad count"))
	}
	if n == 0 {
		return nil
	}
	if err := extent("bits", bits, 0, 1, n, n, 2); err != nil {
		return wrap(err)
	}
	if err := checkN(n, map[string]*Buffer{"y": y}); err != nil {
		return wrap(err)
	}
	if bits == y {
		return wrap(fmt.Errorf("y must not be the bits' buffer"))
	}
	k, err := ks.kernel("widen16.spv", 2, 3*4)
	if err != nil {
		return wrap(err)
	}
	if err := r.Dispatch(k, []*Buffer{bits, y}, pushWords(uint32(n), src, uint32(round)), ks.groups1D(n), 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}

// DoRANormArgs describe DoRA's row norms (nn.DoRANorm):
// Norm[o] = max(‖W[o] + Scale·B[o]·A‖₂, Floor) for W [Rows, Cols],
// A [R, Cols] and B [Rows, R], all row-major and packed. W holds float32
// values, or 16-bit ones of format WHalf when W16 is set.
type DoRANormArgs struct {
	Rows, Cols, R int
	W, A, B, Norm *Buffer
	W16           bool
	WHalf         Half
	Scale, Floor  float32
}

// DoRANorm records the row norms a describes, summed in fp32 in a fixed
// order (shaders/dora_norm.comp): deterministic, within a few ulps of
// the exact norm when the update does not cancel W.
func (ks *Kernels) DoRANorm(r *Recorder, a DoRANormArgs) error {
	wrap := func(err error) error {
		return fmt.Errorf("vulkan: DoRANorm %d×%d rank %d: %w", a.Rows, a.Cols, a.R, err)
	}
	if a.Rows < 0 || a.Cols < 0 || a.R < 0 {
		return wrap(fmt.Errorf("negative size"))
	}
	if a.Rows == 0 {
		return nil
	}
	wfmt, welem := uint32(0), 4
	if a.W16 {
		var err error
		if wfmt, err = halfCode(a.WHalf); err != nil {
			return wrap(err)
		}
		welem = 2
	}
	checks := []struct {
		name       string
		b          *Buffer
		rows, cols int
		elem       int
	}{
		{"W", a.W, a.Rows, a.Cols, welem},
		{"A", a.A, a.R, a.Cols, 4},
		{"B", a.B, a.Rows, a.R, 4},
		{"Norm", a.Norm, 1, a.Rows, 4},
	}
	for _, c := range checks {
		if c.rows == 0 || c.cols == 0 { // an empty operand is bound, not read
			if c.b == nil || c.b.h == 0 {
				return wrap(fmt.Errorf("%s: %w", c.name, ErrFreed))
			}
			continue
		}
		if err := extent(c.name, c.b, 0, c.rows, c.cols, c.cols, c.elem); err != nil {
			return wrap(err)
		}
	}
	if a.Norm == a.W || a.Norm == a.A || a.Norm == a.B {
		return wrap(fmt.Errorf("Norm must not share a buffer with W, A or B"))
	}
	k, err := ks.kernel("dora_norm.spv", 4, 6*4)
	if err != nil {
		return wrap(err)
	}
	push := pushWords(uint32(a.Rows), uint32(a.Cols), uint32(a.R), wfmt, a.Scale, a.Floor)
	groups := min(uint32(a.Rows), ks.d.Physical.MaxWorkgroupCount[0], 65535)
	if err := r.Dispatch(k, []*Buffer{a.W, a.A, a.B, a.Norm}, push, groups, 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}

// DoRAArgs are the inputs of DoRA's join (nn.DoRA): Base, Lora (and BaseD
// with dropout; nil without) are [Rows, Cols]; M and Norm are [Cols], and
// g = M/Norm scales each column.
type DoRAArgs struct {
	Rows, Cols        int
	Base, BaseD, Lora *Buffer
	M, Norm           *Buffer
	Scale             float32
}

func (a DoRAArgs) check() error {
	if a.Rows < 0 || a.Cols <= 0 || a.Rows*a.Cols > math.MaxUint32/2 {
		return fmt.Errorf("bad shape %d×%d", a.Rows, a.Cols)
	}
	bufs := map[string]*Buffer{"Base": a.Base, "Lora": a.Lora}
	if a.BaseD != nil {
		bufs["BaseD"] = a.BaseD
	}
	if err := checkN(a.Rows*a.Cols, bufs); err != nil {
		return err
	}
	return checkN(a.Cols, map[string]*Buffer{"M": a.M, "Norm": a.Norm})
}

// baseD is the buffer bound as BaseD, and whether it is read.
func (a DoRAArgs) baseD() (*Buffer, bool) {
	if a.BaseD == nil {
		return a.Base, false
	}
	return a.BaseD, true
}

// DoRA records y = g·(Base + s·Lora), or Base + (g − 1)·BaseD + g·(s·Lora)
// with dropout, in nn.DoRA's fp32 order of operations.
func (ks *Kernels) DoRA(r *Recorder, a DoRAArgs, y *Buffer) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: DoRA %d×%d: %w", a.Rows, a.Cols, err) }
	if err := a.check(); err != nil {
		return wrap(err)
	}
	n := a.Rows * a.Cols
	if err := checkN(n, map[string]*Buffer{"y": y}); err != nil {
		return wrap(err)
	}
	if n == 0 {
		return nil
	}
	k, err := ks.kernel("dora.spv", 6, 4*4)
	if err != nil {
		return wrap(err)
	}
	bd, dropout := a.baseD()
	push := pushWords(uint32(n), uint32(a.Cols), dropout, a.Scale)
	if err := r.Dispatch(k, []*Buffer{a.Base, bd, a.Lora, a.M, a.Norm, y}, push, ks.groups1D(n), 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}

// DoRAGrads are the gradients DoRABackward writes, each rounded to its
// Rounding; a nil buffer is not computed.
type DoRAGrads struct {
	DBase, DBaseD, DLora, DM                 *Buffer
	RoundBase, RoundBaseD, RoundLora, RoundM Rounding
}

// DoRABackward records nn.DoRA's gradients for the output gradient gy
// [Rows, Cols]: dBase = g·gy (gy with dropout), dBaseD = (g − 1)·gy,
// dLora = (g·s)·gy and dM[j] = Σ_i gy·(X + s·Lora) / Norm[j], X being
// Base (BaseD with dropout), the sum compensated in fp32 in row order.
func (ks *Kernels) DoRABackward(r *Recorder, a DoRAArgs, gy *Buffer, d DoRAGrads) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: DoRA backward %d×%d: %w", a.Rows, a.Cols, err) }
	if err := a.check(); err != nil {
		return wrap(err)
	}
	for _, f := range []Rounding{d.RoundBase, d.RoundBaseD, d.RoundLora, d.RoundM} {
		if f > RoundFP16 {
			return wrap(fmt.Errorf("unknown rounding %d", f))
		}
	}
	n := a.Rows * a.Cols
	bufs := map[string]*Buffer{"gy": gy}
	want := uint32(0)
	outs := []*Buffer{d.DBase, d.DBaseD, d.DLora}
	for i, b := range outs {
		if b != nil {
			bufs[[]string{"dBase", "dBaseD", "dLora"}[i]] = b
			want |= 1 << i
		} else {
			outs[i] = gy // bound, never written
		}
	}
	if err := checkN(n, bufs); err != nil {
		return wrap(err)
	}
	bd, dropout := a.baseD()
	if d.DBaseD != nil && !dropout {
		return wrap(fmt.Errorf("dBaseD asked for without dropout"))
	}
	if n == 0 {
		return nil
	}
	if want != 0 {
		k, err := ks.kernel("dora_backward.spv", 6, 8*4)
		if err != nil {
			return wrap(err)
		}
		push := pushWords(uint32(n), uint32(a.Cols), dropout, want,
			uint32(d.RoundBase), uint32(d.RoundBaseD), uint32(d.RoundLora), a.Scale)
		if err := r.Dispatch(k, append([]*Buffer{gy, a.M, a.Norm}, outs...), push, ks.groups1D(n), 1, 1); err != nil {
			return wrap(err)
		}
	}
	if d.DM == nil {
		return nil
	}
	if err := checkN(a.Cols, map[string]*Buffer{"dM": d.DM}); err != nil {
		return wrap(err)
	}
	k, err := ks.kernel("dora_magnitude.spv", 5, 4*4)
	if err != nil {
		return wrap(err)
	}
	push := pushWords(uint32(a.Rows), uint32(a.Cols), uint32(d.RoundM), a.Scale)
	if err := r.Dispatch(k, []*Buffer{gy, bd, a.Lora, a.Norm, d.DM}, push, ks.groups1D(a.Cols), 1, 1); err != nil {
		return wrap(err)
	}
	return nil
}
