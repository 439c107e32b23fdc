package pref

import (
	"math"
	"strings"
	"testing"
)

// A batch of three pairs: summed policy and reference log-probabilities
// (chosen rows first) and completion lengths.
var (
	testLogps = []float64{-7.5, -12.25, -3.0, -9.0, -11.5, -4.75}
	testRef   = []float64{-8.0, -12.0, -3.5, -8.25, -11.0, -5.0}
	testLens  = []int{5, 9, 2, 6, 8, 3}
)

func testObjectives() map[string]Objective {
	return map[string]Objective{
		"sigmoid": {Loss: Sigmoid, Beta: 0.1},
		"cdpo":    {Loss: Sigmoid, Beta: 0.5, LabelSmoothing: 0.2},
		"robust":  {Loss: Robust, Beta: 0.5, LabelSmoothing: 0.2},
		"ipo":     {Loss: IPO, Beta: 0.1},
		"orpo":    {Loss: ORPO, Beta: 0.1},
		"simpo":   {Loss: SimPO, Beta: 2, Gamma: 0.5},
	}
}

func eval(t *testing.T, o Objective, logps []float64, lo, hi int, n Norm) (float64, []float64, Stats) {
	t.Helper()
	p := len(logps) / 2
	var x, ref []float64
	var lens []int
	x = append(append(x, logps[lo:hi]...), logps[p+lo:p+hi]...)
	ref = append(append(ref, testRef[lo:hi]...), testRef[p+lo:p+hi]...)
	lens = append(append(lens, testLens[lo:hi]...), testLens[p+lo:p+hi]...)
	g := make([]float64, len(x))
	l, st, err := o.Eval(x, Batch{Reference: ref, Tokens: lens}, n, g)
	if err != nil {
		t.Fatal(err)
	}
	return l, g, st
}

var fullNorm = Norm{Pairs: 3, ChosenTokens: 5 + 9 + 2}

// Each objective's gradient matches central differences of its loss:
// with step 1e-5 on values of order 10, the truncation error is about
// 1e-10·|f”'| and the rounding 1e-16/1e-5 ≈ 1e-11, so 1e-8 bounds both.
func TestGradientMatchesFiniteDifferences(t *testing.T) {
	for name, o := range testObjectives() {
		t.Run(name, func(t *testing.T) {
			_, g, _ := eval(t, o, testLogps, 0, 3, fullNorm)
			const h = 1e-5
			for i := range testLogps {
				x := append([]float64(nil), testLogps...)
				x[i] += h
				up, _, _ := eval(t, o, x, 0, 3, fullNorm)
				x[i] -= 2 * h
				down, _, _ := eval(t, o, x, 0, 3, fullNorm)
				fd := (up - down) / (2 * h)
				if math.Abs(fd-g[i]) > 1e-8 {
					t.Errorf("∂/∂logp[%d]: %.12g, finite differences %.12g", i, g[i], fd)
				}
			}
		})
	}
}

// Split into micro-batches normalised by the step's totals, the losses,
// gradients and metrics add up to those of the batch as one: gradient
// accumulation takes the same step. Each row's log-probability depends on
// its own row only, so the model's part of the step splits the same way.
func TestMicroBatchesAddUpToTheBatch(t *testing.T) {
	for name, o := range testObjectives() {
		t.Run(name, func(t *testing.T) {
			whole, gw, sw := eval(t, o, testLogps, 0, 3, fullNorm)
			l1, g1, s1 := eval(t, o, testLogps, 0, 2, fullNorm)
			l2, g2, s2 := eval(t, o, testLogps, 2, 3, fullNorm)
			if d := math.Abs(l1 + l2 - whole); d > 1e-15*math.Abs(whole)*4 {
				t.Errorf("micro-batch losses %.17g + %.17g, batch %.17g", l1, l2, whole)
			}
			// rows of the whole batch: chosen 0,1,2 then rejected 0,1,2
			split := []float64{g1[0], g1[1], g2[0], g1[2], g1[3], g2[1]}
			for i := range gw {
				if split[i] != gw[i] {
					t.Errorf("gradient of row %d: %.17g accumulated, %.17g in one batch", i, split[i], gw[i])
				}
			}
			s1.Add(s2)
			for k, v := range sw.Means() {
				if got := s1.Means()[k]; math.Abs(got-v) > 1e-15*math.Max(1, math.Abs(v))*4 {
					t.Errorf("%s: %.17g accumulated, %.17g in one batch", k, got, v)
				}
			}
		})
	}
}

// The metrics follow TRL: DPO's rewards are β·(logp − ref), SimPO's and
// ORPO's β·(averaged logp), accuracy counts chosen reward > rejected.
func TestMetrics(t *testing.T) {
	_, _, st := eval(t, Objective{Loss: Sigmoid, Beta: 0.1}, testLogps, 0, 3, fullNorm)
	m := st.Means()
	// rewards: chosen 0.1·(0.5, −0.25, 0.5), rejected 0.1·(−0.75, −0.5, 0.25)
	want := map[string]float64{
		"rewards/chosen": 0.1 * 0.75 / 3, "rewards/rejected": 0.1 * -1.0 / 3, "rewards/accuracies": 1,
		"rewards/margins": 0.1 * 1.75 / 3, "logps/chosen": -22.75 / 3, "logps/rejected": -25.25 / 3,
	}
	for k, v := range want {
		if math.Abs(m[k]-v) > 1e-15 {
			t.Errorf("%s = %.17g, want %.17g", k, m[k], v)
		}
	}
	_, _, st = eval(t, Objective{Loss: SimPO, Beta: 2, Gamma: 0.5}, testLogps, 0, 1, fullNorm)
	if got, want := st.Means()["rewards/chosen"], 2*-7.5/5; math.Abs(got-want) > 1e-15 {
		t.Errorf("SimPO rewards/chosen %v, want %v", got, want)
	}
}

