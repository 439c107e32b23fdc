package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/sysinfo"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/report"
)

// Version is mixtune's release, recorded in every run.
const Version = "0.1.0"

// Options are the command line's choices that are not part of the recipe.
type Options struct {
	Out      io.Writer // progress and summary; os.Stderr from the CLI
	Progress bool      // draw a progress bar (a terminal); otherwise log lines
	// ResumeDir continues that run directory from its latest good
	// checkpoint instead of starting a new run.
	ResumeDir string
	// Force resumes even though the checkpoint was written under a
	// different config (the CLI lists the differing keys first).
	Force bool
	// Device is the device selection when the caller already made it
	// (the CLI does, to set the CUDA environment first); nil selects here.
	Device *DeviceChoice

	afterStep func(step int) // tests: called after each step, to interrupt at a chosen one
}

// Summary is what a finished (or interrupted) run reports.
type Summary struct {
	RunDir       string      `json:"run_dir"`
	Steps        int         `json:"steps"`
	Interrupted  bool        `json:"interrupted,omitempty"`
	FinalLoss    float64     `json:"final_loss"`
	ValBefore    *LossReport `json:"val_before,omitempty"`
	ValAfter     *LossReport `json:"val_after,omitempty"`
	TaskBefore   *TaskReport `json:"task_before,omitempty"`
	TaskAfter    *TaskReport `json:"task_after,omitempty"`
	Tokens       int64       `json:"tokens"`
	Seconds      float64     `json:"seconds"`
	TokensPerSec float64     `json:"tokens_per_s"`
	PeakRSS      uint64      `json:"peak_rss_bytes"`
	Saved        string      `json:"saved"`
	Precision    string      `json:"precision"`
	SkippedSteps int         `json:"skipped_steps"`
}

