//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Data-parallel training under Open MPI's mpirun, with 2 (and 3) local
// ranks. Each test skips, saying why, where Open MPI is not installed
// (.ci/run installs it on Debian).

// openMPIRun is Open MPI's mpirun, or skips the test.
func openMPIRun(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts MPI jobs")
	}
	for _, name := range []string{"mpirun.openmpi", "mpirun"} {
		if p, err := exec.LookPath(name); err == nil {
			if out, _ := exec.Command(p, "--version").CombinedOutput(); bytes.Contains(out, []byte("Open MPI")) {
				return p
			}
		}
	}
	t.Skip("Open MPI is not installed (Debian: apt-get install openmpi-bin libopenmpi3): the MPI tests do not run")
	return ""
}

// syncBuffer is an output buffer written by a process and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// job is an mpirun of the test binary as mixtune.
type job struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
	tag  string // in every rank's environment, to find the ranks
}

// mpiArgs are mpirun's flags for local ranks: as root (CI), more ranks
// than cores, and no binding (bound to one core each, a rank's Go runtime
// would see one CPU).
func mpiArgs(extra ...string) []string {
	args := []string{"--oversubscribe", "--bind-to", "none"}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	return append(args, extra...)
}

var jobCount int

// startJob runs `mpirun -np n mixtune ARGS...`; mpiFlags go before -np,
// and an argument "--" starts a second MPMD program (mpirun's ":").
func startJob(t *testing.T, mpiFlags []string, n int, args ...string) *job {
	t.Helper()
	mpirun := openMPIRun(t)
	jobCount++
	tag := fmt.Sprintf("%d-%d", os.Getpid(), jobCount)
	full := append(mpiArgs(mpiFlags...), "-np", fmt.Sprint(n), os.Args[0])
	full = append(full, args...)
	cmd := exec.Command(mpirun, full...)
	cmd.Env = append(os.Environ(), "MIXTUNE_TEST_MAIN=1", "MIXTUNE_TEST_JOB="+tag)
	j := &job{cmd: cmd, out: &syncBuffer{}, done: make(chan error, 1), tag: tag}
	cmd.Stdout, cmd.Stderr = j.out, j.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { j.done <- cmd.Wait() }()
	return j
}

// wait waits for the job, failing the test after limit.
func (j *job) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-j.done:
		return err
	case <-time.After(limit):
		j.cmd.Process.Kill()
		<-j.done
		t.Fatalf("mpirun did not end within %v:\n%s", limit, j.out.String())
	}
	return nil
}

// rankPID finds the process of rank r of the job.
func (j *job) rankPID(t *testing.T, r int) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		vars := strings.Split(string(env), "\x00")
		has := func(kv string) bool {
			for _, v := range vars {
				if v == kv {
					return true
				}
			}
			return false
		}
		if has("MIXTUNE_TEST_JOB="+j.tag) && has(fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", r)) {
			return pid
		}
	}
	t.Fatalf("rank %d of the job is not running:\n%s", r, j.out.String())
	return 0
}

// runJob runs an MPI job to its end and fails the test if it fails.
func runJob(t *testing.T, n int, args ...string) string {
	t.Helper()
	j := startJob(t, nil, n, args...)
	if err := j.wait(t, 5*time.Minute); err != nil {
		t.Fatalf("mpirun -np %d %v: %v\n%s", n, args, err, j.out.String())
	}
	return j.out.String()
}

// curve is a run's metrics by step: the step lines' loss and grad_norm,
// and the validation losses.
type curve struct {
	loss, norm, val map[int]float64
}

func readCurve(t *testing.T, runDir string) curve {
	t.Helper()
	c := curve{map[int]float64{}, map[int]float64{}, map[int]float64{}}
	b, err := os.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		step := int(m["step"].(float64))
		if v, ok := m["loss"].(float64); ok {
			c.loss[step], c.norm[step] = v, m["grad_norm"].(float64)
		}
		if v, ok := m["val_loss"].(float64); ok {
			c.val[step] = v
		}
	}
	return c
}

