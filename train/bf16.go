package train

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/cpufeat"
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
// a CPU with features f; choose opens the bf16 GEMM (blas.ChooseBF16).
// auto takes oneDNN's bf16 GEMM where the CPU has bf16 units and it runs
// (the native VDPBF16PS kernel only with hardware, until it is faster
// than the emulation); hardware is an error where no bf16 GEMM runs.
func decideBF16(mode amp.BF16Matmul, low amp.Format, f cpufeat.Features, choose func() (blas.BF16Choice, error)) (bf16Decision, error) {
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
		c, err := choose()
		if err != nil {
			return emulate(fmt.Sprintf("auto → emulate: the CPU has %s but %v", f, err))
		}
		if _, native := c.Gemmer.(*blas.NativeBF16); native {
			// measured slower than the emulation (bench, bf16, 2 threads,
			// an Intel Xeon with avx512_bf16 and AMX: 2,081 tokens/s
			// against 4,167): hardware runs it, auto not yet
			return emulate("auto → emulate: the native VDPBF16PS kernel is not yet faster than the emulation (amp.bf16_matmul: hardware runs it); oneDNN's bf16 GEMM would be taken where libdnnl loads")
		}
		return bf16Decision{gemmer: c.Gemmer, path: bf16PathHardware, reason: "auto → hardware: " + c.Reason}, nil
	}
	c, err := choose()
	if err != nil {
		return bf16Decision{}, inputError(fmt.Errorf("amp.bf16_matmul: hardware: %w (amp.bf16_matmul: emulate or auto runs without one)", err))
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