// Run trains as the recipe says and writes the run directory: config.yaml
// (as given), metrics.jsonl, the adapter (or the full model) and
// summary.json. Cancelling ctx stops after the current step and still
// saves what was trained.
func Run(ctx context.Context, r *Recipe, opt Options) (sum *Summary, err error) {
	out := opt.Out
	start := time.Now()

	// --- the device and precision, resolved before any work
	choice := opt.Device
	if choice == nil {
		if choice, err = r.ChooseDevice(ctx); err != nil {
			return nil, err
		}
	}
	inv, sel := choice.Inventory, choice.Selection
	resolved, err := amp.ParseFormat(sel.Precision)
	if err != nil {
		return nil, err
	}

	// --- components, each built from its section of the recipe
	eng, err := openEngine(r.Compute)
	if err != nil {
		return nil, err
	}
	tok := data.NewByteTokenizer()
	trainEx, valEx, err := datasets(r, tok)
	if err != nil {
		return nil, err
	}
	m, err := loadModel(r)
	if err != nil {
		return nil, err
	}
	lora, err := newAdapter(r, m)
	if err != nil {
		return nil, err
	}
	params := trainables(m, lora)
	opt_, err := newOptimizer(r.Optimizer)
	if err != nil {
		return nil, err
	}
	sched := newSchedule(r)
	trainLoader, err := newLoader(trainEx, r.Data.SeqLen, r.Train.BatchSize, r.Data.Mode, r.Data.Shuffle, r.Seed, tok)
	if err != nil {
		return nil, fmt.Errorf("training data: %w", err)
	}
	var valBatches []data.Batch
	if len(valEx) > 0 {
		vl, err := newLoader(valEx, r.Data.SeqLen, r.Train.BatchSize, r.Data.Mode, false, r.Seed, tok)
		if err != nil {
			return nil, fmt.Errorf("validation data: %w", err)
		}
		valBatches = vl.Batches()
		if r.Train.EvalBatches > 0 && len(valBatches) > r.Train.EvalBatches {
			valBatches = valBatches[:r.Train.EvalBatches]
		}
	}
	policy := r.policyFor(resolved)
	var scaler *amp.LossScaler
	if r.lossScalingFor(resolved) {
		if scaler, err = amp.NewLossScaler(r.scalerConfig()); err != nil {
			return nil, err
		}
	}
	trainer, err := newRunner(eng, m, lora, r.Train.BatchSize, r.Data.SeqLen, params, &policy)
	if err != nil {
		return nil, err
	}
	defer trainer.close()
	var evaluator *runner
	if len(valBatches) > 0 {
		if evaluator, err = newRunner(eng, m, lora, r.Train.BatchSize, r.Data.SeqLen, nil, &policy); err != nil {
			return nil, err
		}
		defer evaluator.close()
	}

	// --- the run directory: a new one (nothing earlier is ever
	// overwritten), or the one being resumed with its state restored
	dir, ck, err := prepareRunDir(r, opt, out)
	if err != nil {
		return nil, err
	}
	if ck != nil {
		if err := ck.restore(params); err != nil {
			return nil, err
		}
		if err := opt_.Load(ck.Optim); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
		}
		if err := trainLoader.Restore(ck.State.Loader); err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
		}
		if scaler != nil && ck.State.Scaler != nil {
			if err := scaler.Load(*ck.State.Scaler); err != nil {
				return nil, fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
			}
		}
		eng.WeightVersion = ck.State.WeightVer
		// metrics after the checkpoint are redone by this run
		if err := os.Truncate(filepath.Join(dir, "metrics.jsonl"), ck.State.MetricsBytes); err != nil {
			return nil, fmt.Errorf("resume: %w", err)
		}
	}
	if ck == nil {
		if err := newManifest(r, eng.BLAS.Name(), eng.Workers, inv, sel, policy, scaler != nil).write(dir); err != nil {
			return nil, err
		}
	}
	metrics, err := newMetricsLog(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		return nil, err
	}
	defer metrics.Close()

	st := trainLoader.Stats()
	fmt.Fprintf(out, "device: %s · compute on %s · precision %s%s\n", sel.Reason, sel.Compute, policy.Low, precisionNote(policy, scaler))
	for _, w := range sel.Warnings {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	fmt.Fprintf(out, "mixtune %s · %s · %s · %d threads\n", Version, runtime.Version(), eng.BLAS.Name(), eng.Workers)
	fmt.Fprintf(out, "model: %s · %s params · %d layers, hidden %d, heads %d/%d kv%s\n", modelName(r), human(m.NumParams()),
		m.Config.NumHiddenLayers, m.Config.HiddenSize, m.Config.NumAttentionHeads, m.Config.NumKeyValueHeads, storedNote(m.StoredDtypes()))
	if lora != nil {
		fmt.Fprintf(out, "adapter: %s · %d modules · %s trainable (%.2f%%)\n", lora.Config, len(lora.Modules),
			human(lora.NumParams()), 100*float64(lora.NumParams())/float64(m.NumParams()))
	} else {
		fmt.Fprintf(out, "adapter: none · full fine-tuning of %s params\n", human(m.NumParams()))
	}
	fmt.Fprintf(out, "data: %d train examples (%d truncated), %d validation · seq_len %d · batch %d×%d · %s\n",
		st.Examples, st.Truncated, len(valEx), r.Data.SeqLen, r.Train.BatchSize, r.Train.GradAccum, r.Data.Mode)
	fmt.Fprintf(out, "run: %s\n", dir)

	sum = &Summary{RunDir: dir, Precision: policy.Low.String()}
	weights := func() map[string][]float32 { return mergedWeights(m, lora) }
	step := 0
	var lastLoss, priorSeconds float64
	if ck != nil {
		step, lastLoss, priorSeconds = ck.State.Step, ck.State.LastLoss, ck.State.LoopSeconds
		sum.SkippedSteps, sum.ValBefore, sum.TaskBefore = ck.State.Skipped, ck.State.ValBefore, ck.State.TaskBefore
		fmt.Fprintf(out, "resuming from %s (step %d of %d)\n", ck.Dir, step, r.Train.Steps)
	}
	if r.Task.EvalFile != "" && r.Task.Before && ck == nil {
		rep, err := taskAccuracy(m, weights(), eng.BLAS, tok, r.Task.EvalFile, r.Task.Limit, r.Task.MaxNewTokens)
		if err != nil {
			return nil, err
		}
		sum.TaskBefore = &rep
		fmt.Fprintf(out, "task accuracy before: %s\n", rep)
	}
	if evaluator != nil && ck == nil {
		rep, err := evaluate(evaluator, valBatches)
		if err != nil {
			return nil, err
		}
		sum.ValBefore = &rep
		metrics.write(map[string]any{"step": 0, "val_loss": rep.Loss, "val_ppl": rep.Perplexity})
	}

	loopStart := time.Now()
	// checkpoint saves everything needed to continue after this step.
	checkpoint := func() error {
		st := checkpointState{Step: step, ConfigHash: r.Hash(), Loader: trainLoader.State(),
			WeightVer: eng.WeightVersion, MetricsBytes: metrics.size(), Skipped: sum.SkippedSteps,
			LoopSeconds: priorSeconds + time.Since(loopStart).Seconds(), LastLoss: lastLoss,
			ValBefore: sum.ValBefore, TaskBefore: sum.TaskBefore}
		if scaler != nil {
			s := scaler.State()
			st.Scaler = &s
		}
		root := filepath.Join(dir, "checkpoints")
		if _, err := writeCheckpoint(root, st, params, opt_); err != nil {
			return err
		}
		if err := pruneCheckpoints(root, r.Train.KeepCheckpoints); err != nil {
			return err
		}
		writeReports(dir, out)
		return nil
	}

	// --- the training loop
	bar := newProgress(out, r.Train.Steps, opt.Progress)
	bar.update(step, lastLoss, 0, 0)
	tokensPerStep := int64(r.Train.BatchSize * r.Data.SeqLen * r.Train.GradAccum)
	loopStart = time.Now()
	startStep := step
	for step < r.Train.Steps {
		if ctx.Err() != nil {
			sum.Interrupted = true
			break
		}
		step++
		// One optimizer step: GradAccum micro-batches, each weighted by its
		// share of the step's target tokens, so the step's loss is the mean
		// over all of them whatever the padding.
		micro := make([]data.Batch, r.Train.GradAccum)
		total := 0
		for i := range micro {
			micro[i] = trainLoader.Next()
			total += micro[i].NumTargets
		}
		// With loss scaling the gradient flowing out of the loss is
		// multiplied by the scale (constant within the step), so small
		// fp16 gradients do not underflow on their way back.
		scale := float32(1)
		if scaler != nil {
			scale = scaler.Scale()
		}
		var lossSum float64
		for i, bt := range micro {
			w := scale * float32(bt.NumTargets) / float32(max(total, 1))
			loss, err := trainer.run(bt, w, i == 0, noiseKey(r.Seed, step, i))
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", step, err)
			}
			lossSum += loss * float64(bt.NumTargets)
		}
		lastLoss = lossSum / float64(max(total, 1))

		lr := sched.LR(step)
		upd, err := applyStep(params, opt_, scaler, r.Optimizer.GradClip, lr, total > 0)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		stepped, gradNorm, zeroFrac := upd.stepped, upd.gradNorm, upd.zeroFrac
		rounded, underflowed := eng.Grads.Take()
		if stepped {
			eng.WeightVersion++ // low-precision copies of the weights are now stale
		} else {
			sum.SkippedSteps++
		}

		elapsed := priorSeconds + time.Since(loopStart).Seconds()
		tps := float64(tokensPerStep) * float64(step-startStep) / time.Since(loopStart).Seconds()
		bar.update(step, lastLoss, lr, tps)
		if step%r.Train.LogEvery == 0 || step == r.Train.Steps {
			rec := map[string]any{"step": step, "loss": lastLoss, "lr": lr, "grad_norm": gradNorm,
				"tokens_per_s": tps, "elapsed_s": elapsed, "skipped": !stepped, "grad_zero_frac": zeroFrac}
			if rounded > 0 { // low precision: the share of gradient values between ops that rounding sent to zero
				rec["grad_underflow_frac"] = float64(underflowed) / float64(rounded)
			}
			if scaler != nil {
				rec["loss_scale"] = scale
			}
			metrics.write(rec)
			if !opt.Progress {
				msg := fmt.Sprintf("step %d/%d  loss %.4f  lr %.2e  grad_norm %.3f  %s tok/s", step, r.Train.Steps, lastLoss, lr, gradNorm, human(int(tps)))
				if scaler != nil {
					msg += fmt.Sprintf("  scale %g", scale)
				}
				if !stepped {
					msg += "  (skipped: non-finite gradients)"
				}
				bar.line(msg)
			}
		}
		if math.IsNaN(lastLoss) || math.IsInf(lastLoss, 0) {
			bar.finish()
			return nil, fmt.Errorf("step %d: the loss is %v: training diverged (lower optimizer.lr, or check the data)", step, lastLoss)
		}
		if evaluator != nil && r.Train.EvalEvery > 0 && step%r.Train.EvalEvery == 0 && step < r.Train.Steps {
			rep, err := evaluate(evaluator, valBatches)
			if err != nil {
				return nil, err
			}
			metrics.write(map[string]any{"step": step, "val_loss": rep.Loss, "val_ppl": rep.Perplexity})
			bar.line(fmt.Sprintf("step %d: val_loss %.4f (perplexity %.3f)", step, rep.Loss, rep.Perplexity))
		}
		if r.Train.CheckpointEvery > 0 && step%r.Train.CheckpointEvery == 0 && step < r.Train.Steps {
			if err := checkpoint(); err != nil {
				return nil, err
			}
		}
		if opt.afterStep != nil {
			opt.afterStep(step)
		}
	}
	bar.finish()
	// the last state is always checkpointed: at the end, or where a signal stopped the run
	if err := checkpoint(); err != nil {
		return nil, err
	}
	loopSeconds := time.Since(loopStart).Seconds()
	sum.Steps, sum.FinalLoss = step, lastLoss
	sum.Tokens = tokensPerStep * int64(step-startStep)
	if loopSeconds > 0 {
		sum.TokensPerSec = float64(sum.Tokens) / loopSeconds
	}
	if sum.Interrupted {
		fmt.Fprintf(out, "interrupted after step %d; checkpoint saved. Resume with:\n  mixtune train --resume %s\n", step, dir)
	}

	// --- after training: validation, task accuracy, save
	if evaluator != nil && !sum.Interrupted {
		rep, err := evaluate(evaluator, valBatches)
		if err != nil {
			return nil, err
		}
		sum.ValAfter = &rep
		metrics.write(map[string]any{"step": step, "val_loss": rep.Loss, "val_ppl": rep.Perplexity})
	}
	if r.Task.EvalFile != "" && r.Task.After && !sum.Interrupted {
		rep, err := taskAccuracy(m, weights(), eng.BLAS, tok, r.Task.EvalFile, r.Task.Limit, r.Task.MaxNewTokens)
		if err != nil {
			return nil, err
		}
		sum.TaskAfter = &rep
	}
	if lora != nil {
		sum.Saved = filepath.Join(dir, "adapter")
		if err := lora.Save(sum.Saved, modelName(r)); err != nil {
			return nil, err
		}
	} else {
		sum.Saved = filepath.Join(dir, "model")
		f, _ := amp.ParseFormat(r.Model.SaveDtype)
		if err := m.Save(sum.Saved, f, 0); err != nil {
			return nil, err
		}
	}
	sum.Seconds = time.Since(start).Seconds()
	sum.PeakRSS, _ = sysinfo.PeakRSS()
	b, _ := json.MarshalIndent(sum, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(dir, "summary.json"), append(b, '\n')); err != nil {
		return nil, err
	}
	writeReports(dir, out)
	writeSummary(out, sum)
	if sum.Interrupted {
		return sum, ErrInterrupted
	}
	return sum, nil
}

