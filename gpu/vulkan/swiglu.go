package vulkan

import "fmt"

// SwiGLU records y = silu(a)·u over n fp32 values (nn.SwiGLU's forward;
// shaders/swiglu.comp states its error). y must not be a or u.
func (ks *Kernels) SwiGLU(r *Recorder, a, u, y *Buffer, n int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: SwiGLU of %d values: %w", n, err) }
	if err := checkN(n, map[string]*Buffer{"a": a, "u": u, "y": y}); err != nil {
		return wrap(err)
	}
	if y == a || y == u {
		return wrap(fmt.Errorf("y must not share a buffer with a or u"))
	}
	if n == 0 {
		return nil
	}
	return ks.dispatch(r, wrap, "swiglu_fwd.spv", []*Buffer{a, u, y}, pushWords(n), ks.groups1D(n))
}

// SwiGLUBackward records SwiGLU's gradients over n values given the
// output's gradient g: da = g·u·σ(a)·(1 + a·(1 − σ(a))) and du =
// g·a·σ(a). A nil da or du is not computed; at least one must be given,
// and neither may be an input.
func (ks *Kernels) SwiGLUBackward(r *Recorder, a, u, g, da, du *Buffer, n int) error {
	wrap := func(err error) error { return fmt.Errorf("vulkan: SwiGLU backward of %d values: %w", n, err) }
	if da == nil && du == nil {
		return wrap(fmt.Errorf("neither gradient asked for"))
	}
	// an unused gradient's binding aliases the other, which the kernel
	// does not write through it
	bda, bdu := da, du
	if da == nil {
		bda = du
	}
	if du == nil {
		bdu = da
	}
	if err := checkN(n, map[string]*Buffer{"a": a, "u": u, "g": g, "da": bda, "du": bdu}); err != nil {
		return wrap(err)
	}
	for _, out := range []*Buffer{bda, bdu} {
		if out == a || out == u || out == g {
			return wrap(fmt.Errorf("a gradient must not share a buffer with an input"))
		}
	}
	if n == 0 {
		return nil
	}
	push := pushWords(n, da != nil, du != nil)
	return ks.dispatch(r, wrap, "swiglu_bwd.spv", []*Buffer{a, u, g, bda, bdu}, push, ks.groups1D(n))
}

// dispatch records the kernel of the embedded shaders/file (built on first
// use) over groups 1-D workgroups, binding bufs with push constants push;
// its errors are wrapped by wrap.
func (ks *Kernels) dispatch(r *Recorder, wrap func(error) error, file string, bufs []*Buffer, push []byte, groups uint32) error {
	k, err := ks.kernel(file, len(bufs), len(push))
	if err == nil {
		err = r.Dispatch(k, bufs, push, groups, 1, 1)
	}
	if err != nil {
		return wrap(err)
	}
	return nil
}
