package optim

import (
	"fmt"
	"math"
	"strings"
)

// Param is one trainable fp32 tensor and its gradient (same length). Shape is
// informational; the optimizers treat Value and Grad as flat vectors.
type Param struct {
	Name  string
	Shape []int
	Value []float32
	Grad  []float32
}

// Optimizer updates params in place from their gradients.
type Optimizer interface {
	// Step applies one update with learning rate lr to every param, using
	// p.Grad. Params are matched to their optimizer state by Name. Step checks
	// every param before touching any, so an error leaves params and state
	// unchanged.
	Step(params []*Param, lr float64) error
	// State exports everything needed to continue bit-identically (step count,
	// moments...); tensors are keyed by "<param name>.<slot>", e.g.
	// "layers.0.q.lora_A.exp_avg". The result shares no memory with the
	// optimizer.
	State() State
	// Load replaces the optimizer's state with a copy of s. It rejects a state
	// that is inconsistent or whose tensor sizes disagree with state the
	// optimizer already holds; sizes are checked against the params again on
	// the next Step. A failed Load leaves the optimizer unchanged.
	Load(s State) error
	// Name is the optimizer's short name, e.g. "adamw".
	Name() string
}

// State is an optimizer's resumable state. Step counts calls to Step. Scalars
// and Tensors are keyed "<param name>.<slot>"; the slots depend on the
// optimizer.
type State struct {
	Step    int64
	Scalars map[string]float64
	Tensors map[string][]float32
}

// splitKey splits "<param name>.<slot>" at the last dot; param names may
// themselves contain dots, slot names never do.
func splitKey(key string) (name, slot string, ok bool) {
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return "", "", false
	}
	return key[:i], key[i+1:], true
}

// checkStep validates the arguments of Optimizer.Step that do not depend on
// optimizer state.
func checkStep(params []*Param, lr float64) error {
	if math.IsNaN(lr) || math.IsInf(lr, 0) || lr < 0 {
		return fmt.Errorf("learning rate %v: must be finite and >= 0", lr)
	}
	seen := make(map[string]int, len(params))
	for i, p := range params {
		if p == nil {
			return fmt.Errorf("param %d is nil", i)
		}
		if p.Name == "" {
			// State is keyed by name; an unnamed param could not be resumed.
			return fmt.Errorf("param %d has no name", i)
		}
		if j, dup := seen[p.Name]; dup {
			return fmt.Errorf("params %d and %d are both named %q", j, i, p.Name)
		}
		seen[p.Name] = i
		if len(p.Grad) != len(p.Value) {
			return fmt.Errorf("param %q: grad has %d elements, value has %d", p.Name, len(p.Grad), len(p.Value))
		}
	}
	return nil
}

// fma32 returns a*b+c rounded once to float32, as an FMA instruction (and so
// PyTorch's vectorized CPU kernels) computes it.
func fma32(a, b, c float32) float32 {
	r, ok := fma32Fast(a, b, c)
	if !ok {
		r = fma32Slow(a, b, c)
	}
	return r
}

// fma32Fast is fma32's common case, small enough to inline into hot loops: it
// returns a*b+c rounded to float32 and ok, or ok == false when the caller must
// use fma32Slow instead.
//
// The product of two float32s is exact in float64, so a*b+c is rounded twice:
// to float64, then to float32. That is harmless unless the float64 sum lands
// exactly on a float32 midpoint (low 29 mantissa bits 1000...0), or lies in
// float32's subnormal range, where the midpoints sit lower. Both are rare.
func fma32Fast(a, b, c float32) (r float32, ok bool) {
	// The product is exact, so a compiler-fused multiply-add gives the same s.
	s := float64(a)*float64(b) + float64(c)
	bits := math.Float64bits(s)
	return float32(s), bits&(1<<29-1) != 1<<28 && bits<<1 >= (1023-126)<<53
}

// fma32Slow is fma32's exact path. It rounds a*b+c to odd in float64
// (nudging an inexact, even sum one ulp towards the exact value), which makes
// the second rounding, to float32, correct because float64 carries more than
// 24+2 bits.
func fma32Slow(a, b, c float32) float32 {
	p, q := float64(a)*float64(b), float64(c) // p is exact
	s := p + q
	// Knuth's TwoSum: e is the exact rounding error of s.
	v := s - p
	e := (p - (s - v)) + (q - v)
	if e != 0 && !math.IsInf(s, 0) && !math.IsNaN(e) {
		if bits := math.Float64bits(s); bits&1 == 0 {
			if (e > 0) == (s > 0) {
				bits++ // away from zero
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// powInt returns x**n for n >= 0, correctly rounded in all but astronomically
// rare cases. PyTorch computes bias corrections with C's pow, which is
// (nearly) correctly rounded; math.Pow squares repeatedly in float64 and can
// be several ulps off for large n, which would move step sizes by an ulp.
// Exponentiation by squaring in double-double keeps ~100 bits.
func powInt(x float64, n int64) float64 {
	if n < 0 {
		panic("optim: powInt: negative exponent")
	}
	rh, rl := 1.0, 0.0
	bh, bl := x, 0.0
	for n > 0 {
		if n&1 != 0 {
			rh, rl = ddMul(rh, rl, bh, bl)
		}
		n >>= 1
		if n > 0 {
			bh, bl = ddMul(bh, bl, bh, bl)
		}
	}
	return rh + rl
}

// ddMul multiplies two double-double numbers.
func ddMul(ah, al, bh, bl float64) (float64, float64) {
	p := ah * bh
	e := math.FMA(ah, bh, -p) + (ah*bl + al*bh)
	s := p + e
	return s, e - (s - p)
}

// clone32 copies t; unlike append([]float32(nil), t...) it keeps an empty
// tensor non-nil, so "present but empty" survives a State/Load round trip.
func clone32(t []float32) []float32 {
	return append(make([]float32, 0, len(t)), t...)
}
