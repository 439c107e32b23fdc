package peft

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
)

// New initializes an adapter on targets as PEFT does:
//
//   - default: A kaiming-uniform with a = √5, i.e. U(−1/√in, 1/√in), B = 0;
//   - gaussian: A ~ N(0, (1/r)²) (PEFT's std=1/r), B = 0;
//   - pissa: from the SVD W = U·S·Vᵀ of the base weight in float64,
//     A = diag(√(S_r/s))·V_rᵀ, B = U_r·diag(√(S_r/s)), and the base weight
//     is overwritten with the residual W − s·B·A in its own format (fp32,
//     or the 16 bits it is kept in).
//
// With B = 0, or PiSSA's exact split, the adapted model starts out
// computing the base model. For DoRA the magnitude starts as
// ‖W + s·B·A‖ per row, computed in float64 from the base weight's stored
// values (fp32 or 16-bit) exactly as the forward pass computes the norm,
// so g = 1 exactly, zero rows included (see nn.DoRANormFloor).
//
// weights holds the base weights by HF name (model.Model.Weights); only
// PiSSA and DoRA read it. Each A draws from its own stream keyed by seed
// and module path.
func New(c Config, targets []Target, seed uint64, weights map[string]*model.Tensor) (*Adapter, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	l := alloc(c, targets)
	for _, m := range l.Modules {
		var w *model.Tensor
		if c.Init == InitPiSSA || c.UseDoRA {
			if w = weights[m.Path+".weight"]; w == nil {
				return nil, fmt.Errorf("%s: no base weight %s.weight to initialize %s from", m.Path, m.Path, c.Kind())
			}
			if len(w.Shape) != 2 || w.Shape[0] != m.Out || w.Shape[1] != m.In {
				return nil, fmt.Errorf("%s: base weight has shape %v, want [%d %d]", m.Path, w.Shape, m.Out, m.In)
			}
		}
		switch c.Init {
		case InitPiSSA:
			if err := l.pissa(m, w); err != nil {
				return nil, err
			}
		case InitGaussian:
			rng := moduleRNG(seed, m.Path)
			std := 1 / float64(c.R)
			for i := range m.A {
				m.A[i] = float32(rng.NormFloat64() * std)
			}
		default:
			rng := moduleRNG(seed, m.Path)
			bound := 1 / math.Sqrt(float64(m.In))
			for i := range m.A {
				m.A[i] = float32((rng.Float64()*2 - 1) * bound)
			}
		}
		if c.UseDoRA {
			if err := l.initMagnitude(m, w); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

func moduleRNG(seed uint64, path string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(path))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// initMagnitude sets m.M to the row norms of W + s·B·A (at least
// nn.DoRANormFloor: a zero row starts at the floor, with g = 1).
func (l *Adapter) initMagnitude(m *Module, w *model.Tensor) error {
	nn.DoRARowNorms(m.M, w.Data, w.Bits, w.Format, m.A, m.B, m.In, l.Config.R, l.Config.Scaling())
	return nil
}

// pissa splits W into the adapter's top-r part and the residual the base
// weight keeps. The SVD, the factors and the residual are computed in
// float64 whatever the base format; the factors are rounded to fp32 before
// the residual is formed, so W_res + s·B·A reproduces W as closely as the
// base format allows.
func (l *Adapter) pissa(m *Module, w *model.Tensor) error {
	r, s := l.Config.R, l.Config.Scaling()
	if k := min(m.Out, m.In); r > k {
		return fmt.Errorf("%s: pissa: r = %d exceeds min(out, in) = %d", m.Path, r, k)
	}
	vals := w.Float32()
	w64 := make([]float64, len(vals))
	for i, v := range vals {
		w64[i] = float64(v)
	}
	u, sv, v, err := svd(w64, m.Out, m.In)
	if err != nil {
		return fmt.Errorf("%s: pissa: %w", m.Path, err)
	}
	k := len(sv)
	for i := 0; i < r; i++ {
		root := math.Sqrt(sv[i] / s)
		for j := 0; j < m.In; j++ {
			m.A[i*m.In+j] = float32(root * v[j*k+i])
		}
		for o := 0; o < m.Out; o++ {
			m.B[o*r+i] = float32(u[o*k+i] * root)
		}
	}
	d := l.delta(m)
	for i := range w64 {
		res := float32(w64[i] - d[i])
		if w.Data != nil {
			w.Data[i] = res
		} else {
			w.Bits[i] = w.Format.Bits16(res)
		}
	}
	m.a0, m.b0 = slices.Clone(m.A), slices.Clone(m.B)
	return nil
}