// writeReports refreshes metrics.csv and the plots from metrics.jsonl. A
// failure here costs a picture, not the run: it is reported and ignored.
func writeReports(dir string, out io.Writer) {
	run, err := report.Read(dir)
	if err == nil {
		err = report.WriteCSV(run)
	}
	if err == nil {
		_, err = report.PlotAll(filepath.Join(dir, "plots"), []*report.Run{run})
	}
	if err != nil {
		fmt.Fprintf(out, "warning: metrics.csv and plots not written: %v\n", err)
	}
}

// prepareRunDir creates a new run directory with the recipe as given and
// resolved, or, resuming, loads the run's latest good checkpoint.
func prepareRunDir(r *Recipe, opt Options, out io.Writer) (string, *loadedCheckpoint, error) {
	if opt.ResumeDir == "" {
		dir := r.RunDir()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("create run directory: %w", err)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, "config.yaml"), r.Raw); err != nil {
			return "", nil, err
		}
		res, err := r.Config.Resolved()
		if err != nil {
			return "", nil, err
		}
		return dir, nil, atomicfile.WriteFile(filepath.Join(dir, "resolved.yaml"), res)
	}
	dir := opt.ResumeDir
	ck, err := loadLatestCheckpoint(filepath.Join(dir, "checkpoints"), func(w string) { fmt.Fprintln(out, "warning: "+w) })
	if err != nil {
		return "", nil, fmt.Errorf("resume %s: %w", dir, err)
	}
	if ck.State.ConfigHash != r.Hash() && !opt.Force {
		return "", nil, fmt.Errorf("resume %s: %s was written under a different config; pass --force to resume anyway", dir, ck.Dir)
	}
	return dir, ck, nil
}

