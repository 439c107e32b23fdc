package vkengine

import (
	"encoding/binary"
	"fmt"

	"github.com/mixtune/mixtune/gpu/vulkan"
)

// gradCounts tally, for CountUnderflows, the gradient values a program's
// runs round to a 16-bit format between ops (known on the host as the
// roundings are recorded) and those the rounding sends to zero from
// nonzero (counted on the device): nn.Engine.Grads' tallies, from which
// training logs grad_underflow_frac.
type gradCounts struct {
	buf     *vulkan.Buffer // the underflows, 64 bits, low word first
	rounded int64
}

// CountUnderflows makes the program count its gradients' roundings and
// underflows (TakeGradCounts), as the CPU engine does at the same
// rounding points: every gradient an op rounds to its input's format,
// the logits' gradient in the fused head, a gradient's rounding to its
// op's output format.
func CountUnderflows() CompileOption {
	return func(p *Program) { p.counting = true }
}

// startCounting makes the counter, zeroed, when the program counts.
func (p *Program) startCounting() error {
	if !p.counting || p.root != nil {
		return nil
	}
	b, err := p.allocOwn(8)
	if err != nil {
		return err
	}
	p.counts = &gradCounts{buf: b}
	return b.Write(0, make([]byte, 8))
}

// roundGrad rounds n gradient values of buf in place to rnd, counting
// them and their underflows when the program counts.
func (p *Program) roundGrad(r *vulkan.Recorder, buf *vulkan.Buffer, n int, rnd vulkan.Rounding) error {
	if rnd == vulkan.NoRounding {
		return nil
	}
	return p.scaleGrad(r, buf, buf, n, 1, rnd)
}

// scaleGrad is z = rnd(s·x) over n gradient values, counted as roundGrad
// counts.
func (p *Program) scaleGrad(r *vulkan.Recorder, x, z *vulkan.Buffer, n int, s float32, rnd vulkan.Rounding) error {
	c := p.top().counts
	if c == nil || rnd == vulkan.NoRounding {
		return p.e.Kernels.Scale(r, x, z, n, s, rnd)
	}
	c.rounded += int64(n)
	return p.e.Kernels.ScaleCount(r, x, z, n, s, rnd, c.buf)
}

// countPassed counts n gradient values handed on already in their format
// as rounded (none underflows), as the CPU counts them.
func (p *Program) countPassed(n int) {
	if c := p.top().counts; c != nil {
		c.rounded += int64(n)
	}
}

// TakeGradCounts returns the gradient values the program's runs rounded
// to 16 bits since the last call and how many of them the rounding sent
// to zero, and starts the tallies again (CountUnderflows; zeros
// otherwise). It reads 8 bytes from the device and writes 8.
func (p *Program) TakeGradCounts() (rounded, underflowed int64, err error) {
	c := p.top().counts
	if c == nil {
		return 0, 0, nil
	}
	var w [8]byte
	if err := c.buf.Read(0, w[:]); err != nil {
		return 0, 0, fmt.Errorf("vkengine: read the gradient counts: %w", err)
	}
	if err := c.buf.Write(0, make([]byte, 8)); err != nil {
		return 0, 0, fmt.Errorf("vkengine: reset the gradient counts: %w", err)
	}
	p.Transfers.Down += 8
	p.Transfers.Up += 8
	rounded, c.rounded = c.rounded, 0
	return rounded, int64(binary.LittleEndian.Uint64(w[:])), nil
}
