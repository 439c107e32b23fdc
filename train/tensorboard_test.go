package train

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/internal/tfevents"
)

// runEvents reads a run's one event file.
func runEvents(t *testing.T, runDir string) []tfevents.Event {
	t.Helper()
	files, err := tfevents.Files(filepath.Join(runDir, tensorboardDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 {
		t.Fatalf("event files %q, want one", files)
	}
	f, err := os.Open(files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events, err := tfevents.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[0].FileVersion != tfevents.Version {
		t.Fatalf("the file does not start with the version record: %+v", events)
	}
	return events
}

// sameAsMetrics checks that the events hold metrics.jsonl line for line,
// each number under its tag at its step, with the task accuracy measured
// before and after training (summary.json) where the task ran.
func sameAsMetrics(t *testing.T, runDir string, events []tfevents.Event) {
	t.Helper()
	lines := readMetrics(t, runDir)
	var sum Summary
	b, err := os.ReadFile(filepath.Join(runDir, summaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	type want struct {
		step   int64
		values map[string]float64
	}
	var wants []want
	if sum.TaskBefore != nil {
		wants = append(wants, want{0, map[string]float64{"task/accuracy": sum.TaskBefore.Accuracy}})
	}
	for _, l := range lines {
		w := want{int64(l["step"]), map[string]float64{}}
		for k, v := range l {
			if k != "step" {
				w.values[scalarTag(k)] = v
			}
		}
		wants = append(wants, w)
	}
	if sum.TaskAfter != nil {
		wants = append(wants, want{int64(sum.Steps), map[string]float64{"task/accuracy": sum.TaskAfter.Accuracy}})
	}
	events = events[1:]
	if len(events) != len(wants) {
		t.Fatalf("%d events for %d measurements", len(events), len(wants))
	}
	for i, e := range events {
		w := wants[i]
		if e.Step != w.step || len(e.Values) != len(w.values) {
			t.Fatalf("event %d: step %d, %d values; want step %d, %v", i, e.Step, len(e.Values), w.step, w.values)
		}
		for _, v := range e.Values {
			x, ok := w.values[v.Tag]
			same := v.Scalar == float32(x) || math.IsNaN(float64(v.Scalar)) && math.IsNaN(x)
			if !ok || !same {
				t.Fatalf("event %d (step %d): %s = %v, want %v (present: %v)", i, e.Step, v.Tag, v.Scalar, x, ok)
			}
		}
	}
}

// scalarSteps is the steps of each tag's scalars, in file order.
func scalarSteps(events []tfevents.Event) map[string][]int64 {
	steps := map[string][]int64{}
	for _, e := range events {
		for _, v := range e.Values {
			steps[v.Tag] = append(steps[v.Tag], e.Step)
		}
	}
	return steps
}

// The event file holds every number metrics.jsonl has, and the task
// accuracy, under TensorBoard tags.
func TestTensorBoardMirrorsMetrics(t *testing.T) {
	dir := fixture(t)
	r := resumeRecipe(t, dir, "logging.tensorboard=true", "task.eval_file="+filepath.Join(dir, "val.jsonl"), "precision=fp16")
	sum, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	events := runEvents(t, sum.RunDir)
	sameAsMetrics(t, sum.RunDir, events)
	steps := scalarSteps(events)
	for _, tag := range []string{"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s", "train/loss_scale", "val/loss", "val/ppl", "task/accuracy"} {
		if len(steps[tag]) == 0 {
			t.Errorf("no %s scalar (tags: %v)", tag, steps)
		}
	}
}

// A run that crashed after its last checkpoint logged steps the resumed
// run logs again: the event file is rewritten to the checkpoint first, so
// no step appears twice, and the steps kept keep their wall times.
func TestTensorBoardResumeHasNoDuplicateSteps(t *testing.T) {
	dir := fixture(t)
	r := resumeRecipe(t, dir, "logging.tensorboard=true")
	ctx, cancel := context.WithCancel(context.Background())
	sum, _ := Run(ctx, r, Options{Out: io.Discard, afterStep: func(s int) {
		if s == 7 {
			cancel()
		}
	}})
	cancel()
	// step 7's checkpoint lost: the resume falls back to step 4's, as
	// after a crash at step 7, with steps 5-7 in the event file
	if err := os.RemoveAll(filepath.Join(sum.RunDir, "checkpoints", "step-000007")); err != nil {
		t.Fatal(err)
	}
	before := runEvents(t, sum.RunDir)
	wallAt := func(events []tfevents.Event, step int64) float64 {
		for _, e := range events {
			if e.Step == step && len(e.Values) > 0 && strings.HasPrefix(e.Values[0].Tag, "train/") {
				return e.WallTime
			}
		}
		t.Fatalf("no train event at step %d", step)
		return 0
	}
	if got := before[len(before)-1].Step; got != 7 {
		t.Fatalf("the interrupted run's events end at step %d", got)
	}
	sum2, err := Run(context.Background(), r, Options{Out: io.Discard, ResumeDir: sum.RunDir})
	if err != nil {
		t.Fatal(err)
	}
	after := runEvents(t, sum2.RunDir)
	sameAsMetrics(t, sum2.RunDir, after)
	if got, want := scalarSteps(after)["train/loss"], []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; !slices.Equal(got, want) {
		t.Errorf("train/loss at steps %v, want %v", got, want)
	}
	for _, step := range []int64{1, 4} {
		if a, b := wallAt(before, step), wallAt(after, step); a != b {
			t.Errorf("step %d: wall time %v became %v", step, a, b)
		}
	}
	if a, b := wallAt(before, 6), wallAt(after, 6); a == b {
		t.Errorf("step 6 was redone but kept the first attempt's wall time %v", a)
	}
}

// TensorBoard turned on for a resumed run (no --force: logging is not
// part of the recipe's hash) gets the run's whole history.
func TestTensorBoardEnabledOnResume(t *testing.T) {
	dir := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	sum, _ := Run(ctx, resumeRecipe(t, dir), Options{Out: io.Discard, afterStep: func(s int) {
		if s == 5 {
			cancel()
		}
	}})
	cancel()
	with := resumeRecipe(t, dir, "logging.tensorboard=true")
	if with.Hash() != resumeRecipe(t, dir).Hash() {
		t.Fatal("logging.tensorboard changes the recipe's hash")
	}
	sum2, err := Run(context.Background(), with, Options{Out: io.Discard, ResumeDir: sum.RunDir})
	if err != nil {
		t.Fatal(err)
	}
	events := runEvents(t, sum2.RunDir)
	sameAsMetrics(t, sum2.RunDir, events)
	if got := scalarSteps(events)["train/loss"]; len(got) != 12 {
		t.Fatalf("train/loss at steps %v, want 1 to 12", got)
	}
}

// logging is left out of the resolved recipe until it is set, so recipes
// written before it hash as they did.
func TestLoggingLeavesOldRecipesAlone(t *testing.T) {
	dir := fixture(t)
	for _, tc := range []struct {
		sets []string
		want bool
	}{
		{nil, false},
		{[]string{"logging.tensorboard=false"}, false},
		{[]string{"logging.tensorboard=true"}, true},
	} {
		r := resumeRecipe(t, dir, tc.sets...)
		y, err := r.Config.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(y), "logging:"); got != tc.want {
			t.Errorf("%v: logging in the resolved recipe: %v, want %v\n%s", tc.sets, got, tc.want, y)
		}
	}
}
