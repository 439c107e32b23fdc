// Package report reads finished runs back from their directories
// (metrics.jsonl, summary.json) and presents them: curves plotted with
// gonum/plot, one run alone or several overlaid, and a markdown table that
// compares runs side by side.
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"

	"github.com/mixtune/mixtune/internal/jsonfloat"
	"github.com/mixtune/mixtune/internal/readlimit"
)

// Run is one run directory's record.
type Run struct {
	Name    string
	Dir     string
	Steps   []Point // one per metrics line with a training loss
	Val     []Point // one per validation
	Summary map[string]any
}

// Point is a metrics line: its step and its numeric fields.
type Point struct {
	Step   int
	Fields map[string]float64
}

// Read loads a run directory.
func Read(dir string) (*Run, error) {
	r := &Run{Name: filepath.Base(filepath.Clean(dir)), Dir: dir}
	f, err := readlimit.Open(filepath.Join(dir, "metrics.jsonl"), readlimit.Metrics)
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", dir, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			// a run killed mid-write leaves at most a torn last line
			return nil, fmt.Errorf("%s:%d: %w", f.Name(), line, err)
		}
		p := Point{Fields: map[string]float64{}}
		for k, v := range raw {
			switch x := v.(type) {
			case bool:
				p.Fields[k] = b2f(x)
			default:
				if f, ok := jsonfloat.Parse(x); ok {
					p.Fields[k] = f
				}
			}
		}
		p.Step = int(p.Fields["step"])
		if _, ok := p.Fields["loss"]; ok {
			r.Steps = append(r.Steps, p)
		}
		if _, ok := p.Fields["val_loss"]; ok {
			r.Val = append(r.Val, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if b, err := readlimit.ReadFile(filepath.Join(dir, "summary.json"), readlimit.RunRecord); err == nil {
		if err := json.Unmarshal(b, &r.Summary); err != nil {
			return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "summary.json"), err)
		}
	}
	return r, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// mean averages a field over the training lines that have it.
func (r *Run) mean(field string) (float64, bool) {
	var s float64
	var n int
	for _, p := range r.Steps {
		if v, ok := p.Fields[field]; ok {
			s += v
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return s / float64(n), true
}

// summary reads a dotted path of summary.json; nil when absent.
func (r *Run) summary(path string) any {
	var cur any = r.Summary
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

// Compare writes a markdown table with a row per run.
func Compare(w io.Writer, runs []*Run) error {
	cols := []struct {
		head string
		cell func(r *Run) string
	}{
		{"run", func(r *Run) string { return r.Name }},
		{"precision", func(r *Run) string { return str(r.summary("precision")) }},
		{"final val loss", func(r *Run) string { return num(r.summary("val_after.loss"), "%.4f") }},
		{"task accuracy", func(r *Run) string { return pct(r.summary("task_after.accuracy")) }},
		{"skipped steps", func(r *Run) string { return num(r.summary("skipped_steps"), "%.0f") }},
		{"zero weight grads (mean)", func(r *Run) string {
			v, ok := r.mean("grad_zero_frac")
			return cond(ok, fmt.Sprintf("%.2f%%", 100*v))
		}},
		{"grads underflowed (mean)", func(r *Run) string {
			v, ok := r.mean("grad_underflow_frac")
			return cond(ok, fmt.Sprintf("%.2f%%", 100*v))
		}},
		{"final loss scale", func(r *Run) string {
			if len(r.Steps) == 0 {
				return "-"
			}
			v, ok := r.Steps[len(r.Steps)-1].Fields["loss_scale"]
			return cond(ok, fmt.Sprintf("%g", v))
		}},
		{"tokens/s", func(r *Run) string { return num(r.summary("tokens_per_s"), "%.0f") }},
		{"peak RSS", func(r *Run) string {
			f, ok := r.summary("peak_rss_bytes").(float64)
			return cond(ok, fmt.Sprintf("%.0f MiB", f/(1<<20)))
		}},
	}
	var head, rule []string
	for _, c := range cols {
		head, rule = append(head, c.head), append(rule, "---")
	}
	fmt.Fprintf(w, "| %s |\n| %s |\n", strings.Join(head, " | "), strings.Join(rule, " | "))
	for _, r := range runs {
		var cells []string
		for _, c := range cols {
			cells = append(cells, c.cell(r))
		}
		if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")); err != nil {
			return err
		}
	}
	return nil
}

func cond(ok bool, s string) string {
	if !ok {
		return "-"
	}
	return s
}

func str(v any) string { return cond(v != nil, fmt.Sprint(v)) }

func num(v any, format string) string {
	f, ok := v.(float64)
	return cond(ok && !math.IsNaN(f), fmt.Sprintf(format, f))
}

func pct(v any) string {
	f, ok := v.(float64)
	return cond(ok, fmt.Sprintf("%.1f%%", 100*f))
}
