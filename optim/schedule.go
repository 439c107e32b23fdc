package optim

import (
	"fmt"
	"math"
	"math/big"
)

// Schedule kinds.
const (
	Cosine   = "cosine"
	Linear   = "linear"
	Constant = "constant"
)

// Schedule is the learning rate as a function of the optimizer step,
// defined exactly as Hugging Face transformers' schedulers define it and
// the Trainer applies it: a torch LambdaLR stepped once after every
// optimizer step, so that optimizer step k (1-based) uses
//
//	Peak · λ(k−1)
//
// where, with w = Warmup, n = Total and c = k−1,
//
//	warmup (c < w):  λ = c / max(1, w)              (step 1 of a warmup runs at lr 0)
//	cosine:          λ = max(0, f·(1−r) + r),  f = 0.5·(1 + cos(π·p))
//	linear:          λ = max(0, f·(1−r) + r),  f = max(0, (n − c) / max(1, n − w))
//	constant:        λ = 1
//
// with progress p = (c − w) / max(1, n − w) and r = Min/Peak.
//
// Cosine is get_cosine_with_min_lr_schedule_with_warmup(min_lr=Min), which
// with Min = 0 is get_cosine_schedule_with_warmup (num_cycles 0.5) value
// for value. Linear with Min = 0 is get_linear_schedule_with_warmup;
// transformers has no linear schedule with a floor, so a Min > 0 maps the
// linear factor onto [r, 1] the way the cosine-with-min schedule maps its
// factor. Constant is get_constant_schedule_with_warmup and ignores Min.
//
// The decay ends at λ(n) = r: the lr after the last step, never used by a
// step of an n-step run. The last step (k = n) runs at Peak·λ(n−1), and a
// one-step run (n = 1, no warmup) at Peak. Steps below 1 are treated as 1
// and steps past n+1 as n+1, where the schedule stays.
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

// LR returns the learning rate used by optimizer step `step` (1-based):
// Peak·λ(step−1). LR assumes s is valid.
func (s Schedule) LR(step int) float64 {
	return s.Peak * s.factor(min(max(step, 1), s.Total+1)-1)
}

// factor is λ(c), evaluated with the same float64 operations in the same
// order as transformers' Python lambdas, so that LR equals LambdaLR's
// value bit for bit (see TestScheduleMatchesLambdaLR). The explicit
// float64 conversions forbid fused multiply-adds, which Go allows on some
// architectures and Python never uses.
func (s Schedule) factor(c int) float64 {
	w, n := s.Warmup, s.Total
	if c < w {
		return float64(c) / float64(max(1, w))
	}
	if s.Kind == Constant {
		return 1
	}
	var f float64
	if s.Kind == Cosine {
		p := float64(c-w) / float64(max(1, n-w))
		// transformers: math.pi * float(num_cycles) * 2.0 * progress, with
		// num_cycles 0.5: π·0.5·2 is π exactly.
		f = 0.5 * float64(1+cosine(math.Pi*p))
	} else {
		f = max(0, float64(n-c)/float64(max(1, n-w)))
	}
	r := s.Min / s.Peak // min_lr_rate = min_lr / optimizer.defaults["lr"]
	f = float64(f*(1-r)) + r
	return max(0, f)
}

// cosine returns cos(x) correctly rounded, for 0 <= x <= π: the value
// glibc's cos, which Python's math.cos calls, returns. Go's math.Cos is
// off by an ulp for about one argument in eight here, which would put the
// schedule an ulp away from LambdaLR's. The Taylor series is summed in
// 256-bit arithmetic (its terms, at most π²/2 in size, cost a few bits of
// cancellation) and rounded once; a schedule calls it once per step.
func cosine(x float64) float64 {
	const prec = 256
	x2 := new(big.Float).SetPrec(prec).SetFloat64(x)
	x2.Mul(x2, x2)
	sum := new(big.Float).SetPrec(prec).SetInt64(1)
	term := new(big.Float).SetPrec(prec).SetInt64(1)
	eps := new(big.Float).SetPrec(prec).SetMantExp(big.NewFloat(1), -prec)
	for k := int64(1); ; k++ {
		// term_k = −term_{k−1} · x² / ((2k−1)·2k)
		term.Mul(term, x2)
		term.Quo(term, new(big.Float).SetPrec(prec).SetInt64((2*k-1)*(2*k)))
		term.Neg(term)
		sum.Add(sum, term)
		if new(big.Float).Abs(term).Cmp(eps) < 0 {
			break
		}
	}
	f, _ := sum.Float64()
	return f
}
