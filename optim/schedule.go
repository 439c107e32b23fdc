package optim

import (
	"fmt"
	"math"
)

// Schedule kinds.
const (
	Cosine   = "cosine"
	Linear   = "linear"
	Constant = "constant"
)

// Schedule maps an optimizer step (1-based) to a learning rate: linear warmup
// from 0 over Warmup steps to Peak, then decay to Min at Total: "cosine",
// "linear" or "constant" (which stays at Peak and ignores Min). Steps past
// Total stay at the final value.
type Schedule struct {
	Kind      string
	Peak, Min float64
	Warmup    int
	Total     int
}

// Validate reports the first problem with s, or nil.
func (s Schedule) Validate() error {
	switch s.Kind {
	case Cosine, Linear, Constant:
	default:
		return fmt.Errorf("optim: schedule: unknown kind %q (want %q, %q or %q)", s.Kind, Cosine, Linear, Constant)
	}
	if !(s.Peak > 0) || math.IsInf(s.Peak, 0) {
		return fmt.Errorf("optim: schedule: peak %v: must be finite and > 0", s.Peak)
	}
	if !(s.Min >= 0 && s.Min <= s.Peak) {
		return fmt.Errorf("optim: schedule: min %v: must be in [0, peak %v]", s.Min, s.Peak)
	}
	if s.Total < 1 {
		return fmt.Errorf("optim: schedule: total %d: must be >= 1", s.Total)
	}
	if s.Warmup < 0 || s.Warmup > s.Total {
		return fmt.Errorf("optim: schedule: warmup %d: must be in [0, total %d]", s.Warmup, s.Total)
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