// update is what one optimizer step did.
type update struct {
	stepped  bool
	gradNorm float64 // before clipping; 0 when skipped
	zeroFrac float64 // share of gradient values that are exactly zero
}

// applyStep finishes a step whose gradients are in params: unscale them
// (before clipping, so the clip threshold means unscaled norms), skip the
// step if any is non-finite, leaving weights and optimizer state
// untouched, else clip and update; then adjust the loss scale.
func applyStep(params []*optim.Param, opt optim.Optimizer, scaler *amp.LossScaler, clip, lr float64, anyTargets bool) (update, error) {
	finite := true
	if scaler != nil {
		finite = scaler.Unscale(gradsOf(params))
	} else {
		finite = allFinite(params)
	}
	u := update{zeroFrac: zeroFraction(params)}
	if finite && anyTargets {
		u.gradNorm = optim.ClipGlobalNorm(params, clip)
		if err := opt.Step(params, lr); err != nil {
			return u, err
		}
		u.stepped = true
	}
	if scaler != nil {
		scaler.Update(!finite)
	}
	return u, nil
}

// gradsOf lists the trainable gradients.
func gradsOf(params []*optim.Param) [][]float32 {
	g := make([][]float32, len(params))
	for i, p := range params {
		g[i] = p.Grad
	}
	return g
}

