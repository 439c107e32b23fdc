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
//     or the 16 bits it is kept in);
//   - olora: from the QR decomposition W = Q·R, B = Q_r (the first r
//     columns), A = R_r (the first r rows), and W keeps W − s·B·A
//     likewise (PEFT's olora_init).
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
		if c.Init == InitPiSSA || c.Init == InitOLoRA || c.UseDoRA {
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
		case InitOLoRA:
			if err := l.olora(m, w); err != nil {
				return nil, err
			}
		case InitGaussian:
			rng := moduleRNG(seed, m.Path)
			std := 1 / float64(m.R)
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
	nn.DoRARowNorms(m.M, w.Data, w.Bits, w.Format, m.A, m.B, m.In, m.R, m.Scaling)
	return nil
}

// pissa splits W into the adapter's top-r part and the residual the base
// weight keeps. The SVD, the factors and the residual are computed in
// float64 whatever the base format; the factors are rounded to fp32 before
// the residual is formed, so W_res + s·B·A reproduces W as closely as the
// base format allows.
func (l *Adapter) pissa(m *Module, w *model.Tensor) error {
	r, s := m.R, m.Scaling
	w64, err := splitBase(m, w, InitPiSSA)
	if err != nil {
		return err
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
	l.keepResidual(m, w, w64)
	return nil
}

// splitBase checks that init can take r factors from module m's base
// weight w and returns w's values in float64, as PiSSA and OLoRA split it.
func splitBase(m *Module, w *model.Tensor, init string) ([]float64, error) {
	if k := min(m.Out, m.In); m.R > k {
		return nil, fmt.Errorf("%s: %s: r = %d exceeds min(out, in) = %d", m.Path, init, m.R, k)
	}
	vals := w.Float32()
	w64 := make([]float64, len(vals))
	for i, v := range vals {
		w64[i] = float64(v)
	}
	return w64, nil
}

// keepResidual overwrites the base weight w (whose values are w64) with
// W − s·B·A for the initial A and B, in w's own format, and keeps A and B
// as A₀ and B₀: the file subtracts them again to apply to the original W.
func (l *Adapter) keepResidual(m *Module, w *model.Tensor, w64 []float64) {
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
}

// olora splits W as OLoRA does (PEFT's olora_init): with W = Q·R, B = Q_r
// and A = R_r, so that B·A = Q_r·Q_rᵀ·W, W's projection onto the span of
// its first r columns, and the base weight keeps W − s·B·A. Q_r is the
// orthonormal factor of those r columns, computed in float64; the product
// B·A does not depend on the signs a QR routine picks for Q's columns,
// which is all that merging and saving use.
func (l *Adapter) olora(m *Module, w *model.Tensor) error {
	r := m.R
	w64, err := splitBase(m, w, InitOLoRA)
	if err != nil {
		return err
	}
	q, err := orthonormalColumns(w64, m.Out, m.In, r)
	if err != nil {
		return fmt.Errorf("%s: olora: %w", m.Path, err)
	}
	for k := 0; k < r; k++ {
		for o := 0; o < m.Out; o++ {
			m.B[o*r+k] = float32(q[o*r+k])
		}
		for j := 0; j < m.In; j++ { // A = Q_rᵀ·W
			var acc float64
			for o := 0; o < m.Out; o++ {
				acc += q[o*r+k] * w64[o*m.In+j]
			}
			m.A[k*m.In+j] = float32(acc)
		}
	}
	l.keepResidual(m, w, w64)
	return nil
}
