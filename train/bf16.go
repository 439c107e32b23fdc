package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/cpufeat"
	"github.com/mixtune/mixtune/nn"
)

// bf16Paths name where a run's bf16 products ran, in run.json's
// bf16_matmul: the values of amp.bf16_matmul that are not auto.
const (
	bf16PathEmulate  = "emulate"
	bf16PathHardware = "hardware"
)

// bf16Decision is where a run's bf16 products run and why.
type bf16Decision struct {
	gemmer   blas.BF16Gemmer // nil: emulated in the fp32 kernels
	path     string          // bf16PathEmulate or bf16PathHardware; "" when the run has no bf16 products
	reason   string
	warnings []string
}

// decideBF16 applies amp.bf16_matmul (mode) to a run at precision low on
// a CPU with features f; candidates lists the bf16 GEMMs that run here,
// best first by kind (blas.BF16Candidates), and measure compares one with
// the emulation (blas.MeasureBF16, cached per machine; it checks the
// products first), and check holds one to a float64 reference
// (blas.CheckBF16). auto takes the fastest bf16 GEMM where the CPU has
// bf16 units and it measured faster than the emulation; hardware takes
// the first wherever one runs, and is an error where none does or the
// one it would take gives wrong products; emulate never takes one.
func decideBF16(mode amp.BF16Matmul, low amp.Format, f cpufeat.Features, candidates func() ([]blas.BF16Choice, error),
	measure func(blas.BF16Gemmer) (blas.BF16Speed, []string), check func(blas.BF16Gemmer) error) (bf16Decision, error) {
	if low != amp.BF16 {
		var d bf16Decision
		if mode == amp.BF16Hardware {
			d.warnings = append(d.warnings, fmt.Sprintf("amp.bf16_matmul: hardware does nothing at precision %v: the run has no bf16 products", low))
		}
		return d, nil
	}
	emulate := func(why string) (bf16Decision, error) {
		return bf16Decision{path: bf16PathEmulate, reason: why}, nil
	}
	switch mode {
	case amp.BF16Emulate:
		return emulate("amp.bf16_matmul: emulate: bf16 values in the fp32 kernels")
	case amp.BF16Auto:
		if !f.BF16Units() {
			return emulate("auto → emulate: this CPU has no bf16 units")
		}
		cs, err := candidates()
		if err != nil {
			return emulate(fmt.Sprintf("auto → emulate: the CPU has %s but %v", f, err))
		}
		best := -1
		var warnings, measured []string
		speeds := make([]blas.BF16Speed, len(cs))
		for i, c := range cs {
			var w []string
			speeds[i], w = measure(c.Gemmer)
			warnings = append(warnings, w...)
			measured = append(measured, fmt.Sprintf("%s: %v", c.Reason, speeds[i]))
			if speeds[i].Faster() && (best < 0 || speeds[i].Hardware > speeds[best].Hardware) {
				best = i
			}
		}
		if best < 0 {
			what := fmt.Sprintf("%s is not faster than the emulation here: %v (amp.bf16_matmul: hardware runs it)", cs[0].Reason, speeds[0])
			if len(cs) > 1 {
				what = "no bf16 GEMM is faster than the emulation here: " + strings.Join(measured, "; ") + " (amp.bf16_matmul: hardware runs the first)"
			}
			d, _ := emulate("auto → emulate: " + what)
			d.warnings = warnings
			return d, nil
		}
		reason := fmt.Sprintf("auto → hardware: %s", measured[best])
		for i, m := range measured {
			if i != best {
				reason += "; not taken: " + m
			}
		}
		return bf16Decision{gemmer: cs[best].Gemmer, path: bf16PathHardware, reason: reason, warnings: warnings}, nil
	}
	cs, err := candidates()
	if err != nil {
		return bf16Decision{}, inputError(fmt.Errorf("amp.bf16_matmul: hardware: %w (amp.bf16_matmul: emulate or auto runs without one)", err))
	}
	c := cs[0]
	// Taken without timing, but never unchecked: a library or kernel that
	// computes wrong products here would train on garbage silently.
	if err := check(c.Gemmer); err != nil {
		return bf16Decision{}, fmt.Errorf("amp.bf16_matmul: hardware: the bf16 GEMM (%s) gives wrong products on this CPU: %w (amp.bf16_matmul: emulate runs without it)", c.Reason, err)
	}
	d := bf16Decision{gemmer: c.Gemmer, path: bf16PathHardware, reason: "hardware: " + c.Reason}
	if !c.Units {
		d.warnings = append(d.warnings, "amp.bf16_matmul: hardware: "+c.Reason+"; it is slower than emulate here")
	}
	return d, nil
}

// startedBF16 is where run.json in dir says the run's bf16 products ran;
// ok is false where it says nothing (no bf16 products, or an older run).
func startedBF16(dir string) (path string, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		return "", false
	}
	var m struct {
		BF16Matmul string `json:"bf16_matmul"`
	}
	if json.Unmarshal(b, &m) != nil {
		return "", false
	}
	return m.BF16Matmul, m.BF16Matmul != ""
}

// resumeBF16Warning says what changed when a resumed run's bf16 products
// run elsewhere than the run's started on; "" when nothing did.
func resumeBF16Warning(started, now string) string {
	if started == "" || now == "" || started == now {
		return ""
	}
	return fmt.Sprintf("this run's bf16 products ran as %s (run.json) and now run as %s: they sum in another order, and its numbers will differ from an uninterrupted run's", started, now)
}

// measureBF16 is decideBF16's measure for a run on engine eng: its backend
// against the bf16 GEMM at its thread count, cached as the backend
// calibration is (MIXTUNE_BLAS_CALIBRATE).
func measureBF16(eng *nn.Engine) func(blas.BF16Gemmer) (blas.BF16Speed, []string) {
	return func(g blas.BF16Gemmer) (blas.BF16Speed, []string) {
		var warnings []string
		opt, err := blas.AutoOptionsFromEnv(os.Getenv)
		if err != nil {
			opt, warnings = blas.AutoOptions{Cache: blas.CacheOff}, []string{err.Error()}
		}
		s, w := blas.MeasureBF16(eng.BLAS, g, eng.Workers, opt)
		return s, append(warnings, w...)
	}
}
