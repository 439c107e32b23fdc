package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/flock"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/optim"
)

// withTimeout fails the test if f does not return within d: the defects
// below used to spin forever.
func withTimeout(t *testing.T, d time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("did not return within %v", d)
		return nil
	}
}

// A run directory that cannot be created is an error at once: a file where
// output_dir should be, or a name the file system refuses. (RunDir used to
// loop while os.Stat failed with anything but "not exist", at 100% CPU.)
func TestRunDirFailuresReturn(t *testing.T) {
	dir := fixture(t)
	file := filepath.Join(dir, "afile")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"output_dir is a file", []string{"output_dir=" + file}, "not a directory"},
		{"output_dir below a file", []string{"output_dir=" + file + "/runs"}, "not a directory"},
		{"a path element too long", []string{"output_dir=" + filepath.Join(dir, strings.Repeat("d", 300))}, "file name too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Load(writeConfig(t, dir, goodConfig), append(tc.sets, "compute.blas=gonum", "train.steps=2"))
			if err != nil {
				t.Fatal(err)
			}
			err = withTimeout(t, 20*time.Second, func() error {
				_, err := Run(context.Background(), r, Options{Out: io.Discard})
				return err
			})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
	// a 300-character name is refused by the recipe's validation
	_, err := Load(writeConfig(t, dir, goodConfig), []string{"name=" + strings.Repeat("n", 300)})
	if err == nil || !strings.Contains(err.Error(), "name: must be 1 to 100 letters") {
		t.Fatalf("long name: %v", err)
	}
}

// Runs started at the same instant get distinct directories: each claims
// its name with one atomic mkdir.
func TestSimultaneousRunsGetTheirOwnDirectories(t *testing.T) {
	out := t.TempDir()
	const n = 16
	dirs := make([]string, n)
	var wg sync.WaitGroup
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := createRunDir(out, "same")
			if err != nil {
				t.Error(err)
			}
			dirs[i] = d
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, d := range dirs {
		if seen[d] {
			t.Fatalf("two runs share %s", d)
		}
		seen[d] = true
	}
	if !seen[filepath.Join(out, "same")] || !seen[filepath.Join(out, fmt.Sprintf("same-%d", n))] {
		t.Fatalf("directories %v", dirs)
	}
}

// The same through Run: concurrent starts of one recipe never share a
// metrics.jsonl.
func TestConcurrentRunsWriteSeparateMetrics(t *testing.T) {
	dir := fixture(t)
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"compute.blas=gonum", "train.steps=2", "task.eval_file=", "train.log_every=1"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	sums := make([]*Summary, n)
	var wg sync.WaitGroup
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Run(context.Background(), r, Options{Out: io.Discard})
			if err != nil {
				t.Error(err)
			}
			sums[i] = s
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, s := range sums {
		if s == nil || seen[s.RunDir] {
			t.Fatalf("runs share a directory: %v", sums)
		}
		seen[s.RunDir] = true
		if n := len(readMetrics(t, s.RunDir)); n != 4 { // val at 0, steps 1 and 2, val at 2
			t.Fatalf("%s: %d metrics lines, want 4", s.RunDir, n)
		}
	}
}

// A second process (here: a second open of the lock file) cannot train in
// a run directory that another holds.
func TestLockedRunDirectoryIsRefused(t *testing.T) {
	dir := fixture(t)
	r := resumeRecipe(t, dir)
	sum, err := Run(context.Background(), r, Options{Out: io.Discard, afterStep: func(int) {}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := flock.Acquire(filepath.Join(sum.RunDir, lockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	before := snapshot(t, sum.RunDir)
	_, err = Run(context.Background(), resumeRecipe(t, dir, "train.steps=20"), Options{Out: io.Discard, ResumeDir: sum.RunDir, Force: true})
	if err == nil || !strings.Contains(err.Error(), "is in use: locked by another process (pid") {
		t.Fatalf("resume of a locked run: %v", err)
	}
	if after := snapshot(t, sum.RunDir); after != before {
		t.Fatal("the refused resume changed the run directory")
	}
}

// snapshot hashes every file below dir (but the lock file), by path.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == lockFile {
			return err
		}
		data, err := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %x\n", strings.TrimPrefix(p, dir), sha256.Sum256(data))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Resuming a finished run says so and changes nothing: not its
// checkpoint, not summary.json (which used to be rewritten with tokens 0).
func TestResumeOfFinishedRunChangesNothing(t *testing.T) {
	dir := fixture(t)
	r := resumeRecipe(t, dir)
	sum, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, sum.RunDir)
	var log bytes.Buffer
	again, err := Run(context.Background(), r, Options{Out: &log, ResumeDir: sum.RunDir})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), sum.RunDir+" is complete (step 12 of 12); nothing to do") {
		t.Fatalf("log: %q", log.String())
	}
	if again.Tokens != sum.Tokens || again.Tokens == 0 {
		t.Fatalf("summary tokens %d, the run's %d", again.Tokens, sum.Tokens)
	}
	if after := snapshot(t, sum.RunDir); after != before {
		t.Fatalf("resuming a finished run changed its directory:\n%s\nvs\n%s", before, after)
	}
}