// close reports the largest relative difference between two curves.
func (a curve) diff(b curve) (float64, error) {
	worst := 0.0
	for _, pair := range [][2]map[int]float64{{a.loss, b.loss}, {a.norm, b.norm}, {a.val, b.val}} {
		if len(pair[0]) != len(pair[1]) {
			return 0, fmt.Errorf("%d values vs %d", len(pair[0]), len(pair[1]))
		}
		for k, x := range pair[0] {
			y, ok := pair[1][k]
			if !ok {
				return 0, fmt.Errorf("step %d missing", k)
			}
			worst = math.Max(worst, math.Abs(x-y)/math.Max(math.Abs(x), 1e-6))
		}
	}
	return worst, nil
}

// computation is metricsWithoutClock without the reductions' timings.
func computation(t *testing.T, runDir string) string {
	t.Helper()
	var out []string
	for _, l := range metricsWithoutClock(t, runDir) {
		var m map[string]any
		json.Unmarshal([]byte(l), &m)
		delete(m, "allreduce_s")
		delete(m, "allreduce_busy_s")
		b, _ := json.Marshal(m)
		out = append(out, string(b))
	}
	return strings.Join(out, "\n")
}

func sameAdapter(t *testing.T, a, b string) {
	t.Helper()
	x, _ := os.ReadFile(filepath.Join(a, "adapter", "adapter_model.safetensors"))
	y, _ := os.ReadFile(filepath.Join(b, "adapter", "adapter_model.safetensors"))
	if len(x) == 0 || !bytes.Equal(x, y) {
		t.Fatalf("the adapters of %s and %s differ", a, b)
	}
}

// mpiRecipe is the workdir recipe with a global batch of 16 rows: 8 per rank.
var mpiSets = []string{"--set", "train.batch_size=16", "--set", "train.eval_every=5"}

