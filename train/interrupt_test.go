package train

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// cancelOn is a run's Out that cancels the run once it prints marker: a
// test stops a run in a chosen phase, whatever the machine's speed.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if c.marker != "" && strings.Contains(c.buf.String(), c.marker) {
		c.cancel()
	}
	return len(p), nil
}

func (c *cancelOn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// Interrupted before its first step, a run saves nothing, says so, names
// no resume command (there is nothing to resume), and leaves no run
// directory: starting again makes the same one, not name-2.
func TestInterruptBeforeFirstStepSavesNothing(t *testing.T) {
	dir := fixture(t)
	cfg := writeConfig(t, dir, goodConfig)
	for _, tc := range []struct {
		name   string
		marker string // "" cancels before Run starts
		sets   []string
	}{
		{"before setup", "", nil},
		{"measuring the task before", "run: ", nil},
		{"validating before", "run: ", []string{"task.before=false"}},
		{"at the first step", "run: ", []string{"task.eval_file=", "data.validation=", "data.validation_split=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Load(cfg, append([]string{"compute.blas=gonum"}, tc.sets...))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &cancelOn{marker: tc.marker, cancel: cancel}
			if tc.marker == "" {
				cancel()
			}
			sum, err := Run(ctx, r, Options{Out: out})
			if err != ErrInterrupted || sum != nil {
				t.Fatalf("got %+v, %v; want ErrInterrupted\n%s", sum, err, out)
			}
			msg := out.String()
			if !strings.Contains(msg, "interrupted before the first step: nothing was trained or saved") ||
				!strings.Contains(msg, "start the run again") || strings.Contains(msg, "--resume") || strings.Contains(msg, "checkpoint saved") {
				t.Fatalf("the message does not say that nothing was saved:\n%s", msg)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "runs")); len(ents) != 0 {
				t.Fatalf("run directories left behind: %v", ents)
			}
		})
	}
	// starting again takes the same name
	r, err := Load(cfg, []string{"compute.blas=gonum", "task.eval_file="})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil || sum.RunDir != filepath.Join(dir, "runs", "t") {
		t.Fatalf("starting again: %v, %+v", err, sum)
	}
}

// Interrupted in the final evaluation, a run stops it, saves the trained
// adapter, returns ErrInterrupted (the command line's 130, not 0), and
// prints a resume command that makes the missing measurements.
func TestInterruptInFinalEvaluation(t *testing.T) {
	dir := fixture(t)
	cfg := writeConfig(t, dir, goodConfig)
	for _, tc := range []struct {
		name string
		sets []string
	}{
		{"validation", nil},
		{"task", []string{"data.validation=", "data.validation_split=0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sets := append([]string{"compute.blas=gonum", "name=" + tc.name}, tc.sets...)
			r, err := Load(cfg, sets)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			out := &cancelOn{}
			// the loop ends at the last step without asking ctx: the
			// cancel is first seen by the final evaluation
			sum, err := Run(ctx, r, Options{Out: out, afterStep: func(s int) {
				if s == r.Train.Steps {
					cancel()
				}
			}})
			if err != ErrInterrupted || sum == nil || !sum.Interrupted || sum.Steps != r.Train.Steps || sum.TaskAfter != nil {
				t.Fatalf("got %+v, %v; want ErrInterrupted after step %d without the task accuracy\n%s", sum, err, r.Train.Steps, out)
			}
			run := filepath.Join(dir, "runs", tc.name)
			want := fmt.Sprintf("interrupted in the final evaluation, after the last step (%d of %d)", r.Train.Steps, r.Train.Steps)
			if msg := out.String(); !strings.Contains(msg, want) || !strings.Contains(msg, "Make them with:\n  mixtune train --resume "+run+"\n") {
				t.Fatalf("the message does not say what was saved and how to finish:\n%s", msg)
			}
			if _, err := os.Stat(filepath.Join(run, "adapter", "adapter_model.safetensors")); err != nil {
				t.Fatal("the trained adapter was not saved")
			}
			// the resume it prints makes the measurements
			done, err := Run(context.Background(), r, Options{Out: io.Discard, ResumeDir: run})
			if err != nil || done.Interrupted || done.TaskAfter == nil || (done.ValBefore != nil) != (done.ValAfter != nil) {
				t.Fatalf("resume: %v, %+v", err, done)
			}
			var onDisk Summary
			b, _ := os.ReadFile(filepath.Join(run, summaryFile))
			if json.Unmarshal(b, &onDisk) != nil || onDisk.Interrupted || onDisk.TaskAfter == nil {
				t.Fatalf("summary.json after the resume: %s", b)
			}
		})
	}
}

// With several ranks, an interrupt that reaches rank 0 alone stops every
// rank in the same phase: before the first step nothing is kept; in the
// final evaluation every rank returns ErrInterrupted and the adapter is
// saved.
func TestDataParallelInterruptInEveryPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on several ranks")
	}
	dir := fixture(t)
	rec := dpRecipe(t, dir, "train.steps=4") // atLast cancels after step 4
	for _, tc := range []struct {
		name    string
		marker  string // rank 0 cancels when it prints this
		atLast  bool   // or after the last step
		dirKept bool
	}{
		{"measuring before", "run: ", false, false},
		{"final evaluation", "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &cancelOn{marker: tc.marker}
			named := func() *Recipe {
				r := rec()
				r.Name = tc.name
				return r
			}
			_, errs := trainRanks(2, named, Options{Out: io.Discard}, func(cancel context.CancelFunc, o *Options) {
				out.cancel, o.Out = cancel, out
				if tc.atLast {
					o.afterStep = func(s int) {
						if s == 4 {
							cancel()
						}
					}
				}
			})
			for i, err := range errs {
				if err != ErrInterrupted {
					t.Fatalf("rank %d: %v, want ErrInterrupted\n%s", i, err, out)
				}
			}
			_, err := os.Stat(filepath.Join(dir, "runs", tc.name, "adapter"))
			if (err == nil) != tc.dirKept {
				t.Fatalf("adapter saved: %v, want %v\n%s", err == nil, tc.dirKept, out)
			}
		})
	}
}

// Interrupted while a resume is still loading, a run changes nothing in
// its directory and says so, with the resume that continues it.
func TestInterruptBeforeResumingChangesNothing(t *testing.T) {
	dir := fixture(t)
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"compute.blas=gonum", "task.eval_file="})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cut, err := Run(ctx, r, Options{Out: io.Discard, afterStep: func(s int) {
		if s == 2 {
			cancel()
		}
	}})
	if err != ErrInterrupted {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(cut.RunDir, summaryFile))
	out := &cancelOn{}
	if _, err := Run(ctx, r, Options{Out: out, ResumeDir: cut.RunDir}); err != ErrInterrupted {
		t.Fatalf("resume with a cancelled context: %v", err)
	}
	want := "interrupted before resuming: " + cut.RunDir + " is unchanged. Resume with:\n  mixtune train --resume " + cut.RunDir + "\n"
	if out.String() != want {
		t.Fatalf("said %q, want %q", out, want)
	}
	if after, _ := os.ReadFile(filepath.Join(cut.RunDir, summaryFile)); !bytes.Equal(before, after) {
		t.Fatal("summary.json changed")
	}
	if sum, err := Run(context.Background(), r, Options{Out: io.Discard, ResumeDir: cut.RunDir}); err != nil || sum.Steps != r.Train.Steps {
		t.Fatalf("the printed resume: %v, %+v", err, sum)
	}
}
