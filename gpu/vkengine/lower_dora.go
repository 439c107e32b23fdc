package vkengine

import (
	"fmt"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// DoRA on the device: "dora_norm" computes the detached row norms
// ‖W + s·B·A‖ (nn.DoRANorm), "dora" joins the branches with g = m / norm
// (nn.DoRA) and "dora.backward" gives the gradients of base, baseD, lora
// and the magnitude m.
//
// The CPU computes a norm in float64 and rounds it once, caching it until
// the weights change; this engine recomputes it at every run in fp32
// (shaders/dora_norm.comp), in a fixed order. Its error, with
// v = W[o] + s·B[o]·A and r the rank: each v_j is off by at most
// γ_{2r+1}·(|W_j| + Σ_k |s·B_k|·|A_kj|) (s·B rounded, then r products and
// r sums in fp32), the compensated sum of squares adds 2u + O(n·u²) and
// the fixed 256-way tree 8u of Σv², and sqrt a few ulps: where s·B·A
// does not cancel W, the norm is within about (2r + 10)·u relative of
// the float64 one. So g = m/norm, which the CPU makes exactly 1 for a
// magnitude initialized from the same norms, is 1 within that bound here.

// lowerDoRANorm computes the norms into the node's [Out] output.
func lowerDoRANorm(p *Program, nd *node) (recordFunc, error) {
	a, ok := nd.spec.Attrs.(nn.DoRANormAttrs)
	if !ok {
		return nil, fmt.Errorf("attributes %T, want nn.DoRANormAttrs", nd.spec.Attrs)
	}
	args := vulkan.DoRANormArgs{Rows: a.Out, Cols: a.In, R: a.R, W: nd.in[0], A: nd.in[1], B: nd.in[2], Norm: nd.out,
		Scale: float32(a.Scale), Floor: float32(nn.DoRANormFloor)}
	if a.W16 {
		h, err := half(a.W16Format)
		if err != nil {
			return nil, err
		}
		args.W16, args.WHalf = true, h
	}
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		return p.e.Kernels.DoRANorm(r, args)
	}, nil
}

// doraArgs names a DoRA op's inputs, (base, [baseD], lora, m, norm) in
// the graph's order.
func doraArgs(a nn.DoRAAttrs, in []*vulkan.Buffer) (vulkan.DoRAArgs, error) {
	want := 4
	if a.Dropout {
		want = 5
	}
	if len(in) < want {
		return vulkan.DoRAArgs{}, fmt.Errorf("dora: %d inputs, want %d", len(in), want)
	}
	args := vulkan.DoRAArgs{Rows: a.N, Cols: a.Out, Base: in[0], Scale: float32(a.Scale)}
	rest := in[1:]
	if a.Dropout {
		args.BaseD, rest = in[1], in[2:]
	}
	args.Lora, args.M, args.Norm = rest[0], rest[1], rest[2]
	return args, nil
}

// lowerDoRA computes y = g·(base + s·lora) (or its dropout form) in fp32
// and rounds it to the op's format (fp32: "dora" is in no policy list).
func lowerDoRA(p *Program, nd *node) (recordFunc, error) {
	a, ok := nd.spec.Attrs.(nn.DoRAAttrs)
	if !ok {
		return nil, fmt.Errorf("attributes %T, want nn.DoRAAttrs", nd.spec.Attrs)
	}
	args, err := doraArgs(a, nd.in)
	if err != nil {
		return nil, err
	}
	rnd := rounding(nd.spec.Out)
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := p.e.Kernels.DoRA(r, args, nd.out); err != nil {
			return err
		}
		return p.e.Kernels.Round(r, nd.out, a.N*a.Out, rnd)
	}, nil
}

// lowerDoRABackward computes the gradients of base, baseD, lora and m
// (the norm is detached), each rounded to its input's format. The graph
// inputs are the forward's and then the output's gradient.
func lowerDoRABackward(p *Program, nd *node) (recordFunc, error) {
	a, ok := nd.spec.Forward.Attrs.(nn.DoRAAttrs)
	if !ok {
		return nil, fmt.Errorf("attributes %T, want nn.DoRAAttrs", nd.spec.Forward.Attrs)
	}
	args, err := doraArgs(a, nd.in)
	if err != nil {
		return nil, err
	}
	gy := nd.in[len(nd.in)-1]
	grad := func(i int) (*vulkan.Buffer, vulkan.Rounding) {
		if i >= len(nd.grads) {
			return nil, vulkan.NoRounding
		}
		return nd.grads[i], rounding(nd.spec.In[i])
	}
	var d vulkan.DoRAGrads
	d.DBase, d.RoundBase = grad(0)
	lora := 1
	if a.Dropout {
		d.DBaseD, d.RoundBaseD = grad(1)
		lora = 2
	}
	d.DLora, d.RoundLora = grad(lora)
	d.DM, d.RoundM = grad(lora + 1)
	if g, _ := grad(lora + 2); g != nil {
		return nil, fmt.Errorf("dora: the norm is detached, yet its gradient is asked for")
	}
	if p.top().counts == nil {
		return func(r *vulkan.Recorder, _ nn.Pass) error {
			return p.e.Kernels.DoRABackward(r, args, gy, d)
		}, nil
	}
	// Counting, the gradients are rounded after the kernel, each rounding
	// counted: the same values.
	type rounded struct {
		b   *vulkan.Buffer
		n   int
		rnd vulkan.Rounding
	}
	n := a.N * a.Out
	grads := []rounded{{d.DBase, n, d.RoundBase}, {d.DBaseD, n, d.RoundBaseD}, {d.DLora, n, d.RoundLora}, {d.DM, a.Out, d.RoundM}}
	d.RoundBase, d.RoundBaseD, d.RoundLora, d.RoundM = vulkan.NoRounding, vulkan.NoRounding, vulkan.NoRounding, vulkan.NoRounding
	return func(r *vulkan.Recorder, _ nn.Pass) error {
		if err := p.e.Kernels.DoRABackward(r, args, gy, d); err != nil {
			return err
		}
		for _, g := range grads {
			if g.b != nil {
				if err := p.roundGrad(r, g.b, g.n, g.rnd); err != nil {
					return err
				}
			}
		}
		return nil
	}, nil
}

// half is the vulkan 16-bit format of f.
func half(f amp.Format) (vulkan.Half, error) {
	switch f {
	case amp.BF16:
		return vulkan.BF16, nil
	case amp.FP16:
		return vulkan.FP16, nil
	}
	return 0, fmt.Errorf("format %v is not 16-bit", f)
}