func allFinite(params []*optim.Param) bool {
	for _, p := range params {
		for _, v := range p.Grad {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return false
			}
		}
	}
	return true
}

// zeroFraction is the share of gradient values that are exactly zero: in
// fp16 without loss scaling, small gradients underflow to it.
func zeroFraction(params []*optim.Param) float64 {
	var zero, n int
	for _, p := range params {
		for _, v := range p.Grad {
			if v == 0 {
				zero++
			}
		}
		n += len(p.Grad)
	}
	return float64(zero) / float64(max(n, 1))
}

func precisionNote(p amp.Policy, s *amp.LossScaler) string {
	switch {
	case p.Low == amp.FP32:
		return ""
	case s != nil:
		return fmt.Sprintf(" (emulated on the CPU) · dynamic loss scaling from %g", s.Scale())
	}
	return " (emulated on the CPU) · no loss scaling"
}

// ErrInterrupted reports a run stopped early by a signal; what it trained
// was saved.
var ErrInterrupted = errors.New("interrupted")

func modelName(r *Recipe) string {
	if r.Model.Init == "random" {
		return "random init (seed " + fmt.Sprint(r.Seed) + ")"
	}
	return r.Model.Path
}

func storedNote(s string) string {
	if s == "" {
		return ""
	}
	return " · stored " + s + ", trained in fp32"
}

func (t TaskReport) String() string {
	return fmt.Sprintf("%.1f%% (%d/%d exact match)", 100*t.Accuracy, t.Correct, t.Total)
}

// human writes 1234567 as 1.23M.
func human(n int) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fG", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e4:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
