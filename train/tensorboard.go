package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/jsonfloat"
	"github.com/mixtune/mixtune/internal/tfevents"
)

// tensorboardDir holds a run's TensorBoard event files (logging.tensorboard).
const tensorboardDir = "tensorboard"

// scalarTag is the TensorBoard tag of a metrics.jsonl key: val_loss is
// val/loss, task_accuracy task/accuracy, and the step's own numbers are
// train/loss, train/lr and so on, so that TensorBoard groups them.
func scalarTag(key string) string {
	for _, group := range []string{"val", "task"} {
		if rest, ok := strings.CutPrefix(key, group+"_"); ok {
			return group + "/" + rest
		}
	}
	return "train/" + key
}

// scalarsOf is a metrics record as an event: its step, and each other
// number (a boolean as 0 or 1; "NaN" and "±Inf" as those values) as a
// scalar, in tag order. Text fields have no scalar and are left out.
func scalarsOf(rec map[string]any, wallTime float64) tfevents.Event {
	e := tfevents.Event{WallTime: wallTime}
	for k, v := range rec {
		x, ok := scalarValue(v)
		if !ok {
			continue
		}
		if k == "step" {
			e.Step = int64(x)
			continue
		}
		e.Values = append(e.Values, tfevents.Value{Tag: scalarTag(k), Scalar: float32(x)})
	}
	slices.SortFunc(e.Values, func(a, b tfevents.Value) int { return strings.Compare(a.Tag, b.Tag) })
	return e
}

// scalarValue reads a record's value as the logger has it (Go numbers,
// named ones such as jsonfloat.Float included) or as metrics.jsonl has
// it (JSON numbers and jsonfloat's strings).
func scalarValue(v any) (float64, bool) {
	if _, isText := v.(string); isText {
		return jsonfloat.Parse(v)
	}
	x := reflect.ValueOf(v)
	switch {
	case x.CanFloat():
		return x.Float(), true
	case x.CanInt():
		return float64(x.Int()), true
	case x.CanUint():
		return float64(x.Uint()), true
	case x.Kind() == reflect.Bool:
		if x.Bool() {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// openEvents gives the metrics log its event file when the recipe asks
// for TensorBoard: a new one for a new run; for a resumed run, the old one
// rewritten to the checkpoint's metrics.jsonl.
func (s *session) openEvents() error {
	if !s.r.Logging.TensorBoard {
		return nil
	}
	var err error
	if s.ck == nil {
		s.logger.events, err = tfevents.Create(filepath.Join(s.dir, tensorboardDir), time.Now(), eventsHost())
		return err
	}
	metrics, err := s.logger.contents()
	if err != nil {
		return fmt.Errorf("tensorboard: %w", err)
	}
	s.logger.events, err = resumeEvents(s.dir, metrics, s.ck.State.TaskBefore, time.Now())
	return err
}

func eventsHost() string {
	host, err := os.Hostname()
	if err != nil || host == "" || strings.ContainsAny(host, `/\`) {
		return "localhost"
	}
	return host
}

// stepTag identifies a scalar across the rewrite of an event file.
type stepTag struct {
	step int64
	tag  string
}

// resumeEvents rewrites a resumed run's event file from metrics.jsonl as
// the checkpoint restored it (and the task accuracy measured before
// training), then opens it to append: the steps redone after the
// checkpoint are not in it twice. Each scalar keeps the wall time the old
// file gave it; one the old file lacks (tensorboard enabled on resume, or
// the file lost) is stamped now: enabling TensorBoard on a resumed run
// writes the run's whole history. The newest old file is replaced in one
// rename, and any older ones removed, so TensorBoard sees one file.
func resumeEvents(runDir string, metrics []byte, taskBefore *TaskReport, now time.Time) (*tfevents.Writer, error) {
	dir := filepath.Join(runDir, tensorboardDir)
	files, err := tfevents.Files(dir)
	if err != nil {
		return nil, err
	}
	wall := map[stepTag]float64{}
	start := tfevents.WallTime(now)
	for i, f := range files {
		old, err := readEvents(f)
		if err != nil {
			return nil, err
		}
		for j, e := range old {
			if i == 0 && j == 0 && e.FileVersion != "" {
				start = e.WallTime
			}
			for _, v := range e.Values {
				k := stepTag{e.Step, v.Tag}
				if _, seen := wall[k]; !seen {
					wall[k] = e.WallTime
				}
			}
		}
	}
	stamp := func(e tfevents.Event) tfevents.Event {
		if len(e.Values) > 0 {
			if t, ok := wall[stepTag{e.Step, e.Values[0].Tag}]; ok {
				e.WallTime = t
			}
		}
		return e
	}
	var events []tfevents.Event
	if taskBefore != nil {
		events = append(events, stamp(taskEvent(0, *taskBefore, now)))
	}
	for _, line := range bytes.Split(metrics, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil {
			continue // metrics.jsonl is the record; its view leaves out what it cannot read
		}
		events = append(events, stamp(scalarsOf(rec, tfevents.WallTime(now))))
	}
	path := filepath.Join(dir, tfevents.FileName(now, eventsHost()))
	if len(files) > 0 {
		path = files[len(files)-1]
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	if err := atomicfile.WriteFile(path, tfevents.Encode(start, events)); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	for _, f := range files[:max(len(files)-1, 0)] {
		if err := os.Remove(f); err != nil {
			return nil, fmt.Errorf("tensorboard: %w", err)
		}
	}
	return tfevents.Append(path)
}

// readEvents reads an event file's whole records: a record cut short by
// a crash ends the file, as it ended metrics.jsonl.
func readEvents(path string) ([]tfevents.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	defer f.Close()
	events, err := tfevents.Read(f)
	if err != nil && !errors.Is(err, tfevents.ErrCorrupt) {
		return nil, fmt.Errorf("tensorboard: read %s: %w", path, err)
	}
	return events, nil
}

// taskEvent is a task accuracy measurement as an event. Task accuracy is
// not a metrics.jsonl line (summary.json has it), so it goes to
// TensorBoard on its own.
func taskEvent(step int, rep TaskReport, now time.Time) tfevents.Event {
	return scalarsOf(map[string]any{"step": step, "task_accuracy": rep.Accuracy}, tfevents.WallTime(now))
}
