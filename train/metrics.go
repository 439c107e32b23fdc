package train

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/mixtune/mixtune/internal/jsonfloat"
	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/internal/tfevents"
)

// metricsLog appends one JSON object per line to metrics.jsonl, flushed
// at once so that a crash loses at most the line being written, and each
// line's numbers to a TensorBoard event file when there is one.
type metricsLog struct {
	f      *os.File
	w      *bufio.Writer
	events *tfevents.Writer // logging.tensorboard; nil without
	err    error
}

func newMetricsLog(path string) (*metricsLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open metrics: %w", err)
	}
	return &metricsLog{f: f, w: bufio.NewWriter(f)}, nil
}

func (m *metricsLog) write(rec map[string]any) {
	if m == nil || m.err != nil { // nil: a rank other than 0, which writes nothing
		return
	}
	if m.events != nil {
		m.event(scalarsOf(rec, tfevents.WallTime(time.Now())))
	}
	for k, v := range rec {
		if f, ok := v.(float64); ok {
			rec[k] = jsonfloat.Value(f) // a NaN loss is written "NaN", not lost
		}
	}
	b, err := json.Marshal(rec)
	if err == nil {
		m.w.Write(append(b, '\n'))
		err = m.w.Flush()
	}
	m.err = err
}

// event writes e to the event file only: a measurement metrics.jsonl
// does not hold (task accuracy is in summary.json).
func (m *metricsLog) event(e tfevents.Event) {
	if m == nil || m.events == nil || m.err != nil {
		return
	}
	m.err = m.events.Write(e)
}

// contents is the file as written so far, for a checkpoint to keep.
func (m *metricsLog) contents() ([]byte, error) {
	if err := m.w.Flush(); err != nil && m.err == nil {
		m.err = err
	}
	if m.err != nil {
		return nil, m.err
	}
	return readlimit.ReadFile(m.f.Name(), readlimit.Metrics)
}

func (m *metricsLog) Close() error {
	if err := m.w.Flush(); m.err == nil {
		m.err = err
	}
	if err := m.f.Close(); m.err == nil {
		m.err = err
	}
	if m.events != nil {
		if err := m.events.Close(); m.err == nil {
			m.err = err
		}
		m.events = nil
	}
	return m.err
}

// writeSummary prints the final table.
func writeSummary(w io.Writer, s *Summary) {
	row := func(name, before, after string) {
		fmt.Fprintf(w, "  %-16s %12s %12s\n", name, before, after)
	}
	fmt.Fprintln(w)
	row("", "before", "after")
	if s.ValBefore != nil && s.ValAfter != nil {
		row("val loss", fmt.Sprintf("%.4f", s.ValBefore.Loss), fmt.Sprintf("%.4f", s.ValAfter.Loss))
		row("val perplexity", fmt.Sprintf("%.3f", s.ValBefore.Perplexity), fmt.Sprintf("%.3f", s.ValAfter.Perplexity))
	}
	if s.TaskBefore != nil || s.TaskAfter != nil {
		acc := func(t *TaskReport) string {
			if t == nil {
				return "-"
			}
			return fmt.Sprintf("%.1f%%", 100*t.Accuracy)
		}
		row("task accuracy", acc(s.TaskBefore), acc(s.TaskAfter))
	}
	row("train loss", "", fmt.Sprintf("%.4f", s.FinalLoss))
	device := ""
	if s.DevicePeak > 0 {
		device = fmt.Sprintf(" · device peak %d MiB", s.DevicePeak>>20)
	}
	fmt.Fprintf(w, "\n  %d steps · %s tokens · %s · %s tok/s · peak RSS %d MiB%s\n", s.Steps, human(int(s.Tokens)),
		(time.Duration(s.Seconds) * time.Second).String(), human(int(s.TokensPerSec)), s.PeakRSS>>20, device)
	if s.TaskAfter != nil && len(s.TaskAfter.Samples) > 0 {
		a := s.TaskAfter.Samples[0]
		fmt.Fprintf(w, "  sample: %q → %q (want %q)\n", a.Prompt, a.Got, a.Want)
	}
	fmt.Fprintf(w, "  saved %s\n", s.Saved)
}
