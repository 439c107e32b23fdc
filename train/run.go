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
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/flock"
	"github.com/mixtune/mixtune/internal/jsonfloat"
	"github.com/mixtune/mixtune/internal/sysinfo"
	"github.com/mixtune/mixtune/model"
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
	// different recipe; the change is recorded in config_changes.jsonl and
	// resolved.yaml becomes the new recipe.
	Force bool
	// Device is the device selection when the caller already made it
	// (the CLI does, to set the CUDA environment first); nil selects here.
	Device *DeviceChoice
	// Faults are fault-injection points for crash-safety tests.
	Faults Faults
	// Comm is the group of processes training together (dist.Open), each
	// on its share of every batch; nil or a single rank trains alone.
	// Rank 0 writes the run directory; the others print nothing.
	Comm dist.Comm
	// Overlap, with several ranks, sums each bucket of gradients while the
	// backward pass computes the earlier layers', instead of all of them
	// after it. BucketBytes sizes the buckets (0: 4 MiB).
	Overlap     bool
	BucketBytes int

	afterStep func(step int) // tests: called after each step, to interrupt at a chosen one
	memory    memoryMode     // tests: unplanned or poisoned op outputs, to check the plan
}

// Faults let a test stop a training process at a chosen moment. Each hook,
// when set, is called at that moment; a real run leaves them nil.
type Faults struct {
	// CheckpointStage is called inside every checkpoint write: "files"
	// once the temporary directory is complete, "aside" once an older
	// checkpoint of the same step is renamed aside, "renamed" once the new
	// one is in place.
	CheckpointStage func(stage string)
}

// Summary is what a finished (or interrupted) run reports.
type Summary struct {
	RunDir      string          `json:"run_dir"`
	Steps       int             `json:"steps"`
	Interrupted bool            `json:"interrupted,omitempty"`
	FinalLoss   jsonfloat.Float `json:"final_loss"`
	ValBefore   *LossReport     `json:"val_before,omitempty"`
	ValAfter    *LossReport     `json:"val_after,omitempty"`
	TaskBefore  *TaskReport     `json:"task_before,omitempty"`
	TaskAfter   *TaskReport     `json:"task_after,omitempty"`
	// PreferenceBefore and PreferenceAfter are a preference run's
	// validation metrics (eval_loss, eval_rewards/accuracies, ...).
	PreferenceBefore map[string]float64 `json:"preference_before,omitempty"`
	PreferenceAfter  map[string]float64 `json:"preference_after,omitempty"`
	Tokens           int64              `json:"tokens"`       // trained, over every leg of a resumed run
	Seconds          float64            `json:"seconds"`      // this process, start to end
	TokensPerSec     float64            `json:"tokens_per_s"` // Tokens over the training loop's time, every leg
	PeakRSS          uint64             `json:"peak_rss_bytes"`
	Saved            string             `json:"saved"`
	Precision        string             `json:"precision"`
	SkippedSteps     int                `json:"skipped_steps"`
	// Backend is the matmul backend that computed this leg (its Name, with
	// its kernels or core), BackendReason why auto picked it, or that it
	// was named: another backend rounds differently and gives other numbers.
	Backend       string `json:"backend"`
	BackendReason string `json:"backend_reason"`
	// Engine is the engine the graphs ran on: "cpu", or the Vulkan
	// device; with it, the host↔device bytes per optimizer step.
	Engine       string `json:"engine"`
	HostToDevice int64  `json:"host_to_device_bytes_per_step,omitempty"`
	DeviceToHost int64  `json:"device_to_host_bytes_per_step,omitempty"`
	// DevicePeak is the most bytes the device's buffers held in this leg
	// (vulkan.Device.MemoryUse): weights, activations, gradients and
	// optimizer state.
	DevicePeak uint64 `json:"device_peak_bytes,omitempty"`
}

// backendReason is summary.json's backend_reason: auto's reason, or that
// the recipe named the backend.
func backendReason(kind blas.Kind, autoReason string) string {
	if autoReason != "" {
		return autoReason
	}
	return fmt.Sprintf("named by the recipe (compute.blas: %s)", kind)
}

// ErrInterrupted reports a run stopped early by a signal. Run has said
// what was saved and how to go on.
var ErrInterrupted = errors.New("interrupted")

