package optim

import (
	"math"
	"testing"
)

func ulp64(x float64) float64 {
	x = math.Abs(x)
	return math.Nextafter(x, math.Inf(1)) - x
}

// TestScheduleLR spells out transformers' semantics on hand-picked steps:
// step k uses λ(k−1), so a warmup starts at lr 0, the last step of a decay
// is not yet at Min, and a one-step run trains at Peak.
func TestScheduleLR(t *testing.T) {
	cos := Schedule{Kind: Cosine, Peak: 1e-3, Min: 1e-5, Warmup: 10, Total: 110}
	lin := Schedule{Kind: Linear, Peak: 2e-4, Min: 0, Warmup: 4, Total: 24}
	linMin := Schedule{Kind: Linear, Peak: 2e-4, Min: 5e-5, Warmup: 4, Total: 24}
	cst := Schedule{Kind: Constant, Peak: 5e-4, Min: 1e-5, Warmup: 2, Total: 10}
	noWarm := Schedule{Kind: Cosine, Peak: 1, Min: 0, Warmup: 0, Total: 4}
	allWarm := Schedule{Kind: Linear, Peak: 1, Min: 0.5, Warmup: 4, Total: 4}
	oneStep := Schedule{Kind: Cosine, Peak: 3e-4, Min: 0, Warmup: 0, Total: 1}
	r := 1e-5 / 1e-3 // min_lr_rate
	cosAt := func(p float64) float64 { return 1e-3 * ((0.5*(1+math.Cos(math.Pi*p)))*(1-r) + r) }
	tests := []struct {
		name string
		s    Schedule
		step int
		want float64
	}{
		{"cosine: step 1 of a warmup runs at 0", cos, 1, 0},
		{"cosine: step 0 is step 1", cos, 0, 0},
		{"cosine: mid warmup", cos, 6, 5e-4},
		{"cosine: last warmup step", cos, 10, 9e-4},
		{"cosine: first step after warmup is the peak", cos, 11, 1e-3},
		{"cosine: second decay step", cos, 12, cosAt(0.01)},
		{"cosine: mid decay", cos, 61, cosAt(0.5)},
		{"cosine: last step is one step short of min", cos, 110, cosAt(0.99)},
		{"cosine: the end is min", cos, 111, 1e-5},
		{"cosine: beyond the end stays at min", cos, 1000, 1e-5},
		{"linear: step 1", lin, 1, 0},
		{"linear: peak", lin, 5, 2e-4},
		{"linear: mid", lin, 15, 1e-4},
		{"linear: last step", lin, 24, 1e-5},
		{"linear: the end is 0", lin, 25, 0},
		{"linear with min: mid", linMin, 15, 2e-4 * (0.5*(1-0.25) + 0.25)},
		{"linear with min: the end is min", linMin, 25, 5e-5},
		{"constant: warmup", cst, 2, 2.5e-4},
		{"constant: after warmup", cst, 3, 5e-4},
		{"constant ignores min", cst, 11, 5e-4},
		{"no warmup: step 1 is the peak", noWarm, 1, 1},
		{"no warmup: step 2 decays", noWarm, 2, 0.5 * (1 + math.Cos(math.Pi*0.25))},
		{"no warmup: last step", noWarm, 4, 0.5 * (1 + math.Cos(math.Pi*0.75))},
		{"warmup == total: last step still warming", allWarm, 4, 0.75},
		{"warmup == total: linear ends at min", allWarm, 5, 0.5},
		{"one-step run trains at the peak", oneStep, 1, 3e-4},
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

// TestScheduleMonotone: the lr rises through the warmup (steps 1..Warmup+1
// use λ(0..Warmup)), never rises after it, and stays in [0, Peak].
func TestScheduleMonotone(t *testing.T) {
	for _, kind := range []string{Cosine, Linear, Constant} {
		s := Schedule{Kind: kind, Peak: 3e-4, Min: 3e-5, Warmup: 7, Total: 50}
		prev := -1.0
		for step := 1; step <= 60; step++ {
			lr := s.LR(step)
			if lr < 0 || lr > s.Peak {
				t.Errorf("%s: LR(%d) = %v outside [0, %v]", kind, step, lr, s.Peak)
			}
			if step <= s.Warmup+1 && lr <= prev || step > s.Warmup+1 && lr > prev {
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
		{"empty kind", func(s *Schedule) { s.Kind = "" }, `optim: schedule: unknown kind "" (want "cosine", "linear" or "constant")`},
		{"unknown kind", func(s *Schedule) { s.Kind = "Cosine" }, `optim: schedule: unknown kind "Cosine" (want "cosine", "linear" or "constant")`},
		{"zero peak", func(s *Schedule) { s.Peak = 0 }, "optim: schedule: peak 0: must be finite and > 0"},
		{"NaN peak", func(s *Schedule) { s.Peak = math.NaN() }, "optim: schedule: peak NaN: must be finite and > 0"},
		{"Inf peak", func(s *Schedule) { s.Peak = math.Inf(1) }, "optim: schedule: peak +Inf: must be finite and > 0"},
		{"negative min", func(s *Schedule) { s.Min = -1e-6 }, "optim: schedule: min -1e-06: must be in [0, peak 0.001]"},
		{"min above peak", func(s *Schedule) { s.Min = 2e-3 }, "optim: schedule: min 0.002: must be in [0, peak 0.001]"},
		{"zero total", func(s *Schedule) { s.Total, s.Warmup = 0, 0 }, "optim: schedule: total 0: must be >= 1"},
		{"negative warmup", func(s *Schedule) { s.Warmup = -1 }, "optim: schedule: warmup -1: must be in [0, total 100]"},
		{"warmup beyond total", func(s *Schedule) { s.Warmup = 101 }, "optim: schedule: warmup 101: must be in [0, total 100]"},
	}
	for _, tt := range tests {
		s := ok
		tt.edit(&s)
		if got := errString(s.Validate()); got != tt.want {
			t.Errorf("%s: Validate() = %q, want %q", tt.name, got, tt.want)
		}
	}
}