// A checkpoint write interrupted at any moment leaves a whole checkpoint
// for its step, under its name or one that recoverCheckpoints puts back;
// half-written ones are removed. The states are those writeCheckpoint
// passes through, built by stopping a real write at each stage.
func TestCheckpointRecovery(t *testing.T) {
	params := []*optim.Param{{Name: "w", Shape: []int{3}, Value: []float32{1, 2, 3}, Grad: make([]float32, 3)}}
	opt, _ := optim.NewSGD(optim.SGDConfig{})
	write := func(root string, step int, val float32, stage func(string)) {
		params[0].Value[0] = val
		if _, err := writeCheckpoint(root, checkpointState{Step: step}, params, opt, []byte("{}\n"), stage); err != nil {
			t.Fatal(err)
		}
	}
	// stopAt copies root as it stands when the write reaches stage: the
	// directory a SIGKILL at that moment would leave.
	stopAt := func(t *testing.T, stage string) string {
		root := filepath.Join(t.TempDir(), "checkpoints")
		write(root, 8, 1, nil)
		write(root, 10, 1, nil)
		crashed := filepath.Join(t.TempDir(), "crashed")
		write(root, 10, 2, func(s string) {
			if s == stage {
				if err := os.CopyFS(crashed, os.DirFS(root)); err != nil {
					t.Fatal(err)
				}
			}
		})
		return crashed
	}
	for _, tc := range []struct {
		stage string
		want  float32 // the value of the step-10 checkpoint after recovery
		notes int
	}{
		{"files", 1, 1},   // new one complete under .tmp-, old one in place: the temporary one is removed
		{"aside", 2, 2},   // old one aside, new one complete under .tmp-: the new one is put in place
		{"renamed", 2, 1}, // new one in place, old one aside: the old one is removed
	} {
		t.Run(tc.stage, func(t *testing.T) {
			root := stopAt(t, tc.stage)
			notes, err := recoverCheckpoints(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(notes) != tc.notes {
				t.Fatalf("notes %q", notes)
			}
			ents, _ := os.ReadDir(root)
			if len(ents) != 2 {
				t.Fatalf("left %v", ents)
			}
			ck, err := loadLatestCheckpoint(root, func(w string) { t.Error(w) })
			if err != nil {
				t.Fatal(err)
			}
			if v, _, _ := ck.Weights.Float32("w"); ck.State.Step != 10 || v[0] != tc.want {
				t.Fatalf("step %d, w[0] = %v; want step 10 with %v", ck.State.Step, v[0], tc.want)
			}
		})
	}
	// an incomplete temporary checkpoint is removed, the good one kept
	root := filepath.Join(t.TempDir(), "checkpoints")
	write(root, 4, 1, nil)
	if err := os.MkdirAll(filepath.Join(root, ".tmp-step-000006-123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if notes, err := recoverCheckpoints(root); err != nil || len(notes) != 1 || !strings.Contains(notes[0], "removed .tmp-step-000006-123") {
		t.Fatalf("%q %v", notes, err)
	}
	if steps, _ := listCheckpoints(root); len(steps) != 1 || steps[0] != 4 {
		t.Fatalf("checkpoints %v", steps)
	}
}

// metrics.jsonl cut short after a checkpoint is rebuilt from the
// checkpoint's copy on resume (it used to be padded with NUL bytes to the
// recorded length), and the resumed run's metrics equal an uninterrupted
// run's.
func TestResumeRebuildsCutMetrics(t *testing.T) {
	dir := fixture(t)
	full, err := Run(context.Background(), resumeRecipe(t, dir), Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	r := resumeRecipe(t, dir, "name=cut")
	ctx, cancel := context.WithCancel(context.Background())
	sum, err := Run(ctx, r, Options{Out: io.Discard, afterStep: func(s int) {
		if s == 6 {
			cancel()
		}
	}})
	cancel()
	if err != ErrInterrupted {
		t.Fatal(err)
	}
	mpath := filepath.Join(sum.RunDir, "metrics.jsonl")
	if err := os.Truncate(mpath, 10); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), r, Options{Out: io.Discard, ResumeDir: sum.RunDir}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(mpath)
	if bytes.IndexByte(b, 0) >= 0 {
		t.Fatal("metrics.jsonl holds NUL bytes")
	}
	sameMetrics(t, full.RunDir, sum.RunDir)
}

// --resume --force with a changed recipe makes it the run's recipe:
// resolved.yaml is rewritten and the change logged, so a later plain
// --resume continues (even before a new checkpoint was written) and
// reports against the new step count.
func TestForcedChangeBecomesTheRunsRecipe(t *testing.T) {
	dir := fixture(t)
	sum, err := Run(context.Background(), resumeRecipe(t, dir), Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	longer := resumeRecipe(t, dir, "train.steps=16")
	// resumed under --force and stopped before its first step: no new checkpoint
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOn{marker: "resuming from", cancel: cancel}
	if _, err := Run(ctx, longer, Options{Out: out, ResumeDir: sum.RunDir, Force: true}); err != ErrInterrupted {
		t.Fatalf("forced resume: %v", err)
	}
	res, err := Load(filepath.Join(sum.RunDir, resolvedFile), nil)
	if err != nil || res.Train.Steps != 16 {
		t.Fatalf("resolved.yaml after --force: %v, steps %d", err, res.Train.Steps)
	}
	b, _ := os.ReadFile(filepath.Join(sum.RunDir, configLogFile))
	if !strings.Contains(string(b), `"changes":["train.steps: 12 → 16"]`) {
		t.Fatalf("config_changes.jsonl: %s", b)
	}
	// a plain resume: the recipe from resolved.yaml, the checkpoint from before the change
	var log bytes.Buffer
	end, err := Run(context.Background(), res, Options{Out: &log, ResumeDir: sum.RunDir})
	if err != nil {
		t.Fatalf("plain resume after a forced change: %v", err)
	}
	if end.Steps != 16 || !strings.Contains(log.String(), "(step 12 of 16)") {
		t.Fatalf("ended at %d:\n%s", end.Steps, log.String())
	}
}

// Bad data found only by reading it is reported, with exit status 2 in the
// CLI, before a run directory exists.
func TestDataProblemsFoundBeforeTheRunDirectory(t *testing.T) {
	dir := fixture(t)
	if err := os.WriteFile(filepath.Join(dir, "badtask.jsonl"), []byte("{\"prompt\": \"a\", \"completion\": \"b\"}\n{\"prompt\": \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "badtask.parquet"), []byte("{\"prompt\": \"a\", \"completion\": \"b\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pq := func(name string) string {
		p, err := filepath.Abs(filepath.Join("..", "data", "testdata", "parquet", name+".parquet"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	long := strings.Repeat("p", 40)
	if err := os.WriteFile(filepath.Join(dir, "longprompts.jsonl"), []byte(`{"prompt": "`+long+`", "completion": "x"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"seq_len leaves no target", []string{"data.seq_len=3"}, "no training example has a target token within data.seq_len 3"},
		{"task file with bad JSON", []string{"task.eval_file=" + filepath.Join(dir, "badtask.jsonl")}, "badtask.jsonl:2: invalid JSON"},
		{"every completion truncated", []string{"data.train=" + filepath.Join(dir, "longprompts.jsonl")}, "no training example has a target token within data.seq_len 16"},
		{"Parquet training file with a null", []string{"data.train=" + pq("bad_null_completion")}, `bad_null_completion.parquet: row group 0, row 1 (row 1 of the file, counting from 0), column "completion": is null`},
		{"Parquet validation file of another type", []string{"data.validation=" + pq("bad_int_text")}, `bad_int_text.parquet: column "text": is int32`},
		{"Parquet task file that is not Parquet", []string{"task.eval_file=" + filepath.Join(dir, "badtask.parquet")}, `badtask.parquet: not a Parquet file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Load(writeConfig(t, dir, goodConfig), append(tc.sets, "compute.blas=gonum"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Run(context.Background(), r, Options{Out: io.Discard})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !IsInputError(err) {
				t.Fatalf("error %v (input error: %v), want %q", err, IsInputError(err), tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "runs")); !errors.Is(err, fs.ErrNotExist) {
				t.Fatal("a run directory was created")
			}
		})
	}
}

// A batch larger than the data is clamped to it with a warning, in
// training and in eval; a run too large for the machine is refused with
// its estimate, before anything is allocated or written.
func TestSizesBeyondTheDataOrTheMachine(t *testing.T) {
	dir := fixture(t)
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"compute.blas=gonum", "train.batch_size=100000000", "train.steps=2"})
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	if _, err := Run(context.Background(), r, Options{Out: &log}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "warning: train.batch_size 100000000 is more than the 40 rows of training data: using 40") {
		t.Fatalf("log:\n%s", log.String())
	}
	rep, err := Eval(EvalConfig{Model: filepath.Join(dir, "model"), Data: filepath.Join(dir, "val.jsonl"), SeqLen: 16, BatchSize: 100000000, BLAS: "gonum"})
	if err != nil || rep.Tokens == 0 {
		t.Fatalf("eval with a huge batch: %v %+v", err, rep)
	}
	huge := strings.Replace(goodConfig, "  path: DIR/model\n", "  init: random\n  architecture: {hidden_size: 16384, num_hidden_layers: 64, intermediate_size: 65536, max_position_embeddings: 64}\n", 1)
	r, err = Load(writeConfig(t, dir, huge), []string{"compute.blas=gonum", "name=huge"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), r, Options{Out: io.Discard})
	if err == nil || !IsInputError(err) || !strings.Contains(err.Error(), "more than this machine's") || !strings.Contains(err.Error(), "compute.activation_checkpointing: true; about") {
		t.Fatalf("a 200 GB model: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "runs", "huge")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a run directory was created")
	}
}

// init: random takes reference.yaml's defaults for omitted architecture
// fields, and head_dim is a field (the error used to suggest it while
// refusing it as unknown).
func TestRandomArchitectureDefaults(t *testing.T) {
	dir := fixture(t)
	arch := strings.Replace(goodConfig, "  path: DIR/model\n", "  init: random\n  architecture: {hidden_size: 64}\n", 1)
	r, err := Load(writeConfig(t, dir, arch), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := r.Base; b.IntermediateSize != 688 || b.NumHiddenLayers != 4 || b.NumAttentionHeads != 8 || b.NumKeyValueHeads != 8 ||
		b.MaxPositionEmbeddings != 256 || b.RMSNormEps != 1e-5 || b.RopeTheta != 10000 || b.InitializerRange != 0.02 || b.HiddenSize != 64 {
		t.Fatalf("architecture %+v", b)
	}
	arch = strings.Replace(goodConfig, "  path: DIR/model\n", "  init: random\n  architecture: {hidden_size: 100}\n", 1)
	if _, err := Load(writeConfig(t, dir, arch), nil); err == nil || !strings.Contains(err.Error(), "set head_dim") {
		t.Fatalf("indivisible hidden size: %v", err)
	}
	arch = strings.Replace(goodConfig, "  path: DIR/model\n", "  init: random\n  architecture: {hidden_size: 100, head_dim: 16}\n", 1)
	if r, err := Load(writeConfig(t, dir, arch), nil); err != nil || r.Base.HeadDimension() != 16 {
		t.Fatalf("head_dim: %v", err)
	}
}

// A rank above what a module can use is legal (PEFT allows it) but said.
func TestAdapterRankAboveModuleWarns(t *testing.T) {
	dir := fixture(t)
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"adapter.r=12"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Warnings) != 1 || !strings.Contains(r.Warnings[0], "adapter.r = 12 exceeds min(out, in) = 8 of model.layers.0.self_attn.v_proj") {
		t.Fatalf("warnings %q", r.Warnings)
	}
}

// With loss scaling, a non-finite loss is an overflow like a non-finite
// gradient: the step is skipped and the scale backed off, where the run
// used to abort as diverged.
func TestNonFiniteLossWithScalingSkipsTheStep(t *testing.T) {
	params := []*optim.Param{{Name: "a", Value: []float32{1, 2}, Grad: []float32{0.5, 0.25}}}
	opt, _ := optim.NewAdamW(optim.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	scaler, _ := amp.NewLossScaler(amp.ScalerConfig{Init: 1024, Growth: 2, Backoff: 0.5, Interval: 100})
	u, err := applyStep(params, opt, scaler, 1, 1e-2, true, false)
	if err != nil || u.stepped || params[0].Value[0] != 1 || scaler.Scale() != 512 {
		t.Fatalf("update %+v, weights %v, scale %v", u, params[0].Value, scaler.Scale())
	}
	// and through the loop: an fp16 run whose forward pass overflows (an MLP
	// whose outputs are beyond fp16's range) skips every step and backs off,
	// where it used to stop at step 1 as "diverged"
	dir := fixture(t)
	m, err := model.Load(filepath.Join(dir, "model"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.down_proj.weight"} {
		for i := range m.Weights[name].Data {
			m.Weights[name].Data[i] *= 1e7
		}
	}
	if err := m.Save(filepath.Join(dir, "model"), amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"compute.blas=gonum", "precision=fp16", "task.eval_file=",
		"data.validation=", "data.validation_split=0", "train.steps=4", "train.log_every=1"})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, sum.RunDir)
	if sum.SkippedSteps != 4 || len(ms) != 4 || ms[3]["loss_scale"] != 65536/8 || !math.IsNaN(float64(sum.FinalLoss)) && !math.IsInf(float64(sum.FinalLoss), 0) {
		t.Fatalf("skipped %d of 4, final loss %v, metrics %v", sum.SkippedSteps, sum.FinalLoss, ms)
	}
}

// The memory estimate stays above, and near, peak RSS measured with
// `mixtune bench --vocab 49152 --dim 576 --layers 30 --heads 9 --kv-heads 3
// --ffn 1536 --seq S --batch 1 --precision bf16 --base-dtype bf16
// [--checkpoint] --steps 1 --warmup 1` (AMD EPYC Zen 3, 2026-11-26, with
// the memory plan and the collector at 25%): it
// refuses runs that would not fit, not runs that would.
// (It once counted attention's [T, T] probabilities, which the tiled
// kernel does not keep, and put that run at 39 GiB.)
func TestMemoryEstimateAgainstMeasured(t *testing.T) {
	smol := model.Config{VocabSize: 49152, HiddenSize: 576, IntermediateSize: 1536, NumHiddenLayers: 30, NumAttentionHeads: 9, NumKeyValueHeads: 3}
	for _, tc := range []struct {
		seq        int
		checkpoint bool
		measured   float64 // GiB
	}{
		{512, false, 1.37}, {2048, false, 4.31},
		{512, true, 0.64}, {2048, true, 1.16},
	} {
		r := &Recipe{Config: Defaults(), Base: smol}
		r.Data.SeqLen, r.Data.ValidationSplit, r.Model.BaseDtype = tc.seq, 0, amp.BF16
		r.Compute.ActivationCheckpointing = tc.checkpoint
		est := float64(r.estimateMemory(1)) / (1 << 30)
		t.Logf("seq %d, checkpointing %v: estimate %.2f GiB, measured %.2f", tc.seq, tc.checkpoint, est, tc.measured)
		// the estimate's allowance for the process (data, tokenizer,
		// decoder) is more than bench, which loads none of them, uses
		if est < tc.measured || est > 1.5*tc.measured+float64(runtimeBytes)/(1<<30) {
			t.Errorf("seq %d, checkpointing %v: estimate %.2f GiB, measured %.2f", tc.seq, tc.checkpoint, est, tc.measured)
		}
	}
}