// Run trains as the recipe says and writes the run directory: config.yaml
// (as given), resolved.yaml, run.json, metrics.jsonl, checkpoints, the
// adapter (or the full model) and summary.json. Every component is built,
// and every input read and checked, before anything is written.
//
// Cancelling ctx returns ErrInterrupted, after saying on Options.Out what
// was saved. Tokenizing stops at once; validation at the next batch; task
// accuracy at the next token (or decoder layer of a prefill); training
// after the current step; loading the model and compiling the graphs when
// each ends; a save in progress finishes. Stopped before the first step,
// nothing is saved: a new run's directory is removed, so that starting
// again makes the same one. Stopped later, the last step is checkpointed
// and the adapter (or model) saved, and --resume continues, the final
// measurements included.
func Run(ctx context.Context, r *Recipe, opt Options) (*Summary, error) {
	s, err := setup(ctx, r, opt)
	if err := agreeSetup(opt.Comm, s, err); err != nil {
		if s != nil {
			s.close()
		}
		if errors.Is(err, ErrInterrupted) && (opt.Comm == nil || opt.Comm.Rank() == 0) && opt.Out != nil {
			if opt.ResumeDir != "" {
				fmt.Fprintf(opt.Out, "interrupted before resuming: %s is unchanged. Resume with:\n  mixtune train --resume %s\n", opt.ResumeDir, opt.ResumeDir)
			} else {
				fmt.Fprintln(opt.Out, "interrupted before the first step: nothing was trained or saved; start the run again")
			}
		}
		return nil, err
	}
	defer s.close()
	if err := s.openShared(); err != nil {
		return nil, err
	}
	if s.complete != nil {
		fmt.Fprintf(s.out, "%s is complete (step %d of %d); nothing to do\n", s.dir, s.step, r.Train.Steps)
		return s.complete, nil
	}
	s.printHeader()
	if err := s.measureBefore(ctx); err != nil {
		if errors.Is(err, ErrInterrupted) {
			return nil, s.discard()
		}
		return nil, err
	}
	if err := s.loop(ctx, opt.afterStep); err != nil {
		return nil, err
	}
	if s.sum.Interrupted && s.ck == nil && s.step == 0 {
		return nil, s.discard()
	}
	return s.finish(ctx)
}

// discard ends a new run interrupted before its first step: nothing was
// trained, so nothing is kept. Its directory holds only what this process
// wrote (the recipe, run.json, metrics.jsonl), and is removed, so that
// starting the run again makes the same directory rather than name-2. It
// returns ErrInterrupted.
func (s *session) discard() error {
	if !s.rank0() {
		return ErrInterrupted
	}
	if s.logger != nil {
		s.logger.Close()
		s.logger = nil
	}
	if err := os.RemoveAll(s.dir); err != nil {
		fmt.Fprintf(s.out, "interrupted before the first step: nothing was trained or saved, but %s could not be removed (%v); remove it, then start the run again\n", s.dir, err)
		return ErrInterrupted
	}
	fmt.Fprintf(s.out, "interrupted before the first step: nothing was trained or saved, and %s was removed; start the run again\n", s.dir)
	return ErrInterrupted
}

// session is one training process's state: the components built from the
// recipe, the run directory, and the loop's position.
type session struct {
	r      *Recipe
	opt    Options
	out    io.Writer
	start  time.Time
	parts  *components
	dir    string
	lock   *flock.Lock
	logger *metricsLog
	ck     *loadedCheckpoint // the checkpoint resumed from, if any
	dp     *dataParallel     // this rank's part of every batch: all of it for one process

	step         int     // optimizer steps done
	checkpointed int     // the step the newest checkpoint holds
	lastLoss     float64 // the last step's loss
	priorSeconds float64 // loop time of earlier legs of a resumed run
	legStart     time.Time
	legFirstStep int
	sum          Summary
	complete     *Summary // set when resuming a run that has finished
}

// setup builds every component and reads every input; it writes nothing.
func setup(ctx context.Context, r *Recipe, opt Options) (*session, error) {
	if ctx.Err() != nil {
		return nil, ErrInterrupted
	}
	choice := opt.Device
	if choice == nil {
		var err error
		ranks := 1
		if opt.Comm != nil {
			ranks = dist.LocalSize(opt.Comm)
		}
		if choice, err = r.ChooseDevice(ctx, ranks); err != nil {
			return nil, err
		}
	}
	parts, err := build(ctx, r, choice, opt)
	if err != nil {
		return nil, err
	}
	out := opt.Out
	if out == nil || parts.dp.rank != 0 {
		out = io.Discard // rank 0 speaks for the job
	}
	return &session{r: r, opt: opt, out: out, start: time.Now(), parts: parts, dp: parts.dp,
		sum: Summary{Precision: parts.policy.Low.String(), Backend: parts.eng.BLAS.Name(), BackendReason: backendReason(r.Compute.BLAS, parts.blasReason),
			Engine: parts.engineName()}}, nil
}

func (s *session) close() {
	s.parts.close()
	if s.logger != nil {
		s.logger.Close()
	}
	s.lock.Unlock()
}

