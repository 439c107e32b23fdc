// Package report reads runs back from their directories (metrics.jsonl,
// summary.json, run.json), finished or still training, and presents them:
// curves plotted with gonum/plot, one run alone or several overlaid, and a
// markdown table that compares runs side by side.
package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/internal/flock"
	"github.com/mixtune/mixtune/internal/jsonfloat"
	"github.com/mixtune/mixtune/internal/readlimit"
)

// Run is one run directory's record.
type Run struct {
	Name   string
	Dir    string
	Status Status
	Steps  []Point // one per metrics line with a training loss
	Val    []Point // one per validation
	// EvalPairs has a point per evaluation of a preference run's
	// validation pairs (TRL's eval_rewards/accuracies, eval_loss, ...).
	EvalPairs []Point
	Summary   map[string]any // summary.json; nil while the run trains (a resumed leg's old one is ignored)
	// Manifest is run.json (what ran, where), nil when the directory has
	// none.
	Manifest map[string]any
}

// Status is where a run stands, read from its directory.
type Status string

const (
	// Running: a process holds the run directory's lock (it trains, or
	// measures, or saves).
	Running Status = "running"
	// Finished: summary.json records a run that trained all its steps.
	Finished Status = "finished"
	// Interrupted: summary.json records a run stopped by a signal; train
	// --resume continues it.
	Interrupted Status = "interrupted"
	// Failed: no process trains in it and it has no summary.json: the run
	// ended on an error, a crash or a kill (train --resume continues from
	// its latest checkpoint, if it has one).
	Failed Status = "failed"
)

// lockFile is the lock a training process holds on its run directory
// (train's rundir.go).
const lockFile = ".lock"

// Point is a metrics line: its step and its numeric fields.
type Point struct {
	Step   int
	Fields map[string]float64
}

// Read loads a run directory; a metrics line that does not parse is an
// error.
func Read(dir string) (*Run, error) {
	return read(dir, func(err error) error { return err })
}

// ReadLive loads a run directory that may be being written, for a view
// that must not fail on it: a metrics line that does not parse (torn
// mid-write, or damaged), or a damaged summary.json or run.json, is left
// out and described in problems. err is only for a run without a readable
// metrics.jsonl.
func ReadLive(dir string) (r *Run, problems []string, err error) {
	r, err = read(dir, func(err error) error {
		problems = append(problems, err.Error())
		return nil
	})
	return r, problems, err
}

// read loads a run directory; damage is told of each damaged line or
// record, and an error it returns ends the read.
func read(dir string, damage func(error) error) (*Run, error) {
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
			if err := damage(fmt.Errorf("%s:%d: %w", f.Name(), line, err)); err != nil {
				return nil, err
			}
			continue
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
		if _, ok := p.Fields["eval_"+RewardAccuracies]; ok {
			r.EvalPairs = append(r.EvalPairs, p)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Name(), err)
	}
	if r.Manifest, err = readObject(filepath.Join(dir, "run.json")); err != nil {
		if err := damage(err); err != nil {
			return nil, err
		}
	}
	held, err := flock.Held(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, fmt.Errorf("read run %s: %w", dir, err)
	}
	if held {
		// summary.json, if any, is an earlier leg's: this one is training
		r.Status = Running
		return r, nil
	}
	if r.Summary, err = readObject(filepath.Join(dir, "summary.json")); err != nil {
		if err := damage(err); err != nil {
			return nil, err
		}
	}
	switch {
	case r.Summary == nil:
		r.Status = Failed
	case r.Summary["interrupted"] == true:
		r.Status = Interrupted
	default:
		r.Status = Finished
	}
	return r, nil
}

