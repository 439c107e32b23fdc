package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const runMetrics = `{"step":0,"val_loss":2.5,"val_ppl":12.18}
{"step":1,"loss":2.4,"lr":0.001,"grad_norm":1.5,"skipped":false,"tokens_per_s":100,"elapsed_s":1}
{"step":2,"loss":2.0,"lr":0.0005,"grad_norm":1.2,"skipped":false,"tokens_per_s":110,"elapsed_s":2}
`

func fakeRun(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte(runMetrics), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// `plot RUN` writes into RUN/plots, not into the current directory; plots
// of several runs need --out; a directory that is not a run is bad input
// (exit 2); the help says when loss_scale.png is written. (plot used to
// write ./plots wherever it was started, and its help promised
// loss_scale.png to fp32 runs too.)
func TestPlotWritesIntoTheRun(t *testing.T) {
	root := t.TempDir()
	t.Chdir(root)
	a, b := fakeRun(t, filepath.Join(root, "runs", "a")), fakeRun(t, filepath.Join(root, "runs", "b"))
	code, out, stderr := runIn(t, "plot", a)
	if code != 0 {
		t.Fatalf("plot: exit %d\n%s", code, stderr)
	}
	want := filepath.Join(a, "plots", "loss.png") + "\n" + filepath.Join(a, "plots", "lr.png") + "\n"
	if out != want {
		t.Fatalf("plot wrote\n%s\nwant\n%s", out, want)
	}
	if _, err := os.Stat(filepath.Join(root, "plots")); !os.IsNotExist(err) {
		t.Fatalf("plot wrote into the current directory: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plot", a, b}, "plotting 2 runs together: name the directory for the plots with --out"},
		{[]string{"plot", root}, "metrics.jsonl"},
		{[]string{"compare", root}, "metrics.jsonl"},
	} {
		if code, _, stderr := runIn(t, tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, want 2 with %q\n%s", tc.args, code, tc.want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "plots")); !os.IsNotExist(err) {
		t.Fatalf("a refused plot wrote into the current directory: %v", err)
	}
	out2 := filepath.Join(root, "both")
	if code, out, stderr := runIn(t, "plot", "--out", out2, a, b); code != 0 || !strings.HasPrefix(out, filepath.Join(out2, "loss.png")) {
		t.Fatalf("plot --out: exit %d\n%s%s", code, out, stderr)
	}
	code, _, stderr = runIn(t, "plot", "--help")
	if code != 0 || !strings.Contains(stderr, "loss_scale.png only\nwhen a run scaled its loss: fp16 runs") || !strings.Contains(stderr, "RUN_DIR/plots") {
		t.Fatalf("plot --help: exit %d\n%s", code, stderr)
	}
}

// compare shows a finished run's backend and status from its directory.
func TestCompareCommand(t *testing.T) {
	root := t.TempDir()
	a := fakeRun(t, filepath.Join(root, "a"))
	os.WriteFile(filepath.Join(a, "summary.json"), []byte(`{"steps":2,"backend":"native (Go, avx2 kernel)","precision":"fp32"}`), 0o644)
	code, out, stderr := runIn(t, "compare", a)
	if code != 0 || !strings.Contains(out, "| a | finished | 2 | native (Go, avx2 kernel) | fp32 | 2.5000 |") {
		t.Fatalf("compare: exit %d\n%s%s", code, out, stderr)
	}
}

// compare reads a real run's state: running while the training process
// holds its directory, with the latest metrics and the backend from
// run.json; failed once the process is killed without a summary. (It
// printed "-" in every column of a running run.)
func TestCompareSeesARunningRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills a training process")
	}
	dir, recipe := workdir(t, 100000)
	run := filepath.Join(dir, "runs", "k")
	cmd := mixtune("train", "-c", recipe)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() { cmd.Process.Kill(); <-done }()
	waitFor(t, filepath.Join(run, "checkpoints", "step-000007", "checkpoint.json"), done)
	code, out, stderr := runIn(t, "compare", run)
	if code != 0 || !strings.Contains(out, "| k | running | ") || !strings.Contains(out, " | gonum (pure Go) | fp32 | ") {
		t.Fatalf("compare of a running run: exit %d\n%s%s", code, out, stderr)
	}
	row := strings.Split(strings.TrimSpace(out), "\n")[2]
	if cells := strings.Split(row, " | "); cells[2] == "-" || cells[len(cells)-2] == "-" {
		t.Fatalf("a running run without its step or tokens/s: %s", row)
	}
	cmd.Process.Kill()
	<-done
	done <- nil // for the deferred wait
	if code, out, _ := runIn(t, "compare", run); code != 0 || !strings.Contains(out, "| k | failed | ") {
		t.Fatalf("compare of a killed run: exit %d\n%s", code, out)
	}
}