// openRunDir creates and locks a new run directory, or locks the one
// being resumed and restores the loop's state from its newest good
// checkpoint.
func (s *session) openRunDir() error {
	r, p := s.r, s.parts
	if s.opt.ResumeDir == "" {
		dir, err := createRunDir(r.OutputDir, r.Name)
		if err != nil {
			return err
		}
		s.dir = dir
		if s.lock, err = lockRunDir(dir); err != nil {
			return err
		}
		if err := writeRecipe(dir, r); err != nil {
			return err
		}
		if err := newManifest(r, p).write(dir); err != nil {
			return err
		}
		if s.logger, err = newMetricsLog(filepath.Join(dir, "metrics.jsonl")); err != nil {
			return err
		}
		return s.openEvents()
	}

	s.dir = s.opt.ResumeDir
	var err error
	if s.lock, err = lockRunDir(s.dir); err != nil {
		return err
	}
	root := filepath.Join(s.dir, "checkpoints")
	notes, err := recoverCheckpoints(root)
	for _, n := range notes {
		fmt.Fprintln(s.out, "note: "+n)
	}
	if err != nil {
		return err
	}
	ck, err := loadLatestCheckpoint(root, func(w string) { fmt.Fprintln(s.out, "warning: "+w) })
	if err != nil {
		return fmt.Errorf("resume %s: %w", s.dir, err)
	}
	if err := s.checkRecipe(ck); err != nil {
		return err
	}
	s.ck = ck
	s.step, s.checkpointed = ck.State.Step, ck.State.Step
	if sum, ok := readSummary(s.dir); ok && s.step >= r.Train.Steps {
		s.complete = sum
		return nil
	}
	if err := s.restore(ck); err != nil {
		return err
	}
	if s.logger, err = newMetricsLog(filepath.Join(s.dir, "metrics.jsonl")); err != nil {
		return err
	}
	return s.openEvents()
}

// checkRecipe refuses to continue a checkpoint under another recipe unless
// --force says so, or an earlier forced change already made this recipe
// the run's; a forced change is recorded.
func (s *session) checkRecipe(ck *loadedCheckpoint) error {
	hash := s.r.Hash()
	if ck.State.ConfigHash == hash || approvedChange(s.dir, ck.State.ConfigHash, hash) {
		return nil
	}
	if !s.opt.Force {
		return fmt.Errorf("resume %s: %s was written under a different config; pass --force to resume anyway", s.dir, ck.Dir)
	}
	var changes []string
	if old, err := readResolved(s.dir); err == nil {
		changes = Diff(old, s.r.Config)
	}
	return recordConfigChange(s.dir, ck.State.Step, ck.State.ConfigHash, s.r, changes)
}

// restore puts the checkpoint's state back: weights, optimizer, data
// position, loss scale, and metrics.jsonl as it stood at that step.
func (s *session) restore(ck *loadedCheckpoint) error {
	if err := ck.restore(s.parts.params); err != nil {
		return err
	}
	if err := s.restoreLoop(ck.State, ck.Optim, "checkpoint "+ck.Dir); err != nil {
		return err
	}
	return restoreMetrics(filepath.Join(s.dir, "metrics.jsonl"), ck)
}

// restoreLoop puts back the state of the loop that st records, once the
// weights are in place (read from a checkpoint, or sent by rank 0):
// optimizer, data position, loss scale and the session's counters. from
// names where the state came from, in errors.
func (s *session) restoreLoop(st checkpointState, ostate optim.State, from string) error {
	p := s.parts
	p.eng.WeightsChanged() // the weights were replaced
	if err := p.optimizer.Load(ostate); err != nil {
		return fmt.Errorf("%s: optimizer state: %w", from, err)
	}
	if err := s.restoreData(st.Loader); err != nil {
		return fmt.Errorf("%s: data position: %w", from, err)
	}
	if p.scaler != nil && st.Scaler != nil {
		if err := p.scaler.Load(*st.Scaler); err != nil {
			return fmt.Errorf("%s: loss scale: %w", from, err)
		}
	}
	s.step = st.Step
	s.lastLoss, s.priorSeconds = float64(st.LastLoss), st.LoopSeconds
	s.sum.SkippedSteps, s.sum.ValBefore, s.sum.TaskBefore = st.Skipped, st.ValBefore, st.TaskBefore
	return nil
}

