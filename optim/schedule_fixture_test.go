package optim

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

// scheduleFixture is testdata/torch_schedules.json, written by
// scripts/gen_schedule_fixture.py: for each case, the learning rate that
// each optimizer step 1..Total+1 reads from torch's LambdaLR driven by
// transformers' lambdas and stepped after every optimizer step.
type scheduleFixture struct {
	TorchVersion string `json:"torch_version"`
	Cases        []struct {
		Kind   string    `json:"kind"`
		Peak   float64   `json:"peak"`
		Min    float64   `json:"min"`
		Warmup int       `json:"warmup"`
		Total  int       `json:"total"`
		LR     []float64 `json:"lr"` // LR[k-1]: the lr of optimizer step k
		// ExactCos lists [k, lr] where LambdaLR, run with cos correctly
		// rounded, gives another lr than with glibc's cos.
		ExactCos [][2]float64 `json:"exact_cos"`
	} `json:"cases"`
}

// TestScheduleMatchesLambdaLR: every step of every case equals LambdaLR's
// lr bit for bit, except at the steps where glibc's cos (which Python's
// math.cos calls) is not correctly rounded; there LR equals, bit for bit,
// the LambdaLR run with a correctly rounded cos that the fixture records.
func TestScheduleMatchesLambdaLR(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_schedules.json")
	if err != nil {
		t.Fatal(err)
	}
	var f scheduleFixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("fixture has no cases")
	}
	n, same, worst := 0, 0, 0.0
	for _, c := range f.Cases {
		s := Schedule{Kind: c.Kind, Peak: c.Peak, Min: c.Min, Warmup: c.Warmup, Total: c.Total}
		if err := s.Validate(); err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if len(c.LR) != c.Total+1 {
			t.Fatalf("%+v: %d lrs, want %d", s, len(c.LR), c.Total+1)
		}
		want := append([]float64(nil), c.LR...)
		for _, e := range c.ExactCos {
			want[int(e[0])-1] = e[1]
		}
		for i := range want {
			n++
			got := s.LR(i + 1)
			if math.Float64bits(got) != math.Float64bits(want[i]) {
				t.Errorf("%+v: LR(%d) = %v (%#x), LambdaLR %v (%#x)", s, i+1, got, math.Float64bits(got), want[i], math.Float64bits(want[i]))
			}
			if got == c.LR[i] {
				same++
			} else {
				worst = max(worst, math.Abs(got-c.LR[i])/ulp64(c.LR[i]))
			}
		}
		if got, end := s.LR(c.Total+5), c.LR[c.Total]; got != end {
			t.Errorf("%+v: LR(%d) = %v, want the end value LR(%d) = %v", s, c.Total+5, got, c.Total+1, end)
		}
	}
	t.Logf("%d of %d learning rates equal LambdaLR's with glibc's cos bit for bit; the others are %.0f ulp away", same, n, worst)
}
