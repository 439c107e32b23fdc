package optim

import (
	"math"
	"testing"
)

// TestScheduleFixture compares against the plain-Python schedule in the
// fixture (itself cross-checked against torch's LambdaLR by the generator).
// Same float64 operations in the same order, so the values agree exactly
// unless Go's math.Cos and libm's cos differ in the last bit; allow 2 ulp.
func TestScheduleFixture(t *testing.T) {
	f := loadFixture(t)
	for _, sc := range f.Schedules {
		s := Schedule{Kind: sc.Kind, Peak: sc.Peak, Min: sc.Min, Warmup: sc.Warmup, Total: sc.Total}
		if err := s.Validate(); err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		for i, step := range sc.Steps {
			got, want := s.LR(step), sc.LR[i]
			if math.Abs(got-want) > 2*ulp64(want) {
				t.Errorf("%+v.LR(%d) = %v, Python %v", s, step, got, want)
			}
		}
	}
}

func ulp64(x float64) float64 {
	x = math.Abs(x)
	return math.Nextafter(x, math.Inf(1)) - x
}

func TestScheduleLR(t *testing.T) {
	cos := Schedule{Kind: Cosine, Peak: 1e-3, Min: 1e-5, Warmup: 10, Total: 110}
	lin := Schedule{Kind: Linear, Peak: 2e-4, Min: 0, Warmup: 4, Total: 24}
	cst := Schedule{Kind: Constant, Peak: 5e-4, Min: 1e-5, Warmup: 2, Total: 10}
	noWarm := Schedule{Kind: Cosine, Peak: 1, Min: 0, Warmup: 0, Total: 4}
	allWarm := Schedule{Kind: Linear, Peak: 1, Min: 0.5, Warmup: 4, Total: 4}
	tests := []struct {
		name string
		s    Schedule
		step int
		want float64
	}{
		{"cosine step 0", cos, 0, 0},
		{"cosine negative step", cos, -3, 0},
		{"cosine first warmup step is nonzero", cos, 1, 1e-4},
		{"cosine mid warmup", cos, 5, 5e-4},
		{"cosine last warmup step is peak", cos, 10, 1e-3},
		{"cosine first decay step", cos, 11, 1e-5 + (1e-3-1e-5)*0.5*(1+math.Cos(math.Pi*0.01))},
		{"cosine mid decay", cos, 60, 1e-5 + (1e-3-1e-5)*0.5},
		{"cosine end", cos, 110, 1e-5},
		{"cosine beyond total", cos, 1000, 1e-5},
		{"linear warmup", lin, 1, 5e-5},
		{"linear peak", lin, 4, 2e-4},
		{"linear mid", lin, 14, 1e-4},
		{"linear end", lin, 24, 0},
		{"linear beyond total", lin, 25, 0},
		{"constant warmup", cst, 1, 2.5e-4},
		{"constant after warmup", cst, 3, 5e-4},
		{"constant beyond total ignores min", cst, 11, 5e-4},
		{"no warmup step 1 decays already", noWarm, 1, 0.5 * (1 + math.Cos(math.Pi*0.25))},
		{"no warmup step 0 is peak", noWarm, 0, 1},
		{"no warmup end", noWarm, 4, 0},
		{"warmup == total: last warmup step is peak", allWarm, 4, 1},
		{"warmup == total: then min", allWarm, 5, 0.5},
	}
	for _, tt := range tests {
		if err := tt.s.Validate(); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := tt.s.LR(tt.step); math.Abs(got-tt.want) > 2*ulp64(tt.want) {
			t.Errorf("%s: LR(%d) = %v, want %v", tt.name, tt.step, got, tt.want)
		}
	}
}

// TestScheduleMonotone: warmup rises, decay never rises, the value stays in
// [0, Peak].
func TestScheduleMonotone(t *testing.T) {
	for _, kind := range []ScheduleKind{Cosine, Linear, Constant} {
		s := Schedule{Kind: kind, Peak: 3e-4, Min: 3e-5, Warmup: 7, Total: 50}
		prev := 0.0
		for step := 1; step <= 60; step++ {
			lr := s.LR(step)
			if lr < 0 || lr > s.Peak {
				t.Errorf("%s: LR(%d) = %v outside [0, %v]", kind, step, lr, s.Peak)
			}
			if step <= s.Warmup && lr <= prev || step > s.Warmup && lr > prev {
				t.Errorf("%s: LR(%d) = %v after %v", kind, step, lr, prev)
			}
			prev = lr
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	ok := Schedule{Kind: Cosine, Peak: 1e-3, Min: 1e-5, Warmup: 10, Total: 100}
	tests := []struct {
		name string
		edit func(*Schedule)
		want string
	}{
		{"valid", func(*Schedule) {}, ""},
		{"min == peak", func(s *Schedule) { s.Min = s.Peak }, ""},
		{"warmup == total", func(s *Schedule) { s.Warmup = s.Total }, ""},
		{"no warmup", func(s *Schedule) { s.Warmup = 0 }, ""},
		{"empty kind", func(s *Schedule) { s.Kind = "" }, `optim: schedule: kind: unknown kind "" (want "cosine", "linear" or "constant")`},
		{"unknown kind", func(s *Schedule) { s.Kind = "Cosine" }, `optim: schedule: kind: unknown kind "Cosine" (want "cosine", "linear" or "constant")`},
		{"zero peak", func(s *Schedule) { s.Peak = 0 }, "optim: schedule: peak: 0: must be finite and > 0"},
		{"NaN peak", func(s *Schedule) { s.Peak = math.NaN() }, "optim: schedule: peak: NaN: must be finite and > 0"},
		{"Inf peak", func(s *Schedule) { s.Peak = math.Inf(1) }, "optim: schedule: peak: +Inf: must be finite and > 0"},
		{"negative min", func(s *Schedule) { s.Min = -1e-6 }, "optim: schedule: min: must be between 0 and the peak learning rate (0.001), got -1e-06"},
		{"min above peak", func(s *Schedule) { s.Min = 2e-3 }, "optim: schedule: min: must be between 0 and the peak learning rate (0.001), got 0.002"},
		{"zero total", func(s *Schedule) { s.Total, s.Warmup = 0, 0 }, "optim: schedule: total: 0 steps: must be >= 1"},
		{"negative warmup", func(s *Schedule) { s.Warmup = -1 }, "optim: schedule: warmup: must be between 0 and the total steps (100), got -1"},
		{"warmup beyond total", func(s *Schedule) { s.Warmup = 101 }, "optim: schedule: warmup: must be between 0 and the total steps (100), got 101"},
	}
	for _, tt := range tests {
		s := ok
		tt.edit(&s)
		if got := errString(s.Validate()); got != tt.want {
			t.Errorf("%s: Validate() = %q, want %q", tt.name, got, tt.want)
		}
	}
}
