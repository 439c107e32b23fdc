package train

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/peft"
)

func readMetrics(t *testing.T, dir string) []map[string]float64 {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]float64
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestTrainEndToEnd(t *testing.T) {
	dir := fixture(t)
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"train.steps=12", "schedule.warmup_steps=2", "compute.blas=gonum"})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Steps != 12 || sum.ValAfter == nil || sum.ValBefore == nil || sum.TaskBefore == nil || sum.TaskAfter == nil {
		t.Fatalf("summary %+v", sum)
	}
	if !(sum.ValAfter.Loss < sum.ValBefore.Loss) {
		t.Errorf("validation loss did not fall: %.4f -> %.4f", sum.ValBefore.Loss, sum.ValAfter.Loss)
	}
	for _, f := range []string{"config.yaml", "metrics.jsonl", "summary.json", "adapter/adapter_model.safetensors", "adapter/adapter_config.json"} {
		if _, err := os.Stat(filepath.Join(sum.RunDir, f)); err != nil {
			t.Errorf("run directory lacks %s", f)
		}
	}
	ms := readMetrics(t, sum.RunDir)
	var steps, vals int
	for _, m := range ms {
		if _, ok := m["loss"]; ok {
			steps++
			for _, k := range []string{"step", "lr", "grad_norm", "tokens_per_s", "elapsed_s"} {
				if _, ok := m[k]; !ok {
					t.Errorf("metrics line lacks %s: %v", k, m)
				}
			}
		}
		if _, ok := m["val_loss"]; ok {
			vals++
		}
	}
	if steps != 6 || vals != 5 { // log_every 2 over 12 steps; val at 0, 3, 6, 9, 12
		t.Errorf("%d step lines and %d validation lines, want 6 and 5", steps, vals)
	}

	// mixtune eval with the recipe's batching reproduces the final validation loss exactly
	rep, err := Eval(EvalConfig{Model: r.Model.Path, Adapter: filepath.Join(sum.RunDir, "adapter"), Data: r.Data.Validation,
		SeqLen: r.Data.SeqLen, BatchSize: r.Train.BatchSize, Mode: r.Data.Mode, BLAS: "gonum"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Loss != sum.ValAfter.Loss || rep.Tokens != sum.ValAfter.Tokens {
		t.Errorf("eval loss %v over %d tokens, training validation %v over %d", rep.Loss, rep.Tokens, sum.ValAfter.Loss, sum.ValAfter.Tokens)
	}
	if _, err := peft.Load(filepath.Join(sum.RunDir, "adapter"), nil); err == nil || !strings.Contains(err.Error(), "which the base model does not have") {
		t.Errorf("loading the adapter for a model without its modules: %v", err)
	}

	// the same seed gives the same losses; the run goes to a new directory
	sum2, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if sum2.RunDir == sum.RunDir || !strings.HasSuffix(sum2.RunDir, "t-2") {
		t.Errorf("second run directory %s", sum2.RunDir)
	}
	ms2 := readMetrics(t, sum2.RunDir)
	for i := range ms {
		for _, k := range []string{"loss", "val_loss", "grad_norm", "lr"} {
			if a, b := ms[i][k], ms2[i][k]; a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
				t.Errorf("line %d: %s %v then %v with the same seed", i, k, a, b)
			}
		}
	}
}

func TestInterruptedRunSavesAdapter(t *testing.T) {
	dir := fixture(t)
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"compute.blas=gonum"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sum, err := Run(ctx, r, Options{Out: io.Discard})
	if err != ErrInterrupted || sum == nil || !sum.Interrupted || sum.Steps != 0 {
		t.Fatalf("err %v, summary %+v", err, sum)
	}
	if _, err := os.Stat(filepath.Join(sum.RunDir, "adapter", "adapter_model.safetensors")); err != nil {
		t.Fatal("an interrupted run did not save its adapter")
	}
}
