package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An interrupt is acted on within seconds in every phase of a run, with
// exit status 130 and a message that says what was saved; a resume
// command is printed only where there is something to resume, and then
// it works.
func TestInterruptInEveryPhase(t *testing.T) {
	if testing.Short() {
		t.Skip("signals training processes")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dates := filepath.Join(repo, "tasks", "dates")
	for _, tc := range []struct {
		name  string
		sets  []string
		after time.Duration // signal this long after the start,
		line  string        // or once the run prints this
		want  string
		large bool // train on a generated 32 MB file
	}{
		// 0.1 s in, a fast machine may already have made the run's
		// directory (then removed: the message says so); either way
		// nothing is left behind (checked below)
		{name: "0.1 s after the start", after: 100 * time.Millisecond,
			want: "interrupted before the first step: nothing was trained or saved"},
		{name: "tokenizing a large file", large: true, line: "data: tokenizing ",
			want: "interrupted before the first step: nothing was trained or saved; start the run again"},
		// 4000 validation rows take far longer than the bound below
		{name: "validating before the first step", sets: []string{"data.validation=" + filepath.Join(dates, "train.jsonl"), "task.eval_file="}, line: "run: ",
			want: "interrupted before the first step: nothing was trained or saved, and "},
		{name: "the final task evaluation", sets: []string{"data.validation=", "data.validation_split=0", "task.before=false", "task.limit=64"}, line: "step 2/2",
			want: "interrupted in the final evaluation, after the last step (2 of 2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			train := filepath.Join(dates, "train.jsonl")
			if tc.large {
				train = filepath.Join(dir, "large.jsonl")
				writeLargeData(t, train, 32<<20)
			}
			recipe := filepath.Join(dir, "r.yaml")
			body := fmt.Sprintf(`name: q
seed: 1
output_dir: %s
model: {path: %s}
data: {train: %s, validation: %s, seq_len: 48, cache: false}
adapter: {type: lora, r: 4, alpha: 8, target_modules: [q_proj, v_proj]}
train: {steps: 2, batch_size: 16, log_every: 1}
schedule: {warmup_steps: 0}
task: {eval_file: %s, max_new_tokens: 24}
compute: {threads: 2}
`, filepath.Join(dir, "runs"), filepath.Join(repo, "models", "tiny-byte"), train, filepath.Join(dates, "val.jsonl"), filepath.Join(dates, "test.jsonl"))
			if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"train", "-c", recipe}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			out, waited := interruptAt(t, mixtune(args...), tc.after, tc.line)
			t.Logf("exited %.2f s after the signal", waited.Seconds())
			if waited > 5*time.Second {
				t.Errorf("exited %.1f s after the signal; want under 5 s", waited.Seconds())
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("the output does not say %q:\n%s", tc.want, out)
			}
			run := filepath.Join(dir, "runs", "q")
			i := strings.Index(out, "mixtune train --resume ")
			if i < 0 {
				// nothing to resume: nothing left that a new start would step around
				if _, err := os.Stat(run); err == nil {
					t.Fatalf("%s was left behind, though nothing was saved", run)
				}
				return
			}
			cmdline := strings.Fields(strings.SplitN(out[i:], "\n", 2)[0])
			if len(cmdline) != 4 || cmdline[3] != run {
				t.Fatalf("resume command %q, want one for %s", cmdline, run)
			}
			res, err := mixtune(cmdline[1:]...).CombinedOutput()
			if err != nil {
				t.Fatalf("the printed resume %q failed: %v\n%s", cmdline, err, res)
			}
			if b, err := os.ReadFile(filepath.Join(run, "summary.json")); err != nil || !strings.Contains(string(b), `"task_after"`) || strings.Contains(string(b), `"interrupted"`) {
				t.Fatalf("summary.json after the resume: %v\n%s", err, b)
			}
		})
	}
}

// writeLargeData writes about size bytes of prompt/completion rows.
func writeLargeData(t *testing.T, path string, size int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for n, i := 0, 0; n < size; i++ {
		k, _ := fmt.Fprintf(w, "{\"prompt\": \"Date: %04d-%02d-%02d\\nIn words:\", \"completion\": \" day %d of a long and tedious list of dates\"}\n", 1900+i%200, 1+i%12, 1+i%28, i)
		n += k
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// interruptAt starts cmd, sends SIGINT after the delay, or once its output
// has line, and waits for it to exit with status 130. It returns the
// output and the time from the signal to the exit.
func interruptAt(t *testing.T, cmd *exec.Cmd, after time.Duration, line string) (string, time.Duration) {
	t.Helper()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder // written by the reader, read once it is done
	seen := make(chan struct{})
	read := make(chan struct{})
	go func(marker string) {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			if marker != "" && strings.Contains(sc.Text(), marker) {
				marker = ""
				close(seen)
			}
		}
	}(line)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); pw.Close() }()
	trigger := time.After(after)
	if line != "" {
		trigger = nil
	}
	select {
	case <-trigger:
	case <-seen:
	case err := <-exited:
		<-read
		t.Fatalf("the run ended (%v) before the moment to interrupt it:\n%s", err, out.String())
	case <-time.After(5 * time.Minute):
		cmd.Process.Kill()
		<-read
		t.Fatalf("%q never appeared:\n%s", line, out.String())
	}
	signalled := time.Now()
	cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-read
		t.Fatalf("still running 2 minutes after the interrupt:\n%s", out.String())
	}
	waited := time.Since(signalled)
	<-read
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit status %d, want 130:\n%s", code, out.String())
	}
	return out.String(), waited
}