// The correctness test: mpirun -np 2 on a recipe with batch_size
// 16 (8 rows per rank) gives one process's loss curve up to the fp32
// summation order, and the same bits on a repeat, with --allreduce
// ordered, without overlap, and under MPICH; 3 ranks (5, 5 and 6 rows)
// also match one process.
func TestMPITrainingMatchesOneProcess(t *testing.T) {
	openMPIRun(t)
	dir, recipe := workdir(t, 15)
	runs := filepath.Join(dir, "runs")
	train := func(name string) []string {
		return append([]string{"train", "-c", recipe, "--set", "name=" + name}, mpiSets...)
	}
	if out, err := mixtune(train("one")...).CombinedOutput(); err != nil {
		t.Fatalf("one process: %v\n%s", err, out)
	}
	out := runJob(t, 2, train("two")...)
	if !strings.Contains(out, "data parallel: 2 ranks on 1 host") || strings.Count(out, "device:") != 1 {
		t.Errorf("rank 0 alone should speak, and say it is data parallel:\n%s", out)
	}
	runJob(t, 2, train("two-again")...)
	runJob(t, 2, append(train("two-ordered"), "--allreduce", "ordered")...)
	runJob(t, 2, append(train("two-no-overlap"), "--overlap=false")...)
	runJob(t, 3, train("three")...)
	mpich, _ := exec.LookPath("mpiexec.mpich")
	if mpich != "" { // MPICH's ABI, under its own launcher
		cmd := exec.Command(mpich, append([]string{"-n", "2", os.Args[0]}, train("two-mpich")...)...)
		cmd.Env = append(os.Environ(), "MIXTUNE_TEST_MAIN=1")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "mpiexec (MPICH)") {
			t.Fatalf("mpiexec.mpich -n 2: %v\n%s", err, out)
		}
	}

	one := readCurve(t, filepath.Join(runs, "one"))
	for _, name := range []string{"two", "two-ordered", "two-no-overlap", "three"} {
		d, err := one.diff(readCurve(t, filepath.Join(runs, name)))
		if err != nil || d > 1e-5 {
			t.Errorf("%s vs one process: largest relative difference %g (%v)", name, d, err)
		}
		t.Logf("%-15s vs one process: largest relative difference of loss, grad_norm, val_loss: %.2g", name, d)
	}
	two := readCurve(t, filepath.Join(runs, "two"))
	var table strings.Builder
	fmt.Fprintf(&table, "step  loss (1 process)      loss (2 ranks)\n")
	for s := 1; s <= 15; s++ {
		fmt.Fprintf(&table, "%4d  %.17g  %.17g\n", s, one.loss[s], two.loss[s])
	}
	t.Logf("loss curves:\n%s", table.String())
	// two runs of 2 ranks: the same bits, metrics and adapter
	pairs := [][2]string{{"two", "two-again"}, {"two", "two-ordered"}, {"two", "two-no-overlap"}}
	if mpich != "" {
		pairs = append(pairs, [2]string{"two", "two-mpich"})
	} else {
		t.Log("MPICH is not installed: its ABI is not tried (apt-get install mpich)")
	}
	for _, pair := range pairs {
		a, b := filepath.Join(runs, pair[0]), filepath.Join(runs, pair[1])
		if computation(t, a) != computation(t, b) {
			t.Errorf("%s and %s: metrics differ", pair[0], pair[1])
		}
		sameAdapter(t, a, b)
	}
	// run.json: the launcher, the world size and each rank's host
	var m struct {
		Launcher  string `json:"launcher"`
		WorldSize int    `json:"world_size"`
		Ranks     []struct{ Host string }
	}
	b, _ := os.ReadFile(filepath.Join(runs, "three", "run.json"))
	if err := json.Unmarshal(b, &m); err != nil || m.Launcher != "mpirun (Open MPI)" || m.WorldSize != 3 || len(m.Ranks) != 3 || m.Ranks[2].Host == "" {
		t.Errorf("run.json: %+v (%v)", m, err)
	}
}

