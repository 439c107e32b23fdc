package report

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

func labelled(ticks []plot.Tick) []plot.Tick {
	var out []plot.Tick
	for _, t := range ticks {
		if t.Label != "" {
			out = append(out, t)
		}
	}
	return out
}

// Linear ticks: labelled at a step of 1, 2 or 5 × 10^k, the smallest such
// step with at most maxMajor intervals, covering the data from the tick at
// or below it to the tick at or above it, each label the tick's exact value
// in the fewest characters (no float noise, no trailing zeros). gonum's
// default ticks gave 1, 3, 5 on a loss axis and 400, 1600, 2800 on a step
// axis.
func TestNiceTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{0, 5.64, "0 1 2 3 4 5 6"},
		{0, 3000, "0 500 1000 1500 2000 2500 3000"},
		{25, 2975, "0 500 1000 1500 2000 2500 3000"},
		{0, 0.002, "0 0.0005 0.001 0.0015 0.002"},
		{0, 2e-5, "0 5e-6 1e-5 1.5e-5 2e-5"},
		{0.91, 0.95, "0.91 0.92 0.93 0.94 0.95"},
		{-1.5, 0.2, "-1.5 -1 -0.5 0 0.5"},
		{0, 4e6, "0 1e6 2e6 3e6 4e6"},
		{0, 0.3, "0 0.05 0.1 0.15 0.2 0.25 0.3"},
	} {
		var got []string
		for _, tk := range labelled(niceTicks{}.Ticks(tc.lo, tc.hi)) {
			got = append(got, tk.Label)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("[%g, %g]: %q, want %q", tc.lo, tc.hi, strings.Join(got, " "), tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 20000; i++ {
		scale := math.Pow10(rng.IntN(24) - 12)
		lo := (rng.Float64()*2 - 1) * scale * 10
		hi := lo + rng.Float64()*scale*10 + scale*1e-3
		major := labelled(niceTicks{}.Ticks(lo, hi))
		if len(major) < 2 {
			t.Fatalf("[%g, %g]: %d labels", lo, hi, len(major))
		}
		step := major[1].Value - major[0].Value
		e := math.Floor(math.Log10(step) + 1e-9)
		m := math.Round(step / math.Pow10(int(e)))
		if m != 1 && m != 2 && m != 5 {
			t.Fatalf("[%g, %g]: step %g is not 1, 2 or 5 × 10^k", lo, hi, step)
		}
		if n := len(major) - 1; n > maxMajor {
			t.Fatalf("[%g, %g]: %d intervals", lo, hi, n)
		}
		smaller := map[float64]float64{1: 0.5, 2: 1, 5: 2}[m] * math.Pow10(int(e))
		if math.Ceil(hi/smaller-1e-6)-math.Floor(lo/smaller+1e-6) <= maxMajor {
			t.Fatalf("[%g, %g]: step %g, but %g gives at most %d intervals", lo, hi, step, smaller, maxMajor)
		}
		first, last := major[0].Value, major[len(major)-1].Value
		if first > lo+step*1e-9 || first <= lo-step || last < hi-step*1e-9 || last >= hi+step {
			t.Fatalf("[%g, %g]: labels from %g to %g do not just cover the data", lo, hi, first, last)
		}
		for _, tk := range major {
			v, err := strconv.ParseFloat(tk.Label, 64)
			if err != nil || math.Abs(v-tk.Value) > 1e-9*step {
				t.Fatalf("[%g, %g]: label %q for %g", lo, hi, tk.Label, tk.Value)
			}
			if mant, _, _ := strings.Cut(tk.Label, "e"); strings.Contains(mant, ".") && strings.HasSuffix(mant, "0") {
				t.Fatalf("label %q has a trailing zero", tk.Label)
			}
		}
	}
}

// Log ticks of a loss scale: powers of two, labelled alike (all integers
// or all 2^e), at most maxMajor+1 labels, the first and last at or beyond
// the data.
func TestPow2Ticks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{32768, 65536, "32768 65536"},
		{1024, 65536, "1024 2048 4096 8192 16384 32768 65536"},
		{65536, 1 << 32, "2^15 2^18 2^21 2^24 2^27 2^30 2^33"},
		{0.25, 8, "2^-2 2^-1 2^0 2^1 2^2 2^3"},
	} {
		var got []string
		for _, tk := range labelled(pow2Ticks{}.Ticks(tc.lo, tc.hi)) {
			got = append(got, tk.Label)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("[%g, %g]: %q, want %q", tc.lo, tc.hi, strings.Join(got, " "), tc.want)
		}
	}
	for a := -30; a < 40; a++ {
		for b := a + 1; b < a+60; b++ {
			lo, hi := math.Ldexp(1.3, a), math.Ldexp(1.1, b)
			major := labelled(pow2Ticks{}.Ticks(lo, hi))
			if len(major) < 2 || len(major) > maxMajor+1 || major[0].Value > lo || major[len(major)-1].Value < hi {
				t.Fatalf("[%g, %g]: labels %v", lo, hi, major)
			}
			for _, tk := range major {
				v, err := strconv.ParseFloat(tk.Label, 64)
				if p, ok := strings.CutPrefix(tk.Label, "2^"); ok {
					e, _ := strconv.Atoi(p)
					v, err = math.Ldexp(1, e), nil
				}
				if err != nil || v != tk.Value {
					t.Fatalf("label %q for %g", tk.Label, tk.Value)
				}
			}
		}
	}
}
