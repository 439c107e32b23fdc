package train

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/blas"
)

// wallClock are the metrics fields that measure time, not the computation.
var wallClock = map[string]bool{"tokens_per_s": true, "elapsed_s": true}

// sameMetrics compares two runs' metrics.jsonl line by line, every field
// bit for bit except the wall-clock ones.
func sameMetrics(t *testing.T, a, b string) {
	t.Helper()
	ma, mb := readMetrics(t, a), readMetrics(t, b)
	if len(ma) != len(mb) {
		t.Fatalf("%d metrics lines vs %d", len(ma), len(mb))
	}
	for i := range ma {
		if len(ma[i]) != len(mb[i]) {
			t.Fatalf("line %d: fields %v vs %v", i, ma[i], mb[i])
		}
		for k, v := range ma[i] {
			if !wallClock[k] && v != mb[i][k] {
				t.Fatalf("line %d: %s = %v vs %v", i, k, v, mb[i][k])
			}
		}
	}
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	if err1 != nil || err2 != nil || !bytes.Equal(x, y) {
		t.Fatalf("%s and %s differ (%v, %v)", a, b, err1, err2)
	}
}

func resumeRecipe(t *testing.T, dir string, extra ...string) *Recipe {
	t.Helper()
	sets := append([]string{"train.steps=12", "train.checkpoint_every=4", "train.keep_checkpoints=2",
		"schedule.warmup_steps=2", "compute.blas=gonum", "task.eval_file=", "train.log_every=1"}, extra...)
	r, err := Load(writeConfig(t, dir, goodConfig), sets)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestResumeIsBitIdentical(t *testing.T) {
	for _, precision := range []string{"fp32", "fp16"} {
		t.Run(precision, func(t *testing.T) {
			dir := fixture(t)
			full, err := Run(context.Background(), resumeRecipe(t, dir, "precision="+precision), Options{Out: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			// interrupted after steps 5 and then 9, each time resumed
			r := resumeRecipe(t, dir, "precision="+precision, "name=cut")
			var runDir string
			for i, stopAt := range []int{5, 9, 0} {
				ctx, cancel := context.WithCancel(context.Background())
				opt := Options{Out: io.Discard, ResumeDir: runDir, afterStep: func(s int) {
					if s == stopAt {
						cancel()
					}
				}}
				sum, err := Run(ctx, r, opt)
				cancel()
				if stopAt > 0 && err != ErrInterrupted {
					t.Fatalf("leg %d: %v, want an interruption", i, err)
				}
				if stopAt == 0 && err != nil {
					t.Fatalf("last leg: %v", err)
				}
				runDir = sum.RunDir
			}
			sameMetrics(t, full.RunDir, runDir)
			for _, f := range []string{"adapter/adapter_model.safetensors", "checkpoints/step-000012/trainable.safetensors", "checkpoints/step-000012/optimizer.safetensors"} {
				sameFile(t, filepath.Join(full.RunDir, f), filepath.Join(runDir, f))
			}
			// keep_checkpoints: 2
			steps, _ := listCheckpoints(filepath.Join(runDir, "checkpoints"))
			if len(steps) != 2 || steps[1] != 12 {
				t.Fatalf("checkpoints kept: %v, want the newest two", steps)
			}
		})
	}
}

func TestThreadCountDoesNotChangeResults(t *testing.T) {
	dir := fixture(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, blas := range []string{"gonum", "native", "openblas"} {
		if blas == "openblas" && !openBLASAvailable() {
			t.Log("OpenBLAS not installed: gonum and native checked")
			continue
		}
		var runs []string
		for _, threads := range []string{"1", "3"} {
			runtime.GOMAXPROCS(int(threads[0] - '0'))
			r := resumeRecipe(t, dir, "compute.threads="+threads, "compute.blas="+blas, "name="+blas+"-"+threads)
			sum, err := Run(context.Background(), r, Options{Out: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, sum.RunDir)
		}
		sameMetrics(t, runs[0], runs[1])
		sameFile(t, filepath.Join(runs[0], "adapter/adapter_model.safetensors"), filepath.Join(runs[1], "adapter/adapter_model.safetensors"))
	}
}

func TestCorruptCheckpointFallsBack(t *testing.T) {
	for _, damage := range []struct {
		name string
		do   func(dir string) error
		want string
	}{
		{"truncated file", func(d string) error {
			return os.Truncate(filepath.Join(d, trainableFile), 10)
		}, "trainable.safetensors fails its checksum (truncated or altered)"},
		{"flipped byte", func(d string) error {
			p := filepath.Join(d, optimizerFile)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)-1] ^= 0x40
			return os.WriteFile(p, b, 0o644)
		}, "optimizer.safetensors fails its checksum (truncated or altered)"},
		{"missing file", func(d string) error {
			return os.Remove(filepath.Join(d, stateFile))
		}, "missing state.json"},
	} {
		t.Run(damage.name, func(t *testing.T) {
			dir := fixture(t)
			r := resumeRecipe(t, dir)
			ctx, cancel := context.WithCancel(context.Background())
			sum, _ := Run(ctx, r, Options{Out: io.Discard, afterStep: func(s int) {
				if s == 10 {
					cancel()
				}
			}})
			cancel()
			ckRoot := filepath.Join(sum.RunDir, "checkpoints")
			if err := damage.do(filepath.Join(ckRoot, "step-000010")); err != nil {
				t.Fatal(err)
			}
			var log bytes.Buffer
			sum2, err := Run(context.Background(), r, Options{Out: &log, ResumeDir: sum.RunDir})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(log.String(), damage.want) || !strings.Contains(log.String(), "falling back to step-000008") ||
				!strings.Contains(log.String(), "resuming from "+filepath.Join(ckRoot, "step-000008")) {
				t.Fatalf("log does not report the damage and the fallback:\n%s", log.String())
			}
			if sum2.Steps != 12 {
				t.Fatalf("resumed run ended at step %d", sum2.Steps)
			}
			// and the result is still the uninterrupted one
			full, err := Run(context.Background(), resumeRecipe(t, dir, "name=full"), Options{Out: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			sameMetrics(t, full.RunDir, sum.RunDir)
		})
	}
}

func TestResumeRefusesAnotherConfig(t *testing.T) {
	dir := fixture(t)
	r := resumeRecipe(t, dir)
	sum, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	other := resumeRecipe(t, dir, "optimizer.lr=0.5")
	if _, err := Run(context.Background(), other, Options{Out: io.Discard, ResumeDir: sum.RunDir}); err == nil ||
		!strings.Contains(err.Error(), "was written under a different config; pass --force to resume anyway") {
		t.Fatalf("resume under another config: %v", err)
	}
	if d := Diff(r.Config, other.Config); len(d) != 1 || d[0] != "optimizer.lr: 0.01 → 0.5" {
		t.Fatalf("diff %q", d)
	}
}

func openBLASAvailable() bool {
	_, _, err := openEngine(ComputeConfig{BLAS: blas.KindOpenBLAS})
	return err == nil
}

// A recipe read back from its resolved.yaml is the same recipe.
func TestResolvedRoundTrip(t *testing.T) {
	dir := fixture(t)
	r := resumeRecipe(t, dir, "precision=bf16", "amp.fp32_ops=[linear]")
	b, err := r.Config.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "resolved.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := Load(p, nil)
	if err != nil {
		t.Fatalf("resolved.yaml does not load: %v\n%s", err, b)
	}
	if d := Diff(r.Config, back.Config); len(d) > 0 || back.Hash() != r.Hash() {
		t.Fatalf("round trip changed the recipe: %v (hash equal: %v)", d, back.Hash() == r.Hash())
	}
}