// restoreMetrics rewrites metrics.jsonl as it stood at the checkpoint: the
// lines written after it are redone by this run. A checkpoint holds a copy
// of the file, so a file cut short or damaged since is rebuilt whole; a
// format-1 checkpoint holds only its length, so the file is cut back to
// that length, and refused if it is shorter.
func restoreMetrics(path string, ck *loadedCheckpoint) error {
	if ck.Metrics != nil {
		return atomicfile.WriteFile(path, ck.Metrics)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	if st.Size() < ck.State.MetricsBytes {
		return fmt.Errorf("resume: %s has %d bytes, fewer than the %d it had at %s: it was cut, and that checkpoint (an older format) holds no copy to rebuild it from",
			path, st.Size(), ck.State.MetricsBytes, ck.Dir)
	}
	return os.Truncate(path, ck.State.MetricsBytes)
}

func (s *session) printHeader() {
	r, p, out := s.r, s.parts, s.out
	sel := p.device.Selection
	fmt.Fprintf(out, "device: %s · compute on %s · precision %s%s\n", sel.Reason, sel.Compute, p.policy.Low, precisionNote(p.policy, p.scaler, p.bf16.path))
	for _, w := range append(append(sel.Warnings, r.Warnings...), p.warnings...) {
		fmt.Fprintf(out, "warning: %s\n", w)
	}
	fmt.Fprintf(out, "mixtune %s · %s · %s · %d threads · bf16 units: %s\n", Version, runtime.Version(), p.eng.BLAS.Name(), p.eng.Workers, p.cpu)
	if p.gpu != nil {
		fmt.Fprintf(out, "engine: vulkan · %s · %s\n", p.gpu.describe(), p.gpuReason)
		if p.gpu.tileReason != "" {
			fmt.Fprintf(out, "gemm tile: %s\n", p.gpu.tileReason)
		}
		if p.gpu.splitReason != "" {
			fmt.Fprintf(out, "attention dK/dV: %s\n", p.gpu.splitReason)
		}
	} else {
		fmt.Fprintf(out, "engine: cpu (%s)\n", p.gpuReason)
	}
	if p.blasReason != "" {
		fmt.Fprintf(out, "blas: %s\n", p.blasReason)
	}
	if p.bf16.path != "" {
		fmt.Fprintf(out, "bf16 matmul: %s\n", p.bf16.reason)
	}
	m := p.model
	fmt.Fprintf(out, "model: %s · %s params · %d layers, hidden %d, heads %d/%d kv%s\n", modelName(r), human(m.NumParams()),
		m.Config.NumHiddenLayers, m.Config.HiddenSize, m.Config.NumAttentionHeads, m.Config.NumKeyValueHeads, storedNote(m.StoredDtypes()))
	if l := p.lora; l != nil {
		fmt.Fprintf(out, "adapter: %s · %d modules · %s trainable (%.2f%%)\n", l.Config, len(l.Modules),
			human(l.NumParams()), 100*float64(l.NumParams())/float64(m.NumParams()))
	} else {
		fmt.Fprintf(out, "adapter: none · full fine-tuning of %s params\n", human(m.NumParams()))
	}
	st := p.trainLoader.Stats()
	fmt.Fprintf(out, "data: %d train examples (%d truncated), %d validation · seq_len %d · batch %d×%d · %s\n",
		st.Examples, st.Truncated, p.valExamples, r.Data.SeqLen, p.batch, r.Train.GradAccum, r.Data.Mode)
	for _, f := range p.rows.hits {
		fmt.Fprintf(out, "data: %s: tokens from the cache\n", f)
	}
	if p.reference != "" {
		fmt.Fprintf(out, "reference log-probabilities: %s\n", p.reference)
	}
	tokLine := fmt.Sprintf("tokenizer: %s · %d ids", describeTokenizer(p.format.Tok), p.format.Tok.VocabSize())
	if chatInUse(p.format, r.Data.Train, r.Data.Validation, r.Task.EvalFile) {
		tokLine += fmt.Sprintf(" · chat template: %s · loss on %s", r.text.TemplateName, p.format.LossOn)
	}
	fmt.Fprintln(out, tokLine)
	if s.dp.size > 1 {
		info := s.dp.comm.Info()
		unit := "rows"
		if p.pref != nil {
			unit = "pairs"
		}
		fmt.Fprintf(out, "data parallel: %d ranks on %s · %s · %s · %d of %d %s per rank · %s sums%s\n", s.dp.size, hostCount(info.Hosts),
			info.Launcher, info.Library, s.dp.rows, s.dp.batch, unit, info.Reduction, overlapNote(s.opt.Overlap))
	}
	fmt.Fprintf(out, "run: %s\n", s.dir)
	if s.ck != nil {
		fmt.Fprintf(out, "resuming from %s (step %d of %d)\n", s.ck.Dir, s.step, r.Train.Steps)
	}
}

// measureBefore measures the untrained model: task accuracy and validation
// loss. A resumed run has them from its checkpoint.
func (s *session) measureBefore(ctx context.Context) error {
	if s.ck != nil {
		return nil
	}
	p := s.parts
	if p.task != nil && s.r.Task.Before {
		rep, err := s.taskReport(ctx)
		if err != nil {
			return err
		}
		s.sum.TaskBefore = &rep
		fmt.Fprintf(s.out, "task accuracy before: %s\n", rep)
		s.logger.event(taskEvent(0, rep, time.Now()))
	}
	var err error
	if s.sum.PreferenceBefore, err = s.measurePreference(s.say); err != nil {
		return err
	}
	if p.evaluator != nil {
		rep, err := s.validationLoss(ctx)
		if err != nil {
			return err
		}
		s.sum.ValBefore = &rep
		s.logger.write(map[string]any{"step": 0, "val_loss": rep.Loss, "val_ppl": rep.Perplexity})
	}
	return nil
}

// loop runs optimizer steps until the recipe's count, or until ctx is
// cancelled, logging, validating and checkpointing as the recipe says.
func (s *session) loop(ctx context.Context, afterStep func(int)) error {
	r, p := s.r, s.parts
	bar := newProgress(s.out, r.Train.Steps, s.opt.Progress)
	bar.update(s.step, s.lastLoss, 0, 0)
	s.legStart, s.legFirstStep = time.Now(), s.step
	for s.step < r.Train.Steps {
		if stop, err := s.interrupted(ctx); stop || err != nil {
			if err != nil {
				bar.finish()
				return err
			}
			s.sum.Interrupted = true
			break
		}
		s.step++
		res, err := s.trainStep()
		if err != nil {
			bar.finish()
			return fmt.Errorf("step %d: %w", s.step, err)
		}
		tps := s.tokensPerSecond()
		bar.update(s.step, res.loss, res.lr, tps)
		if s.step%r.Train.LogEvery == 0 || s.step == r.Train.Steps {
			s.logger.write(res.record(s.step, tps, s.loopSeconds()))
			if !s.opt.Progress {
				bar.line(res.line(s.step, r.Train.Steps, tps))
			}
		}
		if !res.finiteLoss && p.scaler == nil {
			// With loss scaling a non-finite loss is an overflow the
			// scaler handles (the step was skipped); without, it diverged.
			bar.finish()
			return s.everyRank(fmt.Errorf("step %d: the loss is %v: training diverged (lower optimizer.lr, or check the data)", s.step, res.loss))
		}
		if p.evaluator != nil && r.Train.EvalEvery > 0 && s.step%r.Train.EvalEvery == 0 && s.step < r.Train.Steps {
			rep, err := s.validationLoss(ctx)
			if errors.Is(err, ErrInterrupted) { // the step is whole: checkpoint it below
				s.sum.Interrupted = true
				break
			}
			if err != nil {
				return err
			}
			s.logger.write(map[string]any{"step": s.step, "val_loss": rep.Loss, "val_ppl": rep.Perplexity})
			bar.line(fmt.Sprintf("step %d: val_loss %.4f (perplexity %.3f)", s.step, rep.Loss, rep.Perplexity))
		}
		if p.pref != nil && r.Train.EvalEvery > 0 && s.step%r.Train.EvalEvery == 0 && s.step < r.Train.Steps {
			if _, err := s.measurePreference(bar.line); err != nil {
				bar.finish()
				return err
			}
		}
		if r.Train.CheckpointEvery > 0 && s.step%r.Train.CheckpointEvery == 0 && s.step < r.Train.Steps {
			if err := s.checkpoint(); err != nil {
				return err
			}
		}
		if afterStep != nil {
			afterStep(s.step)
		}
	}
	bar.finish()
	// The last state is checkpointed, at the end or where a signal
	// stopped the run, unless the newest checkpoint already holds it.
	if s.step > s.checkpointed {
		if err := s.checkpoint(); err != nil {
			return err
		}
	}
	return nil
}

// stepResult is what one optimizer step did.
type stepResult struct {
	loss, lr   float64
	finiteLoss bool
	update
	rounded, underflowed int64 // low precision: gradient values rounded between ops, and those sent to zero
	scale                float32
	scaled               bool
	comm                 *commTimes         // data parallel: the step's reductions
	preference           map[string]float64 // a preference objective's metrics, under TRL's names
}

// trainStep is one optimizer step: GradAccum micro-batches, each weighted
// by its share of the step's target tokens (so the step's loss is the mean
// over all of them whatever the padding), then the update.
func (s *session) trainStep() (stepResult, error) {
	r, p := s.r, s.parts
	if p.pref != nil {
		return s.preferenceStep()
	}
	micro := make([]data.Batch, r.Train.GradAccum)
	total := 0
	for i := range micro {
		micro[i] = p.trainLoader.Next()
		total += micro[i].NumTargets
	}
	// With loss scaling the gradient flowing out of the loss is multiplied
	// by the scale (constant within the step), so small fp16 gradients do
	// not underflow on their way back.
	res := stepResult{scale: 1, scaled: p.scaler != nil}
	if p.scaler != nil {
		res.scale = p.scaler.Scale()
	}
	var lossSum float64
	for i, bt := range micro {
		bt = s.dp.shard(bt) // this rank's rows; total stays the global batch's
		s.dp.beforeMicro(i, len(micro))
		w := res.scale * float32(bt.NumTargets) / float32(max(total, 1))
		loss, err := p.trainer.run(bt, w, i == 0, noiseKey(r.Seed, s.step, i))
		if err != nil {
			return res, err
		}
		if p.trainer.tapped && s.dp.fired != len(p.params) {
			return res, fmt.Errorf("internal: %d of %d gradient taps ran", s.dp.fired, len(p.params))
		}
		lossSum += loss * float64(bt.NumTargets)
	}
	var err error
	if res.rounded, res.underflowed, err = s.takeGradCounts(); err != nil {
		return res, err
	}
	// sum the gradients, the loss and the rounding counts over the ranks
	sc := []float64{lossSum, float64(res.rounded), float64(res.underflowed)}
	if res.comm, err = s.reduce(sc); err != nil {
		return res, err
	}
	lossSum, res.rounded, res.underflowed = sc[0], int64(sc[1]), int64(sc[2])
	res.loss = lossSum / float64(max(total, 1))
	return s.update(res, total)
}

// update ends a step whose loss and gradients res and the params hold:
// the optimizer's update, unless the loss is not finite or no micro-batch
// had a target (total).
func (s *session) update(res stepResult, total int) (stepResult, error) {
	r, p := s.r, s.parts
	var err error
	s.lastLoss = res.loss
	res.finiteLoss = !math.IsNaN(res.loss) && !math.IsInf(res.loss, 0)
	res.lr = p.schedule.LR(s.step)
	if p.devOpt != nil { // the same decisions, on gradients that stay on the device
		res.update, err = p.devOpt.apply(p.scaler, r.Optimizer.GradClip, res.lr, total > 0, res.finiteLoss)
	} else {
		res.update, err = applyStep(p.params, p.optimizer, p.scaler, r.Optimizer.GradClip, res.lr, total > 0, res.finiteLoss)
	}
	if err != nil {
		return res, err
	}
	if !res.stepped {
		s.sum.SkippedSteps++
	}
	return res, nil
}

// record is the step's metrics.jsonl line.
func (res stepResult) record(step int, tps, elapsed float64) map[string]any {
	rec := map[string]any{"step": step, "loss": res.loss, "lr": res.lr, "grad_norm": res.gradNorm,
		"tokens_per_s": tps, "elapsed_s": elapsed, "skipped": !res.stepped, "grad_zero_frac": res.zeroFrac}
	if res.rounded > 0 { // the share of gradient values between ops that rounding sent to zero
		rec["grad_underflow_frac"] = float64(res.underflowed) / float64(res.rounded)
	}
	if res.scaled {
		rec["loss_scale"] = res.scale
	}
	for k, v := range res.preference {
		rec[k] = v
	}
	if res.comm != nil { // seconds the step waited for its reductions, and their whole time
		rec["allreduce_s"], rec["allreduce_busy_s"] = res.comm.wait.Seconds(), res.comm.busy.Seconds()
	}
	return rec
}

// line is the step's log line when there is no progress bar.
func (res stepResult) line(step, steps int, tps float64) string {
	msg := fmt.Sprintf("step %d/%d  loss %.4f  lr %.2e  grad_norm %.3f  %s tok/s", step, steps, res.loss, res.lr, res.gradNorm, human(int(tps)))
	if res.scaled {
		msg += fmt.Sprintf("  scale %g", res.scale)
	}
	if !res.stepped {
		msg += "  (skipped: non-finite loss or gradients)"
	}
	return msg
}

func (s *session) tokensPerStep() int64 {
	return int64(s.parts.batch * s.r.Data.SeqLen * s.r.Train.GradAccum)
}

// tokensPerSecond is this leg's training throughput so far.
func (s *session) tokensPerSecond() float64 {
	return float64(s.tokensPerStep()) * float64(s.step-s.legFirstStep) / time.Since(s.legStart).Seconds()
}

// loopSeconds is the training loop's time over every leg of the run so
// far: the earlier legs', and this leg's once its loop has started.
func (s *session) loopSeconds() float64 {
	if s.legStart.IsZero() {
		return s.priorSeconds
	}
	return s.priorSeconds + time.Since(s.legStart).Seconds()
}

// stateNow is the loop's state as a checkpoint records it (all but the
// optimizer's, which it saves itself, and the length of metrics.jsonl).
func (s *session) stateNow() checkpointState {
	p := s.parts
	st := checkpointState{Step: s.step, ConfigHash: s.r.Hash(), Loader: s.dataState(),
		Skipped: s.sum.SkippedSteps, LoopSeconds: s.loopSeconds(),
		LastLoss: jsonfloat.Float(s.lastLoss), ValBefore: s.sum.ValBefore, TaskBefore: s.sum.TaskBefore}
	if p.scaler != nil {
		sc := p.scaler.State()
		st.Scaler = &sc
	}
	return st
}

// checkpoint saves everything needed to continue after the current step,
// then prunes old checkpoints and redraws the reports.
func (s *session) checkpoint() error {
	if err := s.syncHost(); err != nil {
		return err
	}
	if err := s.checkReplicas(fmt.Sprintf("step %d", s.step)); err != nil {
		return err
	}
	var err error
	if s.rank0() {
		err = s.writeCheckpoint()
	} else {
		s.checkpointed = s.step
	}
	return dist.Agree(s.dp.comm, err)
}

// writeCheckpoint writes the checkpoint (rank 0).
func (s *session) writeCheckpoint() error {
	p := s.parts
	metrics, err := s.logger.contents()
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	st := s.stateNow()
	st.MetricsBytes = int64(len(metrics))
	root := filepath.Join(s.dir, "checkpoints")
	if _, err := writeCheckpoint(root, st, p.params, p.optimizer, metrics, s.opt.Faults.CheckpointStage); err != nil {
		return err
	}
	s.checkpointed = s.step
	if err := pruneCheckpoints(root, s.r.Train.KeepCheckpoints); err != nil {
		return err
	}
	writeReports(s.dir, s.out)
	return nil
}

// finish measures the trained model, saves it and writes summary.json. An
// interrupted run saves what it trained and skips the measurements; one
// interrupted while measuring saves the trained model without them, and
// --resume makes them.
func (s *session) finish(ctx context.Context) (*Summary, error) {
	if err := s.syncHost(); err != nil {
		return nil, err
	}
	sum := &s.sum
	sum.RunDir, sum.Steps, sum.FinalLoss = s.dir, s.step, jsonfloat.Float(s.lastLoss)
	loopSeconds := s.loopSeconds()
	sum.Tokens = s.tokensPerStep() * int64(s.step)
	if loopSeconds > 0 {
		sum.TokensPerSec = float64(sum.Tokens) / loopSeconds
	}
	if vk := s.parts.trainer.vk; vk != nil && s.step > s.legFirstStep {
		steps := int64(s.step - s.legFirstStep)
		sum.HostToDevice, sum.DeviceToHost = vk.Transfers.Up/steps, vk.Transfers.Down/steps
	}
	if g := s.parts.gpu; g != nil {
		_, sum.DevicePeak = g.dev.MemoryUse()
	}
	stoppedMeasuring := false
	if !sum.Interrupted {
		if err := s.measureAfter(ctx); errors.Is(err, ErrInterrupted) {
			sum.Interrupted, stoppedMeasuring = true, true
		} else if err != nil {
			return nil, err
		}
	}
	if !s.rank0() {
		// rank 0 saves; the others learn whether it could
		if err := dist.Agree(s.dp.comm, nil); err != nil {
			return nil, err
		}
		if sum.Interrupted || ctx.Err() != nil {
			return sum, ErrInterrupted
		}
		return sum, nil
	}
	if err := dist.Agree(s.dp.comm, s.save()); err != nil {
		return nil, err
	}
	writeReports(s.dir, s.out)
	writeSummary(s.out, sum)
	switch {
	case stoppedMeasuring:
		fmt.Fprintf(s.out, "interrupted in the final evaluation, after the last step (%d of %d): the trained weights are saved in %s and checkpointed, but the final measurements were not made. Make them with:\n  mixtune train --resume %s\n",
			s.step, s.r.Train.Steps, sum.Saved, s.dir)
	case sum.Interrupted:
		fmt.Fprintf(s.out, "interrupted after step %d of %d; checkpoint saved. Resume with:\n  mixtune train --resume %s\n", s.step, s.r.Train.Steps, s.dir)
	case ctx.Err() != nil:
		// the signal came while saving, which finished: nothing to resume
		fmt.Fprintf(s.out, "interrupted while saving; the save finished and the run is complete\n")
		return sum, ErrInterrupted
	}
	if sum.Interrupted {
		return sum, ErrInterrupted
	}
	return sum, nil
}

// measureAfter measures the trained model: validation loss and task
// accuracy, each stopped with ErrInterrupted when ctx is cancelled.
func (s *session) measureAfter(ctx context.Context) error {
	p, sum := s.parts, &s.sum
	if p.evaluator != nil {
		rep, err := s.validationLoss(ctx)
		if err != nil {
			return err
		}
		sum.ValAfter = &rep
		s.logger.write(map[string]any{"step": s.step, "val_loss": rep.Loss, "val_ppl": rep.Perplexity})
	}
	if p.task != nil && s.r.Task.After {
		rep, err := s.taskReport(ctx)
		if err != nil {
			return err
		}
		sum.TaskAfter = &rep
		s.logger.event(taskEvent(s.step, rep, time.Now()))
	}
	var err error
	sum.PreferenceAfter, err = s.measurePreference(s.say)
	return err
}

// save writes the adapter (or model), summary.json and the last metrics
// (rank 0).
func (s *session) save() error {
	r, p, sum := s.r, s.parts, &s.sum
	if p.lora != nil {
		sum.Saved = filepath.Join(s.dir, "adapter")
		if err := p.lora.Save(sum.Saved, modelName(r)); err != nil {
			return err
		}
	} else {
		sum.Saved = filepath.Join(s.dir, "model")
		if err := p.model.Save(sum.Saved, r.Model.SaveDtype, 0); err != nil {
			return err
		}
	}
	sum.Seconds = time.Since(s.start).Seconds()
	sum.PeakRSS, _ = sysinfo.PeakRSS()
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, summaryFile), append(b, '\n')); err != nil {
		return err
	}
	if err := s.logger.Close(); err != nil {
		return fmt.Errorf("write metrics: %w", err)
	}
	s.logger = nil
	return nil
}

