package amp

import (
	"math"
	"testing"
)

// The sequences of PyTorch's test_grad_scaling_update_scale and
// test_grad_scale_will_not_overflow, with exact values.
func TestScalerSequences(t *testing.T) {
	s, err := NewLossScaler(ScalerConfig{Init: 4, Growth: 2, Backoff: 0.25, Interval: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		inf  bool
		want float32
	}{{false, 4}, {false, 8}, {true, 2}, {false, 2}, {true, 0.5}, {false, 0.5}, {false, 1}} {
		s.Update(step.inf)
		if s.Scale() != step.want {
			t.Fatalf("after update %d (inf=%v): scale %v, want %v", i, step.inf, s.Scale(), step.want)
		}
	}
}

func TestScalerNeverOverflows(t *testing.T) {
	s, err := NewLossScaler(ScalerConfig{Init: 1e38, Growth: 16, Backoff: 0.5, Interval: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		s.Update(false)
		if s.Scale() != 1e38 {
			t.Fatalf("update %d: scale %v, want 1e38 (growth to fp32 Inf refused)", i, s.Scale())
		}
	}
	// just below the fp32 limit, one growth is still finite and taken
	s, _ = NewLossScaler(ScalerConfig{Init: 1e37, Growth: 16, Backoff: 0.5, Interval: 1})
	s.Update(false)
	if s.Scale() != float32(1e37)*16 {
		t.Fatalf("scale %v, want %v", s.Scale(), float32(1e37)*16)
	}
}

func TestScalerBounds(t *testing.T) {
	s, _ := NewLossScaler(ScalerConfig{Init: 8, Growth: 2, Backoff: 0.5, Interval: 1, Min: 2, Max: 16})
	for _, want := range []float32{16, 16} {
		s.Update(false)
		if s.Scale() != want {
			t.Fatalf("scale %v, want %v (max 16)", s.Scale(), want)
		}
	}
	for _, want := range []float32{8, 4, 2, 2} {
		s.Update(true)
		if s.Scale() != want {
			t.Fatalf("scale %v, want %v (min 2)", s.Scale(), want)
		}
	}
}

func TestUnscale(t *testing.T) {
	s, _ := NewLossScaler(ScalerConfig{Init: 1024, Growth: 2, Backoff: 0.5, Interval: 10})
	g := [][]float32{{2048, -512, 0}, {1}}
	if !s.Unscale(g) {
		t.Fatal("finite gradients reported non-finite")
	}
	want := [][]float32{{2, -0.5, 0}, {float32(1.0 / 1024)}}
	for i := range g {
		for j := range g[i] {
			if g[i][j] != want[i][j] {
				t.Fatalf("unscaled [%d][%d] = %v, want %v", i, j, g[i][j], want[i][j])
			}
		}
	}
	for _, bad := range []float32{float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		if s.Unscale([][]float32{{1, bad}}) {
			t.Fatalf("%v not detected", bad)
		}
	}
	// 1/scale is fp32(1/fp64(scale)), as GradScaler computes it
	s3, _ := NewLossScaler(ScalerConfig{Init: 3, Growth: 2, Backoff: 0.5, Interval: 10})
	x := [][]float32{{1}}
	s3.Unscale(x)
	if x[0][0] != float32(1.0/3.0) {
		t.Fatalf("1 unscaled by 3 = %v, want %v", x[0][0], float32(1.0/3.0))
	}
}

func TestScalerValidation(t *testing.T) {
	for _, tc := range []struct {
		c    ScalerConfig
		want string
	}{
		{ScalerConfig{Init: 1, Growth: 1, Backoff: 0.5, Interval: 1}, "growth_factor must be > 1, got 1"},
		{ScalerConfig{Init: 1, Growth: 2, Backoff: 1, Interval: 1}, "backoff_factor must be in (0, 1), got 1"},
		{ScalerConfig{Init: 1, Growth: 2, Backoff: 0, Interval: 1}, "backoff_factor must be in (0, 1), got 0"},
		{ScalerConfig{Init: 0, Growth: 2, Backoff: 0.5, Interval: 1}, "init_scale must be a positive fp32 number, got 0"},
		{ScalerConfig{Init: 1, Growth: 2, Backoff: 0.5, Interval: 0}, "growth_interval must be >= 1, got 0"},
		{ScalerConfig{Init: 1, Growth: 2, Backoff: 0.5, Interval: 1, Min: 4, Max: 2}, "min_scale (4) and max_scale (2) must be >= 0 with min <= max"},
	} {
		if err := tc.c.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.want)
		}
	}
}

func TestScalerStateRoundTrip(t *testing.T) {
	a, _ := NewLossScaler(ScalerConfig{Init: 64, Growth: 2, Backoff: 0.5, Interval: 3})
	a.Update(false)
	a.Update(true)
	a.Update(false)
	b, _ := NewLossScaler(ScalerConfig{Init: 64, Growth: 2, Backoff: 0.5, Interval: 3})
	if err := b.Load(a.State()); err != nil {
		t.Fatal(err)
	}
	for _, inf := range []bool{false, false, true, false} {
		a.Update(inf)
		b.Update(inf)
		if a.State() != b.State() {
			t.Fatalf("restored scaler diverged: %+v vs %+v", a.State(), b.State())
		}
	}
	if err := b.Load(ScalerState{Scale: float32(math.Inf(1))}); err == nil {
		t.Fatal("an infinite scale loaded")
	}
}

func TestPolicy(t *testing.T) {
	p := DefaultPolicy(FP16)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for op, want := range map[string]Format{"linear": FP16, "attention_scores": FP16, "softmax": FP32, "cross_entropy": FP32, "rmsnorm": FP32} {
		if got := p.Format(op); got != want {
			t.Errorf("%s computes in %v, want %v", op, got, want)
		}
	}
	if p.Format("add", FP16, FP16) != FP16 || p.Format("add", FP16, FP32) != FP32 || p.Format("add", BF16, FP16) != FP32 {
		t.Error("add does not promote to the widest input")
	}
	if err := p.Move("softmax", LowPrecision); err != nil || p.Format("softmax") != FP16 || p.Validate() != nil {
		t.Errorf("move softmax to low precision: %v", err)
	}
	if err := p.Move("matmul", FullPrecision); err == nil || err.Error() != `unknown op "matmul" (known: add, attention_scores, attention_values, cross_entropy, linear, rmsnorm, rope, silu, softmax)` {
		t.Errorf("unknown op: %v", err)
	}
	bad := DefaultPolicy(BF16)
	bad.FP32Ops = append(bad.FP32Ops, "linear")
	if err := bad.Validate(); err == nil || err.Error() != `op "linear" is in both low_precision and fp32` {
		t.Errorf("duplicate op: %v", err)
	}
}