// One rank killed: mpirun ends the job within seconds, naming the rank;
// the last checkpoint is whole; the run resumes on 2 ranks to exactly the
// uninterrupted run, and on 1 and 3 to it within fp32 rounding.
func TestMPIKillOneRankThenResume(t *testing.T) {
	openMPIRun(t)
	dir, recipe := workdir(t, 30)
	runs := filepath.Join(dir, "runs")
	runJob(t, 2, append([]string{"train", "-c", recipe, "--set", "name=full"}, mpiSets...)...)
	full := filepath.Join(runs, "full")

	for _, n := range []int{2, 1, 3} {
		name := fmt.Sprintf("k%d", n)
		run := filepath.Join(runs, name)
		j := startJob(t, nil, 2, append([]string{"train", "-c", recipe, "--set", "name=" + name}, mpiSets...)...)
		waitFor(t, filepath.Join(run, "checkpoints", "step-000014", "checkpoint.json"), j.done)
		pid := j.rankPID(t, 1)
		killed := time.Now()
		syscall.Kill(pid, syscall.SIGKILL)
		err := j.wait(t, 30*time.Second)
		took := time.Since(killed)
		if err == nil || !strings.Contains(j.out.String(), "rank 1") || took > 10*time.Second {
			t.Fatalf("after SIGKILL to rank 1: %v after %v\n%s", err, took, j.out.String())
		}
		if n == 2 {
			t.Logf("rank 1 killed: mpirun exited (%v) after %.1f s: %s", err, took.Seconds(), lineWith(j.out.String(), "rank 1"))
		}
		verifyNewestCheckpoint(t, filepath.Join(run, "checkpoints"))
		resume := []string{"train", "--resume", run}
		if n == 1 {
			if out, err := mixtune(resume...).CombinedOutput(); err != nil {
				t.Fatalf("resume on one process: %v\n%s", err, out)
			}
		} else {
			runJob(t, n, resume...)
		}
		if n == 2 {
			if computation(t, full) != computation(t, run) {
				t.Errorf("resumed on 2 ranks: the metrics differ from the uninterrupted run's")
			}
			sameAdapter(t, full, run)
			continue
		}
		d, err := readCurve(t, full).diff(readCurve(t, run))
		if err != nil || d > 1e-5 {
			t.Errorf("resumed on %d: largest relative difference %g (%v)", n, d, err)
		}
		t.Logf("killed on 2 ranks, resumed on %d: largest relative difference from the uninterrupted run %.2g", n, d)
	}
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// Ranks started with different recipes, or different binaries, are
// refused before anything is written, with one message naming the rank.
func TestMPIRefusesMismatchedRanks(t *testing.T) {
	openMPIRun(t)
	dir, recipe := workdir(t, 5)
	other := filepath.Join(t.TempDir(), "mixtune-other")
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	// the same program with a byte appended: another binary
	if err := os.WriteFile(other, append(exe, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, want string
		second     []string // rank 1's program and arguments
	}{
		{"recipe", "recipe", []string{os.Args[0], "train", "-c", recipe, "--set", "optimizer.lr=0.5"}},
		{"binary", "mixtune binary", []string{other, "train", "-c", recipe}},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := startJob(t, nil, 1, append([]string{"train", "-c", recipe, ":", "-np", "1"}, c.second...)...)
			err := j.wait(t, 2*time.Minute)
			out := j.out.String()
			if err == nil || strings.Count(out, "were not started alike") != 1 || !strings.Contains(out, "rank 1 on ") || !strings.Contains(out, c.want) {
				t.Fatalf("%v\n%s", err, out)
			}
			t.Logf("%s", lineWith(out, "were not started alike"))
			if _, err := os.Stat(filepath.Join(dir, "runs")); err == nil {
				t.Fatal("a run directory was made")
			}
		})
	}
}

// Ctrl-C to mpirun: mpirun sends SIGTERM to the ranks after
// odls_base_sigkill_timeout seconds, and SIGKILL as long after; given
// time, every rank stops after the same step and rank 0 checkpoints it,
// and the run resumes. Open MPI's default timeout is 1 s: the ranks then
// checkpoint only if the step ends in time, else the last checkpoint is
// left as it was.
func TestMPIInterruptCheckpoints(t *testing.T) {
	openMPIRun(t)
	dir, recipe := workdir(t, 100000)
	run := filepath.Join(dir, "runs", "k")
	j := startJob(t, []string{"--mca", "odls_base_sigkill_timeout", "3"}, 2, append([]string{"train", "-c", recipe}, mpiSets...)...)
	waitFor(t, filepath.Join(run, "checkpoints", "step-000007", "checkpoint.json"), j.done)
	j.cmd.Process.Signal(os.Interrupt)
	j.wait(t, time.Minute)
	out := j.out.String()
	var step int
	if i := strings.Index(out, "interrupted after step "); i < 0 {
		t.Fatalf("no checkpoint on interrupt:\n%s", out)
	} else {
		fmt.Sscan(out[i+len("interrupted after step "):], &step)
	}
	if strings.Count(out, "stopping (interrupt again") != 1 {
		t.Errorf("rank 0 alone should say it is stopping:\n%s", out)
	}
	verifyNewestCheckpoint(t, filepath.Join(run, "checkpoints"))
	if _, err := os.Stat(filepath.Join(run, "checkpoints", fmt.Sprintf("step-%06d", step))); err != nil {
		t.Fatalf("no checkpoint of step %d: %v", step, err)
	}
	// resume with a few more steps: a changed recipe, so --force
	j = startJob(t, nil, 2, "train", "--resume", run, "--set", fmt.Sprintf("train.steps=%d", step+3), "--force")
	if err := j.wait(t, 2*time.Minute); err != nil || !strings.Contains(j.out.String(), fmt.Sprintf("resuming from %s", filepath.Join(run, "checkpoints", fmt.Sprintf("step-%06d", step)))) {
		t.Fatalf("resume: %v\n%s", err, j.out.String())
	}
	t.Logf("interrupted after step %d; resumed to step %d", step, step+3)
}