// taskAccuracy generates greedy fp32 answers to ts on the run's engine.
// On the CPU the adapter is merged in. On a device the decoding graphs
// read the training program's weights where they are, the adapter
// unmerged (the same function within fp32 rounding): no second copy of
// the model, nothing uploaded. Where the device has no room for decoding
// beside training, the answers come from the CPU, saying so.
func (s *session) taskAccuracy(ctx context.Context, ts *taskSet) (TaskReport, error) {
	p := s.parts
	onCPU := func() (TaskReport, error) {
		w, err := mergedWeights(p.model, p.lora)
		if err != nil {
			return TaskReport{}, err
		}
		return ts.accuracy(ctx, model.NewDecoder(p.model, w, p.eng.BLAS), p.tok, p.stop, s.r.Task.MaxNewTokens)
	}
	if p.gpu == nil {
		rep, err := onCPU()
		rep.Engine = "cpu"
		return rep, err
	}
	d, done := deviceDecoder(p.model, p.lora, p.eng.BLAS, p.gpu, p.trainer.vk.Param)
	rep, err := ts.accuracy(ctx, d, p.tok, p.stop, s.r.Task.MaxNewTokens)
	done()
	rep.Engine = p.engineName()
	if deviceTooSmall(err) {
		fmt.Fprintf(s.out, "task accuracy: decoding does not fit %s beside training (%v); answering on the cpu\n", p.gpu.phys.Name, err)
		rep, err = onCPU()
		rep.Engine = "cpu (decoding did not fit the device)"
	}
	return rep, err
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

// update is what one optimizer step did.
type update struct {
	stepped  bool
	gradNorm float64 // before clipping; 0 when skipped
	zeroFrac float64 // share of gradient values that are exactly zero
}

// applyStep finishes a step whose gradients are in params: unscale them
// (before clipping, so the clip threshold means unscaled norms), skip the
// step if the loss or any gradient is non-finite, leaving weights and
// optimizer state untouched, else clip and update; then adjust the loss
// scale, which treats a non-finite loss as GradScaler treats a non-finite
// gradient: skip and back off.
func applyStep(params []*optim.Param, opt optim.Optimizer, scaler *amp.LossScaler, clip, lr float64, anyTargets, finiteLoss bool) (update, error) {
	finite := true
	if scaler != nil {
		finite = scaler.Unscale(gradsOf(params))
	} else {
		finite = allFinite(params)
	}
	finite = finite && finiteLoss
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

func precisionNote(p amp.Policy, s *amp.LossScaler, bf16Path string) string {
	how := " (emulated on the CPU)"
	if bf16Path == bf16PathHardware {
		how = " (bf16 products on the bf16 units)"
	}
	switch {
	case p.Low == amp.FP32:
		return ""
	case s != nil:
		return fmt.Sprintf("%s · dynamic loss scaling from %g", how, s.Scale())
	}
	return how + " · no loss scaling"
}

func modelName(r *Recipe) string {
	if r.Model.Init == InitRandom {
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

// hostCount is "1 host" or "N hosts".
func hostCount(hosts []string) string {
	seen := map[string]bool{}
	for _, h := range hosts {
		seen[h] = true
	}
	if len(seen) == 1 {
		return "1 host"
	}
	return fmt.Sprintf("%d hosts", len(seen))
}

func overlapNote(on bool) string {
	if on {
		return ", overlapped with the backward pass"
	}
	return ""
}

// reduce sums the step's gradients and the scalars sc over the ranks.
// Gradients on a GPU go through the host (device → host → MPI → host →
// device), and allreduce_s counts those copies.
func (s *session) reduce(sc []float64) (*commTimes, error) {
	p := s.parts
	gpuRanks := p.devOpt != nil && s.dp.size > 1
	var moved time.Duration
	if gpuRanks {
		t := time.Now()
		if err := p.devOpt.gradsToHost(); err != nil {
			return nil, err
		}
		moved = time.Since(t)
	}
	comm, err := s.dp.reduce(p.trainer.tapped, sc)
	if err != nil {
		return comm, err
	}
	if gpuRanks {
		t := time.Now()
		if err := p.devOpt.gradsToDevice(); err != nil {
			return comm, err
		}
		moved += time.Since(t)
		comm.wait += moved
		comm.busy += moved
	}
	return comm, nil
}

// takeGradCounts returns the gradient values the step rounded to 16 bits
// and those the rounding sent to zero (grad_underflow_frac), and starts
// the tallies again: the CPU engine's, and on a device its program's
// (vkengine.CountUnderflows).
func (s *session) takeGradCounts() (rounded, underflowed int64, err error) {
	p := s.parts
	rounded, underflowed = p.eng.Grads.Take()
	if vk := p.trainer.vk; vk != nil {
		r, u, err := vk.TakeGradCounts()
		if err != nil {
			return 0, 0, err
		}
		rounded, underflowed = rounded+r, underflowed+u
	}
	return rounded, underflowed, nil
}

// syncHost brings the weights and optimizer state an optimizer on the
// device has moved back to the host, where checkpoints, the final save
// and decoding read them; the CPU engine then recasts its copies, and the
// device programs, which hold these very values, upload nothing.
func (s *session) syncHost() error {
	p := s.parts
	if p.devOpt == nil {
		return nil
	}
	moved, err := p.devOpt.syncHost()
	if err != nil || !moved {
		return err
	}
	p.eng.WeightsChanged()
	runners := []*runner{p.trainer, p.evaluator}
	if p.pref != nil {
		runners = append(runners, p.pref.reference, p.pref.policy)
	}
	for _, ru := range runners {
		if ru != nil && ru.vk != nil {
			ru.vkSeen = p.eng.WeightsVersion()
		}
	}
	return nil
}
