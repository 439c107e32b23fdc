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
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/optim"
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
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		m := map[string]float64{}
		for k, v := range raw {
			switch x := v.(type) {
			case float64:
				m[k] = x
			case bool:
				if x {
					m[k] = 1
				} else {
					m[k] = 0
				}
			}
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
		SeqLen: r.Data.SeqLen, BatchSize: r.Train.BatchSize, Mode: r.Data.Mode, BLAS: blas.KindGonum})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Loss != sum.ValAfter.Loss || rep.Tokens != sum.ValAfter.Tokens {
		t.Errorf("eval loss %v over %d tokens, training validation %v over %d", rep.Loss, rep.Tokens, sum.ValAfter.Loss, sum.ValAfter.Tokens)
	}
	if _, err := peft.Load(filepath.Join(sum.RunDir, "adapter"), peft.Base{}); err == nil || !strings.Contains(err.Error(), "which the base model does not have") {
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

// An interrupted run saves the adapter it trained. (Interrupted before
// its first step, it saves nothing: TestInterruptBeforeFirstStepSavesNothing.)
func TestInterruptedRunSavesAdapter(t *testing.T) {
	dir := fixture(t)
	r, err := Load(writeConfig(t, dir, goodConfig), []string{"compute.blas=gonum"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sum, err := Run(ctx, r, Options{Out: io.Discard, afterStep: func(s int) {
		if s == 2 {
			cancel()
		}
	}})
	if err != ErrInterrupted || sum == nil || !sum.Interrupted || sum.Steps != 2 {
		t.Fatalf("err %v, summary %+v", err, sum)
	}
	if _, err := os.Stat(filepath.Join(sum.RunDir, "adapter", "adapter_model.safetensors")); err != nil {
		t.Fatal("an interrupted run did not save its adapter")
	}
}

// A step with a non-finite gradient changes nothing: weights and AdamW's
// moments stay bit-identical, and the scale backs off.
func TestSkippedStepLeavesStateBitIdentical(t *testing.T) {
	params := []*optim.Param{
		{Name: "a", Value: []float32{0.5, -1, 2}, Grad: make([]float32, 3)},
		{Name: "b", Value: []float32{3}, Grad: make([]float32, 1)},
	}
	opt, err := optim.NewAdamW(optim.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	scaler, _ := amp.NewLossScaler(amp.ScalerConfig{Init: 1024, Growth: 2, Backoff: 0.5, Interval: 100})
	setGrads := func(vs ...float32) {
		copy(params[0].Grad, vs[:3])
		params[1].Grad[0] = vs[3]
	}
	for i := 0; i < 3; i++ { // real steps first, so the moments are not zero
		setGrads(1024*0.1, -1024*0.2, 1024*0.3, 1024*float32(i))
		if u, err := applyStep(params, opt, scaler, 1, 1e-2, true, true); err != nil || !u.stepped {
			t.Fatalf("step %d: %+v, %v", i, u, err)
		}
	}
	snapshot := func() (vals []float32, st optim.State) {
		for _, p := range params {
			vals = append(vals, p.Value...)
		}
		return vals, opt.State()
	}
	before, stBefore := snapshot()
	setGrads(1, float32(math.Inf(1)), 2, 3)
	u, err := applyStep(params, opt, scaler, 1, 1e-2, true, true)
	if err != nil || u.stepped {
		t.Fatalf("a step with an Inf gradient was taken: %+v, %v", u, err)
	}
	after, stAfter := snapshot()
	for i := range before {
		if math.Float32bits(before[i]) != math.Float32bits(after[i]) {
			t.Fatalf("weight %d changed in a skipped step: %v -> %v", i, before[i], after[i])
		}
	}
	if stBefore.Step != stAfter.Step {
		t.Fatalf("optimizer step count changed: %d -> %d", stBefore.Step, stAfter.Step)
	}
	for k, v := range stBefore.Tensors {
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(stAfter.Tensors[k][i]) {
				t.Fatalf("optimizer state %s[%d] changed in a skipped step", k, i)
			}
		}
	}
	if scaler.Scale() != 512 {
		t.Fatalf("scale after an overflow %v, want 512", scaler.Scale())
	}
}

// Different seeds give different runs: the seed reaches the adapter's
// initialisation, the data order and dropout.
func TestDifferentSeedsDiffer(t *testing.T) {
	dir := fixture(t)
	var losses [][]map[string]float64
	for _, seed := range []string{"3", "4"} {
		r, err := Load(writeConfig(t, dir, goodConfig), []string{"seed=" + seed, "name=s" + seed, "compute.blas=gonum", "task.eval_file="})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := Run(context.Background(), r, Options{Out: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, readMetrics(t, sum.RunDir))
	}
	differ := false
	for i := range losses[0] {
		if l, ok := losses[0][i]["loss"]; ok && l != losses[1][i]["loss"] {
			differ = true
		}
	}
	if !differ {
		t.Fatal("seeds 3 and 4 gave the same losses")
	}
}

// A checkpoint records the loop time of every leg: before this leg's loop
// starts (rank 0 sending its restored state to the other ranks), the
// earlier legs' alone, and during it, theirs and this leg's so far. The
// two places that built a checkpoint's state each had one case wrong:
// one counted the time since year 1 before the loop, the other dropped
// the running leg.
func TestLoopSecondsCountsEveryLeg(t *testing.T) {
	s := &session{priorSeconds: 40}
	if got := s.loopSeconds(); got != 40 {
		t.Errorf("before the loop: %v s, want the earlier legs' 40", got)
	}
	s.legStart = time.Now().Add(-3 * time.Second)
	if got := s.loopSeconds(); got < 43 || got > 43+60 {
		t.Errorf("3 s into the loop: %v s, want 43 and a little", got)
	}
}
