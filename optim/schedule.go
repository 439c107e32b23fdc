package optim

import (
	"fmt"
	"math"
)

// ScheduleKind is the shape of the decay after warmup.
type ScheduleKind string

// Schedule kinds.
const (
	Cosine   ScheduleKind = "cosine"
	Linear   ScheduleKind = "linear"
	Constant ScheduleKind = "constant"
)

// UnmarshalText reads cosine, linear or constant.
func (k *ScheduleKind) UnmarshalText(b []byte) error {
	switch s := ScheduleKind(b); s {
	case Cosine, Linear, Constant:
		*k = s
		return nil
	}
	return fmt.Errorf("must be %s, %s or %s, got %q", Cosine, Linear, Constant, b)
}

// MarshalText writes the kind's name.
func (k ScheduleKind) MarshalText() ([]byte, error) { return []byte(k), nil }

// Schedule maps an optimizer step (1-based) to a learning rate: linear warmup
// from 0 over Warmup steps to Peak, then decay to Min at Total: "cosine",
// "linear" or "constant" (which stays at Peak and ignores Min). Steps past
// Total stay at the final value.
type Schedule struct {
	Kind      ScheduleKind
	Peak, Min float64
	Warmup    int
	Total     int
}

// ScheduleError is a problem with one field of a Schedule ("kind",
// "peak", "min", "warmup" or "total"), so that a config can point at the
// line that set it.
type ScheduleError struct {
	Field, Msg string
}

func (e *ScheduleError) Error() string { return "optim: schedule: " + e.Field + ": " + e.Msg }

// Validate reports the first problem with s, or nil; it is a *ScheduleError.
func (s Schedule) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ScheduleError{Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch s.Kind {
	case Cosine, Linear, Constant:
	default:
		return bad("kind", "unknown kind %q (want %q, %q or %q)", s.Kind, Cosine, Linear, Constant)
	}
	if !(s.Peak > 0) || math.IsInf(s.Peak, 0) {
		return bad("peak", "%v: must be finite and > 0", s.Peak)
	}
	if !(s.Min >= 0 && s.Min <= s.Peak) {
		return bad("min", "must be between 0 and the peak learning rate (%g), got %g", s.Peak, s.Min)
	}
	if s.Total < 1 {
		return bad("total", "%d steps: must be >= 1", s.Total)
	}
	if s.Warmup < 0 || s.Warmup > s.Total {
		return bad("warmup", "must be between 0 and the total steps (%d), got %d", s.Total, s.Warmup)
	}
	return nil
}

// LR returns the learning rate for 1-based optimizer step `step`. Step 1 of a
// warmup is already nonzero (Peak/Warmup), so no step is wasted at lr 0.
// Steps below 1 are treated as 0. LR assumes s is valid.
func (s Schedule) LR(step int) float64 {
	step = max(step, 0)
	if s.Warmup > 0 && step <= s.Warmup {
		return s.Peak * float64(step) / float64(s.Warmup)
	}
	p := 1.0 // Total == Warmup: warmup ends at the final value
	if s.Total > s.Warmup {
		p = float64(step-s.Warmup) / float64(s.Total-s.Warmup)
	}
	p = min(max(p, 0), 1)
	// The explicit float64 conversions keep the compiler from fusing a
	// multiply-add (allowed on some architectures), so the value matches the
	// plain-Python reference everywhere.
	switch s.Kind {
	case Cosine:
		return s.Min + float64((s.Peak-s.Min)*0.5*(1+math.Cos(math.Pi*p)))
	case Linear:
		return s.Peak + float64((s.Min-s.Peak)*p)
	default:
		return s.Peak
	}
}