// readObject reads a JSON object file; nil when there is none.
func readObject(path string) (map[string]any, error) {
	b, err := readlimit.ReadFile(path, readlimit.RunRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return m, nil
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

// latest is the last value of a field in ps, for a run without a summary.
func latest(ps []Point, field string) any {
	for i := len(ps) - 1; i >= 0; i-- {
		if v, ok := ps[i].Fields[field]; ok {
			return v
		}
	}
	return nil
}

// or is the first of vs that is not nil.
func or(vs ...any) any {
	for _, v := range vs {
		if v != nil {
			return v
		}
	}
	return nil
}

// skipped counts the steps metrics.jsonl marks skipped.
func (r *Run) skipped() float64 {
	n := 0.0
	for _, p := range r.Steps {
		n += p.Fields["skipped"]
	}
	return n
}

// The metrics of a preference run, as TRL names them: each step's, and
// with an "eval_" prefix the validation pairs'.
const (
	RewardChosen     = "rewards/chosen"
	RewardRejected   = "rewards/rejected"
	RewardAccuracies = "rewards/accuracies"
	RewardMargins    = "rewards/margins"
	LogpsChosen      = "logps/chosen"
	LogpsRejected    = "logps/rejected"
)

// PreferenceMetrics are TRL's names, in the order compare shows them.
var PreferenceMetrics = []string{RewardAccuracies, RewardMargins, RewardChosen, RewardRejected, LogpsChosen, LogpsRejected}

// preference reports whether the run tunes on preference pairs.
func (r *Run) preference() bool {
	return r.summary("preference_after") != nil || len(r.EvalPairs) > 0 || latest(r.Steps, RewardAccuracies) != nil
}

// pairMetric is a preference metric after training: the validation
// pairs' (summary.json's preference_after, else the latest evaluation),
// or without validation pairs the last logged step's.
func (r *Run) pairMetric(name string) any {
	return or(r.summary("preference_after.eval_"+name), latest(r.EvalPairs, "eval_"+name), latest(r.Steps, name))
}

// Compare writes a markdown table with a row per run. A run without a
// summary (running, or failed) shows the latest values of metrics.jsonl;
// its backend and precision come from run.json. When a run tunes on
// preference pairs, TRL's rewards/ and logps/ columns follow (see
// pairMetric); the validation loss of such a run is its pairs' loss.
func Compare(w io.Writer, runs []*Run) error {
	type column struct {
		head string
		cell func(r *Run) string
	}
	cols := []column{
		{"run", func(r *Run) string { return r.Name }},
		{"status", func(r *Run) string { return string(r.Status) }},
		{"step", func(r *Run) string { return num(or(r.summary("steps"), latest(r.Steps, "step")), "%.0f") }},
		{"backend", func(r *Run) string { return str(or(r.summary("backend"), r.Manifest["blas"])) }},
		{"precision", func(r *Run) string { return str(or(r.summary("precision"), r.Manifest["precision"])) }},
		{"val loss", func(r *Run) string {
			return num(or(r.summary("val_after.loss"), latest(r.Val, "val_loss"), r.summary("preference_after.eval_loss"), latest(r.EvalPairs, "eval_loss")), "%.4f")
		}},
		{"task accuracy", func(r *Run) string { return pct(r.summary("task_after.accuracy")) }},
		{"skipped steps", func(r *Run) string { return num(or(r.summary("skipped_steps"), r.skipped()), "%.0f") }},
		{"zero weight grads (mean)", func(r *Run) string {
			v, ok := r.mean("grad_zero_frac")
			return cond(ok, fmt.Sprintf("%.2f%%", 100*v))
		}},
		{"grads underflowed (mean)", func(r *Run) string {
			v, ok := r.mean("grad_underflow_frac")
			return cond(ok, fmt.Sprintf("%.2f%%", 100*v))
		}},
		{"loss scale", func(r *Run) string { return num(latest(r.Steps, "loss_scale"), "%g") }},
		{"tokens/s", func(r *Run) string {
			return num(or(r.summary("tokens_per_s"), latest(r.Steps, "tokens_per_s")), "%.0f")
		}},
		{"peak RSS", func(r *Run) string {
			f, ok := r.summary("peak_rss_bytes").(float64)
			return cond(ok, fmt.Sprintf("%.0f MiB", f/(1<<20)))
		}},
	}
	devicePeak := func(r *Run) (float64, bool) { f, ok := r.summary("device_peak_bytes").(float64); return f, ok }
	if slices.ContainsFunc(runs, func(r *Run) bool { _, ok := devicePeak(r); return ok }) { // a run on the Vulkan engine
		cols = append(cols, column{"device peak", func(r *Run) string {
			f, ok := devicePeak(r)
			return cond(ok, fmt.Sprintf("%.0f MiB", f/(1<<20)))
		}})
	}
	if slices.ContainsFunc(runs, (*Run).preference) {
		for _, name := range PreferenceMetrics {
			format := "%.4f"
			if name == RewardAccuracies {
				format = "%.1f%%"
			}
			cols = append(cols, column{name, func(r *Run) string {
				v, ok := r.pairMetric(name).(float64)
				if ok && name == RewardAccuracies {
					v *= 100
				}
				return cond(ok && r.preference(), fmt.Sprintf(format, v))
			}})
		}
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

func str(v any) string { return cond(v != nil && v != "", fmt.Sprint(v)) }

func num(v any, format string) string {
	f, ok := v.(float64)
	return cond(ok && !math.IsNaN(f), fmt.Sprintf(format, f))
}

func pct(v any) string {
	f, ok := v.(float64)
	return cond(ok, fmt.Sprintf("%.1f%%", 100*f))
}
