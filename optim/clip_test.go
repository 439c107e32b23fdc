package optim

import (
	"math"
	"slices"
	"testing"
)

func gradParams(grads [][]float32) []*Param {
	ps := make([]*Param, len(grads))
	for i, g := range grads {
		ps[i] = &Param{Name: "p" + string(rune('a'+i)), Value: make([]float32, len(g)), Grad: slices.Clone(g)}
	}
	return ps
}

// TestClipFixture compares with torch.nn.utils.clip_grad_norm_. The norm is
// checked against the exactly rounded float64 norm (math.fsum in the
// generator) and against torch's float32 norm, which accumulates in float32
// and may be an ulp off. Clipped grads are bit-identical when the two float32
// norms agree and within 2 ulp otherwise.
func TestClipFixture(t *testing.T) {
	f := loadFixture(t)
	for ci, c := range f.Clip {
		grads := make([][]float32, len(c.Grads))
		for i, g := range c.Grads {
			grads[i] = f32s(g)
		}
		ps := gradParams(grads)
		norm := ClipGlobalNorm(ps, c.MaxNorm)
		if math.Abs(norm-c.NormFloat64) > 2*ulp64(c.NormFloat64) {
			t.Errorf("case %d: norm %v, exact %v", ci, norm, c.NormFloat64)
		}
		torchNorm := float32(c.Norm)
		if u := ulpDiff(float32(norm), torchNorm); u > 1 {
			t.Errorf("case %d: norm %v, torch %v (%d float32 ulp)", ci, norm, torchNorm, u)
		}
		maxULP := int64(2)
		if float32(norm) == torchNorm {
			maxULP = 0
		}
		var worst int64
		for i, p := range ps {
			for j, w := range f32s(c.Clipped[i]) {
				u := ulpDiff(p.Grad[j], w)
				worst = max(worst, u)
				if u > maxULP {
					t.Errorf("case %d: grad %d[%d] = %v, torch %v (%d ulp)", ci, i, j, p.Grad[j], w, u)
				}
			}
		}
		t.Logf("case %d (max_norm %v, norm %.6g): clipped grads within %d ulp of torch", ci, c.MaxNorm, norm, worst)
	}
}

func TestClipGlobalNorm(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	tests := []struct {
		name     string
		grads    [][]float32
		maxNorm  float64
		wantNorm float64 // NaN: want NaN
		want     [][]float32
	}{
		{"empty", nil, 1, 0, nil},
		{"3-4-5 below threshold", [][]float32{{3}, {4}}, 10, 5, [][]float32{{3}, {4}}},
		{"at threshold: no scaling", [][]float32{{3}, {4}}, 5, 5, [][]float32{{3}, {4}}},
		{"maxNorm 0 disables clipping", [][]float32{{3}, {4}}, 0, 5, [][]float32{{3}, {4}}},
		{"negative maxNorm disables clipping", [][]float32{{3}, {4}}, -1, 5, [][]float32{{3}, {4}}},
		{"NaN maxNorm disables clipping", [][]float32{{3}, {4}}, math.NaN(), 5, [][]float32{{3}, {4}}},
		{"above threshold", [][]float32{{3, 0}, {4}}, 1, 5, [][]float32{{float32(3 / (5 + 1e-6)), 0}, {float32(4 / (5 + 1e-6))}}},
		{"Inf grad", [][]float32{{3, inf}, {4}}, 1, math.Inf(1), [][]float32{{3, inf}, {4}}},
		{"NaN grad", [][]float32{{3}, {nan, 4}}, 1, math.NaN(), [][]float32{{3}, {nan, 4}}},
		{"norm beyond float32", [][]float32{{3e38, 3e38}}, 1, math.Sqrt(2) * float64(float32(3e38)),
			[][]float32{{float32(1 / math.Sqrt(2)), float32(1 / math.Sqrt(2))}}},
	}
	for _, tt := range tests {
		ps := gradParams(tt.grads)
		norm := ClipGlobalNorm(ps, tt.maxNorm)
		if !(norm == tt.wantNorm || math.IsNaN(norm) && math.IsNaN(tt.wantNorm)) &&
			math.Abs(norm-tt.wantNorm) > 2*ulp64(tt.wantNorm) {
			t.Errorf("%s: norm %v, want %v", tt.name, norm, tt.wantNorm)
		}
		for i, p := range ps {
			for j, g := range p.Grad {
				if w := tt.want[i][j]; math.Float32bits(g) != math.Float32bits(w) && ulpDiff(g, w) > 1 {
					t.Errorf("%s: grad %d[%d] = %v, want %v", tt.name, i, j, g, w)
				}
			}
		}
	}
	// The clipped norm lands on maxNorm (to float32 accuracy).
	ps := gradParams([][]float32{{1, 2, 3}, {4, 5}, {6}})
	ClipGlobalNorm(ps, 0.5)
	if n := ClipGlobalNorm(ps, 0); math.Abs(n-0.5) > 1e-6 {
		t.Errorf("norm after clipping to 0.5 = %v", n)
	}
	// Nil params are skipped.
	if n := ClipGlobalNorm([]*Param{nil, {Name: "x", Grad: []float32{3, 4}}}, 1); n != 5 {
		t.Errorf("norm with nil param = %v, want 5", n)
	}
}

// TestClipGlobalNormOrderIndependentOfSplit: the float64 sum of exact squares
// is the same whether a vector is one param or split into many.
func TestClipGlobalNormSplit(t *testing.T) {
	g := make([]float32, 1000)
	for i := range g {
		g[i] = float32(math.Sin(float64(i))) * 1e-3
	}
	whole := ClipGlobalNorm(gradParams([][]float32{g}), 0)
	split := ClipGlobalNorm(gradParams([][]float32{g[:1], g[1:500], g[500:]}), 0)
	if whole != split {
		t.Errorf("norm as one param %v, as three %v", whole, split)
	}
}

func TestAccumulateZero(t *testing.T) {
	dst := []float32{1, 2, 3}
	if err := Accumulate(dst, []float32{0.5, -2, 1e-8}); err != nil {
		t.Fatal(err)
	}
	if want := []float32{1.5, 0, 3 + 1e-8}; !slices.Equal(dst, want) {
		t.Errorf("Accumulate: %v, want %v", dst, want)
	}
	want := "optim: accumulate: dst has 3 elements, src has 2"
	if err := Accumulate(dst, []float32{1, 2}); errString(err) != want {
		t.Errorf("Accumulate length mismatch: %v, want %q", err, want)
	}
	ps := gradParams([][]float32{{1, 2}, {3}})
	grad0 := ps[0].Grad
	Zero(append(ps, nil))
	for _, p := range ps {
		if slices.ContainsFunc(p.Grad, func(x float32) bool { return x != 0 }) {
			t.Errorf("Zero left %v", p.Grad)
		}
	}
	if &grad0[0] != &ps[0].Grad[0] {
		t.Error("Zero reallocated the grad")
	}
}