// Without a loadable MPI library, a rank says what to install; mpirun
// ends the job.
func TestMPIMissingLibrary(t *testing.T) {
	openMPIRun(t)
	_, recipe := workdir(t, 5)
	t.Setenv("MIXTUNE_MPI_LIB", "/nonexistent/libmpi.so.40")
	j := startJob(t, nil, 2, "train", "-c", recipe)
	err := j.wait(t, time.Minute)
	out := j.out.String()
	if err == nil || !strings.Contains(out, "MPI is not available: launched by mpirun (Open MPI) as rank") || !strings.Contains(out, "MIXTUNE_MPI_LIB") {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("%s", lineWith(out, "MPI is not available"))
}

// Preference pairs under mpirun -np 2: DPO with the reference pass (the
// adapter off) on each rank gives one process's loss, gradient norm and
// TRL metrics up to the fp32 summation order (1e-5 relative, as for
// rows), and the same bits on a repeat.
func TestMPIPreferenceMatchesOneProcess(t *testing.T) {
	openMPIRun(t)
	dir, recipe := workdir(t, 4)
	var pairs strings.Builder
	for i := range 24 {
		fmt.Fprintf(&pairs, "{\"prompt\": \"n=%d?\", \"chosen\": \"%d!\", \"rejected\": \"%d?\"}\n", i, i, i+1)
	}
	if err := os.WriteFile(filepath.Join(dir, "pairs.jsonl"), []byte(pairs.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	train := func(name string) []string {
		return []string{"train", "-c", recipe, "--set", "name=" + name, "--set", "data.train=" + filepath.Join(dir, "pairs.jsonl"),
			"--set", "data.validation_split=0", "--set", "train.objective=dpo", "--set", "train.batch_size=6", "--set", "train.grad_accum=2", "--set", "schedule.warmup_steps=1"}
	}
	if out, err := mixtune(train("one")...).CombinedOutput(); err != nil {
		t.Fatalf("one process: %v\n%s", err, out)
	}
	runJob(t, 2, train("two")...)
	runJob(t, 2, train("two-again")...)
	runs := filepath.Join(dir, "runs")
	read := func(name string) []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(computation(t, filepath.Join(runs, name)), "\n") {
			var m map[string]any
			json.Unmarshal([]byte(l), &m)
			if _, ok := m["loss"]; ok {
				out = append(out, m)
			}
		}
		return out
	}
	one, two := read("one"), read("two")
	if len(one) != 4 || len(two) != 4 {
		t.Fatalf("%d and %d step lines, want 4", len(one), len(two))
	}
	worst := 0.0
	for i := range one {
		for _, k := range []string{"loss", "grad_norm", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"} {
			x, _ := one[i][k].(float64)
			y, ok := two[i][k].(float64)
			d := math.Abs(x-y) / math.Max(math.Abs(x), 1e-3)
			if !ok || d > 1e-5 {
				t.Errorf("step %d: %s %v in one process, %v on 2 ranks", i+1, k, one[i][k], two[i][k])
			}
			worst = math.Max(worst, d)
		}
	}
	t.Logf("2 ranks vs one process: largest relative difference of loss, grad_norm and TRL's metrics: %.2g", worst)
	if computation(t, filepath.Join(runs, "two")) != computation(t, filepath.Join(runs, "two-again")) {
		t.Error("two runs on 2 ranks: metrics differ")
	}
	sameAdapter(t, filepath.Join(runs, "two"), filepath.Join(runs, "two-again"))
}