// Known values: with every log-ratio 0, sigmoid DPO is log 2 and IPO is
// 1/(2β)²; robust DPO at ε = 0 is sigmoid DPO.
func TestKnownValues(t *testing.T) {
	zero := []float64{-3, -3}
	b := Batch{Reference: []float64{-3, -3}, Tokens: []int{2, 2}}
	g := make([]float64, 2)
	for _, c := range []struct {
		o    Objective
		want float64
	}{
		{Objective{Loss: Sigmoid, Beta: 0.1}, math.Ln2},
		{Objective{Loss: Robust, Beta: 0.7}, math.Ln2},
		{Objective{Loss: IPO, Beta: 0.1}, 25},
		{Objective{Loss: SimPO, Beta: 2, Gamma: 0.5}, -logSigmoid(-0.5)},
	} {
		l, _, err := c.o.Eval(zero, b, Norm{Pairs: 1, ChosenTokens: 2}, g)
		if err != nil || math.Abs(l-c.want) > 1e-15 {
			t.Errorf("%s: %v, %v; want %v", c.o.Loss, l, err, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []struct {
		o   Objective
		err string
	}{
		{Objective{Loss: Sigmoid, Beta: 0.1}, ""},
		{Objective{Loss: Robust, Beta: 0.1, LabelSmoothing: 0.3}, ""},
		{Objective{Loss: SimPO, Beta: 2, Gamma: 0.5}, ""},
		{Objective{Loss: "kto", Beta: 0.1}, "want sigmoid"},
		{Objective{Loss: IPO}, "beta 0 must be positive"},
		{Objective{Loss: Sigmoid, Beta: 0.1, LabelSmoothing: 0.5}, "label_smoothing 0.5"},
		{Objective{Loss: ORPO, Beta: 0.1, LabelSmoothing: 0.1}, "sigmoid and robust losses only"},
		{Objective{Loss: Sigmoid, Beta: 0.1, Gamma: 1}, "SimPO's only"},
	} {
		err := c.o.Validate()
		if (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.err)
		}
	}
}

func TestEvalRejectsBadBatches(t *testing.T) {
	o := Objective{Loss: Sigmoid, Beta: 0.1}
	g := make([]float64, 2)
	for _, c := range []struct {
		name string
		b    Batch
		n    Norm
	}{
		{"no reference", Batch{Tokens: []int{1, 1}}, Norm{Pairs: 1}},
		{"empty completion", Batch{Reference: []float64{0, 0}, Tokens: []int{0, 1}}, Norm{Pairs: 1}},
		{"norm below the batch", Batch{Reference: []float64{0, 0}, Tokens: []int{1, 1}}, Norm{}},
	} {
		if _, _, err := o.Eval([]float64{-1, -2}, c.b, c.n, g); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// A Step whose batch ends in padding pairs (a data-parallel rank's
// smaller share) computes what Eval computes on its real pairs alone, bit
// for bit (the same operations on the same values), with no gradient
// for the padding rows; a share of no real pairs adds nothing.
func TestStepLeavesOutPadding(t *testing.T) {
	for name, o := range testObjectives() {
		for _, real := range []int{0, 1, 2} {
			want, wantGrad, wantStats := 0.0, []float64(nil), Stats{}
			if real > 0 {
				want, wantGrad, wantStats = eval(t, o, testLogps, 0, real, fullNorm)
			}
			// the first real pairs of testLogps, then padding pairs
			// with no tokens, whose values would fail Eval
			const P = 3
			logps, ref, lens := make([]float64, 2*P), make([]float64, 2*P), make([]int, 2*P)
			for i := range real {
				for _, r := range []int{i, P + i} {
					logps[r], ref[r], lens[r] = testLogps[r], testRef[r], testLens[r]
				}
			}
			s := Step{Objective: o, Batch: Batch{Reference: ref, Tokens: lens}, Norm: fullNorm, Padding: P - real}
			grad := make([]float64, 2*P)
			for i := range grad {
				grad[i] = math.NaN() // Loss must write every value
			}
			got, err := s.Loss(logps, grad)
			if err != nil {
				t.Fatalf("%s, %d real pairs: %v", name, real, err)
			}
			if got != want || s.Stats != wantStats {
				t.Errorf("%s, %d real pairs: loss %v, stats %+v; want %v, %+v", name, real, got, s.Stats, want, wantStats)
			}
			for i, g := range grad {
				w := 0.0
				switch {
				case i < real:
					w = wantGrad[i]
				case i >= P && i < P+real:
					w = wantGrad[real+i-P]
				}
				if g != w {
					t.Errorf("%s, %d real pairs: grad[%d] = %v, want %v", name, real, i, g, w)
				}
			}
		}
	}
}

// Stats cross processes as Sums and come back unchanged.
func TestStatsSums(t *testing.T) {
	s := Stats{Pairs: 3, RewardChosen: 0.5, RewardRejected: -0.25, Accuracy: 2, LogpChosen: -7, LogpRejected: -9.5}
	if got := StatsOf(s.Sums()); got != s {
		t.Errorf("StatsOf(Sums()) = %+v, want %+v", got, s)
	}
}
