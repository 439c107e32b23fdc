package train

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/gpu/vkengine"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/internal/cpufeat"
	"github.com/mixtune/mixtune/internal/sysinfo"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/peft"
	"github.com/schollz/progressbar/v3"
)

// Small functions that build each component from the recipe, and build,
// which calls them in order.

// components are everything a run computes with, built from the recipe
// before anything is written.
type components struct {
	device      *DeviceChoice
	eng         *nn.Engine
	format      data.Format // how rows become tokens: tokenizer, chat template, loss mask
	tok         data.Tokenizer
	stop        []int // ids that end a generation
	rows        *rowReader
	model       *model.Model
	lora        *peft.Adapter // nil for full fine-tuning
	params      []*optim.Param
	optimizer   optim.Optimizer
	schedule    optim.Schedule
	policy      amp.Policy
	scaler      *amp.LossScaler // nil without loss scaling
	batch       int             // rows per micro-batch: train.batch_size, at most the rows there are
	trainLoader *data.Loader
	valBatches  []data.Batch
	valExamples int
	task        *taskSet // nil without a task file
	trainer     *runner
	evaluator   *runner // nil without validation data
	warnings    []string
	blasReason  string           // why auto picked the backend; "" when it was named
	cpu         cpufeat.Features // the CPU's bf16 units, detected at start
	bf16        bf16Decision     // where the bf16 products run (amp.bf16_matmul)
	gpu         *gpuEngine       // the Vulkan engine the graphs run on; nil on the CPU
	gpuReason   string           // why compute.device chose what it chose
	devOpt      *deviceOptimizer // AdamW on the Vulkan device; nil where the host steps
	comm        dist.Comm        // the processes training together; a Single for one
	dp          *dataParallel    // this process's part of every batch: all of it for one
	pref        *preferenceRun   // a preference objective's pairs and reference; nil for sft
	reference   string           // where a full fine-tuning run's reference log-probabilities came from; "" without
}

// build makes the run's components. Every input is read and checked here
// (datasets, the task file, the model, a from: adapter), and the run's
// memory estimated against the machine's, so that bad input is reported
// before a run directory exists. Cancelling ctx stops it with
// ErrInterrupted: tokenization at once, the other phases when they end.
func build(ctx context.Context, r *Recipe, choice *DeviceChoice, opt Options) (c *components, err error) {
	made := &components{device: choice, format: r.text.Format, stop: r.text.Stop, comm: opt.Comm, cpu: cpufeat.Detect()}
	defer func() { // a failed build closes what it made, whatever it returned
		if err != nil && ctx.Err() != nil { // whatever a phase cut short said, it was the interrupt
			err = ErrInterrupted
		}
		if err != nil && made.gpu != nil {
			err = made.gpu.memoryError(r, err)
		}
		if err != nil {
			made.close()
			c = nil
		}
	}()
	c = made
	if c.comm == nil {
		c.comm = dist.NewSingle()
	}
	c.tok = c.format.Tok
	sel := choice.Selection
	if c.policy, err = r.policyFor(sel.Precision); err != nil {
		return nil, err
	}
	if c.eng, err = c.openBackend(r.Compute, opt.ResumeDir); err != nil {
		return nil, err
	}
	if err := c.openBF16(r.AMP.BF16Matmul, opt.ResumeDir); err != nil {
		return nil, err
	}
	rankSel, err := rankGPU(r.Compute, sel, dist.LocalRank(c.comm), dist.LocalSize(c.comm))
	if err != nil {
		return nil, r.doc.Errorf("compute.share_gpu", "%v", err)
	}
	if c.gpu, c.gpuReason, err = openGPU(r.Compute, rankSel, r.Precision); err != nil {
		field := "compute.device"
		if r.Compute.VulkanDevice != "" {
			field = "compute.vulkan_device"
		}
		return nil, r.doc.Errorf(field, "%v", err)
	}
	if err := c.settleCompute(r); err != nil {
		return nil, err
	}
	if have, ok := sysinfo.TotalMemory(); ok {
		if err := checkDataMemory(r, have); err != nil {
			return nil, err
		}
	}
	say := opt.Out
	if say == nil || c.comm.Rank() != 0 {
		say = io.Discard // rank 0 speaks for the job
	}
	c.rows = &rowReader{cache: r.Data.Cache, out: say, progress: opt.Progress}
	objective, _, preference := r.preference()
	var pairs, valPairs []data.Pair
	var trainEx, valEx []data.Example
	if preference {
		pairs, valPairs, trainEx, err = preferenceData(r, c.format)
	} else {
		trainEx, valEx, err = datasets(ctx, r, c.format, c.rows)
	}
	if err != nil {
		return nil, inputError(err)
	}
	if preference && r.Data.Validation == "" && r.Data.ValidationSplit > 0 {
		c.warnings = append(c.warnings, "data.validation_split is not used by preference runs: name validation pairs in data.validation")
	}
	c.warnings = append(c.warnings, c.rows.warnings...)
	c.valExamples = len(valEx) + len(valPairs)
	if r.Task.EvalFile != "" {
		if c.task, err = loadTask(r.Task.EvalFile, c.format, r.Task.Limit); err != nil {
			return nil, inputError(err)
		}
	}
	if ctx.Err() != nil {
		return nil, ErrInterrupted
	}
	if err := c.loaders(r, trainEx, valEx); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, ErrInterrupted
	}
	if err := checkMemory(r, rowsPerRank(c.batch, c.comm), c.gpu != nil); err != nil {
		return nil, err
	}
	if c.model, err = loadModel(r); err != nil {
		return nil, inputError(err)
	}
	if ctx.Err() != nil {
		return nil, ErrInterrupted
	}
	if c.lora, err = newAdapter(r, c.model); err != nil {
		return nil, inputError(err)
	}
	if ctx.Err() != nil {
		return nil, ErrInterrupted
	}
	c.params = trainables(c.model, c.lora)
	steps, err := newOptimizer(r.Optimizer)
	if err != nil {
		return nil, err
	}
	c.optimizer = engineOptimizer{steps, c.eng}
	c.schedule = r.schedule()
	if sel.LossScaling {
		if c.scaler, err = amp.NewLossScaler(r.scalerConfig()); err != nil {
			return nil, err
		}
	}
	// this rank's rows of every micro-batch (parallel.go); a preference
	// run's ranks share out pairs, each pair's two sequences on one rank
	c.dp = newDataParallel(c.comm, c.batch, r.Data.SeqLen, c.tok.PAD(), c.params, opt.Overlap, opt.BucketBytes)
	rows := c.dp.rows
	c.eng.NoiseRowOffset = c.dp.lo * r.Data.SeqLen
	if preference {
		rows = 2 * c.dp.rows // each pair's chosen and rejected sequence
	}
	var tap nn.GradTap
	if c.dp.overlap && c.gpu == nil {
		tap = c.dp.tap(paramIndex(c.params))
	}
	ckpt := r.Compute.ActivationCheckpointing
	tg := trainGraph(tap, c.comm.Size(), ckpt)
	tg.gpu, tg.memory = c.gpu, opt.memory
	if preference {
		if c.pref, err = c.preferenceRun(r, objective, pairs, valPairs, rows, &tg); err != nil {
			return c, err
		}
	}
	if c.trainer, err = buildRunner(c.eng, c.model, c.lora, rows, r.Data.SeqLen, c.params, &c.policy, tg); err != nil {
		return nil, err
	}
	if c.gpu != nil {
		// the optimizer's state and the weights stay on the device
		if c.devOpt, err = newDeviceOptimizer(c.gpu, r.Optimizer, c.params, c.trainer.vk.Param); err != nil {
			return c, err // closes the trainer
		}
		c.optimizer, c.trainer.devOpt = c.devOpt, c.devOpt
		c.devOpt.counts = &c.trainer.vk.Transfers
		started := ""
		if opt.ResumeDir != "" {
			started = startedTile(opt.ResumeDir)
		}
		warnings, err := c.gpu.settleTile(r.Compute.GemmTile, r.Precision, c.trainer.vk.Products(), started, c.comm)
		c.warnings = append(c.warnings, warnings...)
		if err != nil {
			return c, err
		}
		c.warnings = append(c.warnings, c.gpu.settleSplit(r.Compute.SplitDKV, r.Precision, c.trainer.vk.Attentions())...)
	}
	// after the tile is settled: the engine's name says which runs the products
	if opt.ResumeDir != "" {
		if started := startedEngine(opt.ResumeDir); started == "" && c.gpu != nil || started != "" && started != c.engineName() {
			c.warnings = append(c.warnings, fmt.Sprintf("this run started on the %s engine and resumes on %s: the engines sum in other orders, and its numbers will differ from an uninterrupted run's in the last bits", cmp.Or(started, "cpu"), c.engineName()))
		}
	}
	if c.pref != nil {
		err := c.preferencePasses(r, objective, rows, tg)
		c.trainer.companions = append(c.trainer.companions, c.pref.reference, c.pref.policy)
		if err != nil {
			return c, err // closes the trainer and its companions
		}
	}
	if ctx.Err() != nil {
		return c, ErrInterrupted // closes the trainer
	}
	if len(c.valBatches) > 0 {
		eg := graphOptions{checkpoint: ckpt, evalOfFullFineTune: c.lora == nil, gpu: c.gpu, trained: paramNames(c.params), memory: opt.memory}
		if c.trainer.vk != nil {
			eg.share = c.trainer.vk.Param // the training graph's weights, not a second copy
		}
		if c.evaluator, err = buildRunner(c.eng, c.model, c.lora, rows, r.Data.SeqLen, nil, &c.policy, eg); err != nil {
			return c, err // closes the trainer
		}
	}
	return c, nil
}

// loaders batches the data. A batch larger than the training rows is
// clamped to them; data that leaves no target token within seq_len is an
// error, not a run that trains nothing.
func (c *components) loaders(r *Recipe, trainEx, valEx []data.Example) error {
	c.batch = r.Train.BatchSize
	tl, err := newLoader(trainEx, r.Data, c.batch, r.Data.Shuffle, r.Seed, c.tok)
	if err != nil {
		return inputError(fmt.Errorf("training data: %w", err))
	}
	st := tl.Stats()
	if st.Rows < c.batch {
		c.warnings = append(c.warnings, fmt.Sprintf("train.batch_size %d is more than the %d rows of training data: using %d", c.batch, st.Rows, st.Rows))
		c.batch = st.Rows
		if tl, err = newLoader(trainEx, r.Data, c.batch, r.Data.Shuffle, r.Seed, c.tok); err != nil {
			return inputError(fmt.Errorf("training data: %w", err))
		}
	}
	if st.TargetTokens == 0 {
		return inputError(fmt.Errorf("%s: no training example has a target token within data.seq_len %d (every completion is cut off); raise seq_len or shorten the prompts", r.Data.Train, r.Data.SeqLen))
	}
	if st.EmptyRows > 0 {
		c.warnings = append(c.warnings, fmt.Sprintf("%d of %d training examples have no target token within data.seq_len %d and train nothing", st.EmptyRows, st.Examples, r.Data.SeqLen))
	}
	c.trainLoader = tl
	if len(valEx) == 0 {
		return nil
	}
	vl, err := newLoader(valEx, r.Data, c.batch, false, r.Seed, c.tok)
	if err != nil {
		return inputError(fmt.Errorf("validation data: %w", err))
	}
	if vl.Stats().TargetTokens == 0 {
		return inputError(fmt.Errorf("validation data: no example has a target token within data.seq_len %d", r.Data.SeqLen))
	}
	c.valBatches = vl.Batches()
	if r.Train.EvalBatches > 0 && len(c.valBatches) > r.Train.EvalBatches {
		c.valBatches = c.valBatches[:r.Train.EvalBatches]
	}
	return nil
}

func (c *components) close() {
	if c.trainer != nil {
		c.trainer.close()
	}
	if c.evaluator != nil {
		c.evaluator.close()
	}
	if c.devOpt != nil {
		c.devOpt.close()
	}
	c.gpu.close()
}

// checkMemory refuses a run whose estimated peak memory exceeds what the
// machine (or its container) has, rather than letting the kernel kill it,
// or the Go runtime crash, mid-run.
func checkMemory(r *Recipe, batch int, onDevice bool) error {
	held, _ := dataMemory(r.dataFileBytes(), r.text.Format.MaxRow(), runtime.GOMAXPROCS(0))
	need := r.estimateMemory(batch) + held
	if onDevice { // the activations live on the device: the host holds the weights and their state
		need = r.hostMemory() + held
	}
	have, ok := sysinfo.TotalMemory()
	if !ok || need <= have {
		return nil
	}
	if onDevice {
		return inputError(fmt.Errorf("the run needs an estimated %s of host memory for the weights, their optimizer state and the training tokens, more than this machine's %s; "+
			"keep the base in 16 bits (model.base_dtype: bf16) or 4 (model.quantize: nf4)", gib(need), gib(have)))
	}
	hint := ""
	if !r.Compute.ActivationCheckpointing {
		ck := *r
		ck.Compute.ActivationCheckpointing = true
		hint = fmt.Sprintf(", recompute each layer in the backward pass (compute.activation_checkpointing: true; about %s)", gib(ck.estimateMemory(batch)))
	}
	return inputError(fmt.Errorf("the run needs an estimated %s of memory (weights, optimizer state, the activations of %d×%d tokens and the training tokens), more than this machine's %s; "+
		"lower train.batch_size or data.seq_len, raise train.grad_accum instead%s, or keep the base in 16 bits (model.base_dtype: bf16)",
		gib(need), batch, r.Data.SeqLen, gib(have), hint))
}

func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// openEngine picks the matmul backend and the kernels' thread count;
// the choice says why auto picked it. MIXTUNE_BLAS_CALIBRATE (see
// blas.AutoOptionsFromEnv) says how auto uses its calibration cache.
func openEngine(c ComputeConfig) (*nn.Engine, blas.Choice, error) {
	threads := c.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	opt, err := blas.AutoOptionsFromEnv(os.Getenv)
	if err != nil {
		return nil, blas.Choice{}, inputError(err)
	}
	choice, err := blas.Choose(c.BLAS, threads, opt)
	if err != nil {
		return nil, choice, err
	}
	return &nn.Engine{BLAS: choice.Backend, Workers: threads}, choice, nil
}

// openBackend opens the run's engine. With compute.blas: auto, a resumed
// run keeps the backend its run.json says it started with, so that it
// computes as the uninterrupted run would have, whatever a calibration
// would pick now; and the ranks of a data-parallel job all run the
// backend rank 0 picks.
func (c *components) openBackend(compute ComputeConfig, resumeDir string) (*nn.Engine, error) {
	eng, err := c.openRunBackend(compute, resumeDir)
	if err != nil || resumeDir == "" {
		return eng, err
	}
	if _, started, ok := startedBackend(resumeDir); ok && !sameKernels(started, eng.BLAS.Name()) {
		c.warnings = append(c.warnings, fmt.Sprintf("this run started on %s and resumes on %s: other kernels round differently, and its numbers will differ from an uninterrupted run's", started, eng.BLAS.Name()))
	}
	return eng, nil
}

// openBF16 decides where the run's bf16 products run (amp.bf16_matmul)
// and gives the engine the bf16 GEMM when it is the hardware; a resumed
// run whose run.json says they ran elsewhere warns.
func (c *components) openBF16(mode amp.BF16Matmul, resumeDir string) error {
	d, err := decideBF16(mode, c.policy.Low, c.cpu, func() ([]blas.BF16Choice, error) {
		return blas.BF16Candidates(c.eng.BLAS, c.cpu, c.eng.Workers)
	}, measureBF16(c.eng), blas.CheckBF16)
	if err != nil {
		return err
	}
	c.bf16, c.eng.BF16 = d, d.gemmer
	c.warnings = append(c.warnings, d.warnings...)
	if resumeDir != "" {
		if started, ok := startedBF16(resumeDir); ok {
			if w := resumeBF16Warning(started, d.path); w != "" {
				c.warnings = append(c.warnings, w)
			}
		}
	}
	return nil
}

// openRunBackend is openBackend without the check of a resumed run's kernels.
func (c *components) openRunBackend(compute ComputeConfig, resumeDir string) (*nn.Engine, error) {
	compute = rankCompute(compute, c.comm)
	if compute.BLAS == blas.KindAuto && resumeDir != "" {
		if kind, _, ok := startedBackend(resumeDir); ok {
			fixed := compute
			fixed.BLAS = kind
			eng, _, err := openEngine(fixed)
			if err == nil {
				c.blasReason = fmt.Sprintf("auto → %s: the backend this run started with (run.json), kept so that the resumed run computes as it began", kind)
				return eng, nil
			}
			c.warnings = append(c.warnings, fmt.Sprintf("this run started on %s, which does not load now (%v): auto picks again", kind, err))
		}
	}
	if compute.BLAS == blas.KindAuto && c.comm.Size() > 1 {
		return c.openRankBackend(compute)
	}
	eng, choice, err := openEngine(compute)
	if err != nil {
		return nil, err
	}
	c.blasReason = choice.Reason
	c.warnings = append(c.warnings, choice.Warnings...)
	return eng, nil
}

// backendKinds index the kinds rank 0 broadcasts.
func backendKinds() []blas.Kind {
	return []blas.Kind{blas.KindNative, blas.KindOpenBLAS, blas.KindOneDNN, blas.KindGonum}
}

// openRankBackend lets rank 0 choose and every other rank open what it
// chose: a calibration on each rank could pick differently on a loaded
// machine, and ranks that compute differently no longer train as one
// process would. Rank 0 always broadcasts (0: it failed), so no rank
// waits for a message that never comes.
func (c *components) openRankBackend(compute ComputeConfig) (*nn.Engine, error) {
	msg := []byte{0}
	var eng *nn.Engine
	var err error
	if c.comm.Rank() == 0 {
		var choice blas.Choice
		if eng, choice, err = openEngine(compute); err == nil {
			msg[0] = byte(1 + slices.Index(backendKinds(), choice.Kind))
			c.blasReason = choice.Reason
			c.warnings = append(c.warnings, choice.Warnings...)
		}
	}
	if berr := c.comm.Bcast(msg, 0); berr != nil {
		return nil, fmt.Errorf("share the BLAS backend: %w", berr)
	}
	if c.comm.Rank() == 0 {
		return eng, err
	}
	if msg[0] == 0 || int(msg[0]) > len(backendKinds()) {
		return nil, fmt.Errorf("rank 0 could not open a BLAS backend")
	}
	compute.BLAS = backendKinds()[msg[0]-1]
	eng, _, err = openEngine(compute)
	if err != nil {
		return nil, fmt.Errorf("open %s, the backend rank 0 picked: %w", compute.BLAS, err)
	}
	c.blasReason = fmt.Sprintf("auto → %s: picked by rank 0", compute.BLAS)
	return eng, nil
}

// loadModel loads the pretrained base or initializes a random one, and
// keeps the frozen base matrices in 16 bits if base_dtype says so.
func loadModel(r *Recipe) (*model.Model, error) {
	// validated: a 16-bit base_dtype is an adapter run's, whose base is frozen
	// and, with model.quantize, the decoder projections in 4 bits
	if r.Model.Init == InitRandom {
		return model.NewQuantized(r.Base, r.Seed, r.Model.BaseDtype, r.Model.Quantization())
	}
	return model.LoadQuantized(r.Model.Path, r.Model.BaseDtype, r.Model.Quantization())
}

// datasets tokenizes the training rows and the validation rows (a file,
// or a seeded split of the training rows).
func datasets(ctx context.Context, r *Recipe, f data.Format, rd *rowReader) (trainEx, valEx []data.Example, err error) {
	trainEx, err = rd.load(ctx, r.Data.Train, f)
	if err != nil {
		return nil, nil, err
	}
	if r.Data.Validation != "" {
		valEx, err = rd.load(ctx, r.Data.Validation, f)
		return trainEx, valEx, err
	}
	if r.Data.ValidationSplit == 0 {
		return trainEx, nil, nil
	}
	return data.Split(trainEx, r.Data.ValidationSplit, r.Seed)
}

// rowReader reads JSONL datasets: a large file is tokenized on every core
// with a progress bar on a terminal, and, with cache on, its tokens are
// kept on disk for the next run (or --resume) of the same data, tokenizer
// and template.
type rowReader struct {
	cache    bool
	out      io.Writer
	progress bool
	hits     []string // files whose tokens came from the cache
	warnings []string // cache entries found but not used, and why
}

// Sizes above which a file's tokens are cached, and a progress bar shown:
// smaller files tokenize in well under a second.
const (
	cacheMinBytes    = 1 << 20
	progressMinBytes = 8 << 20
)

// load reads path's examples and checks every id against the model's
// vocabulary (f's), so that an id the embedding lacks is reported here,
// naming its line, before a run directory exists.
func (rd *rowReader) load(ctx context.Context, path string, f data.Format) ([]data.Example, error) {
	ex, err := rd.read(ctx, path, f)
	if err != nil {
		return nil, err
	}
	return ex, f.CheckIDs(path, ex)
}

func (rd *rowReader) read(ctx context.Context, path string, f data.Format) ([]data.Example, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var opt data.LoadOptions
	if !rd.progress && st.Size() >= progressMinBytes {
		// a log has no bar: say why nothing happens for a while
		fmt.Fprintf(rd.out, "data: tokenizing %s (%.1f MB)\n", path, float64(st.Size())/1e6)
	}
	if rd.progress && st.Size() >= progressMinBytes {
		bar := progressbar.NewOptions64(st.Size(), progressbar.OptionSetWriter(rd.out), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription("tokenizing "+filepath.Base(path)), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
		var mu sync.Mutex
		opt.Progress = func(done, _ int64) {
			mu.Lock()
			defer mu.Unlock()
			bar.Set64(max(done, bar.State().CurrentNum))
		}
		defer bar.Finish()
	}
	if !rd.cache || st.Size() < cacheMinBytes {
		return data.Load(ctx, path, f, opt)
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return data.Load(ctx, path, f, opt)
	}
	ex, look, err := data.Cache{Dir: filepath.Join(dir, "mixtune", "tokens")}.Load(ctx, path, f, opt)
	if look.Hit {
		rd.hits = append(rd.hits, path)
	}
	if look.Rejected != nil {
		rd.warnings = append(rd.warnings, fmt.Sprintf("%v; not used: %s was tokenized again", look.Rejected, path))
	}
	return ex, err
}

func newLoader(ex []data.Example, d DataConfig, batch int, shuffle bool, seed uint64, tok data.Tokenizer) (*data.Loader, error) {
	return data.NewLoader(ex, data.LoaderConfig{SeqLen: d.SeqLen, BatchSize: batch,
		Mode: d.Mode, Shuffle: shuffle, Seed: seed, PadID: tok.PAD()})
}

// engineOptimizer is the optimizer a run steps with: each step that
// updates the weights tells the engine, which then recomputes what its
// ops derived from them (low-precision copies, DoRA norms). The step is
// the one place weights change while training, so the engine learns of
// every change and of nothing else.
type engineOptimizer struct {
	optim.Optimizer
	eng *nn.Engine
}

func (o engineOptimizer) Step(params []*optim.Param, lr float64) error {
	if err := o.Optimizer.Step(params, lr); err != nil {
		return err // Step left the weights as they were
	}
	o.eng.WeightsChanged()
	return nil
}

func newOptimizer(c OptimizerConfig) (optim.Optimizer, error) {
	if c.Name == SGD {
		return optim.NewSGD(sgdConfig(c))
	}
	return optim.NewAdamW(adamWConfig(c))
}

func sgdConfig(c OptimizerConfig) optim.SGDConfig {
	return optim.SGDConfig{Momentum: c.Momentum, WeightDecay: c.WeightDecay, Nesterov: c.Nesterov}
}

func adamWConfig(c OptimizerConfig) optim.AdamWConfig {
	return optim.AdamWConfig{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay}
}

// runner owns one compiled graph of fixed batch shape: a training graph
// (forward and backward) or an evaluation graph (forward only). The model
// and adapter weights are shared with the optimizer, not copied, so an
// optimizer step is seen by the next run.
type runner struct {
	eng      *nn.Engine
	memory   nn.MemoryPlan     // how the CPU graph's outputs share memory
	vk       *vkengine.Program // the graph on the Vulkan engine; nil on the CPU
	vkSync   G.Nodes           // the trained weights' nodes, uploaded when they change
	vkSeen   uint64            // the engine's weights version last uploaded
	vkGrad   []float32         // a downloaded gradient
	vkGrads  []*vulkan.Buffer  // the gradients' device buffers, aligned with params
	devOpt   *deviceOptimizer  // set: the gradients stay on the device, summed there
	g        *model.Graph
	vm       G.VM
	ids, tgt []int      // the input tensors' backing arrays, refilled per batch
	pos      []int      // each token's position in its document, refilled per batch
	lossGrad *G.Node    // d(step loss)/d(this micro-batch's loss): its share of the step's targets
	grads    G.Nodes    // aligned with params
	sparse   []*rowGrad // aligned with params: non-nil for a gradient kept row by row
	params   []*optim.Param
	tapped   bool // gradient taps move the gradients into params, not run
	// companions are runners over the same weights closed with this one
	// (a preference run's reference and validation passes)
	companions []*runner
}

// graphOptions are the runner's ways of computing that tests compare with
// the references they replace; the zero value is what training uses.
type graphOptions struct {
	memory      memoryMode
	unfusedHead bool // the LM head as linear + cross-entropy, with its [N, V] logits
	denseGrads  bool // every gradient added whole into its param, embedding tables too
	headChunk   int  // tokens per block of the fused head; 0: nn.HeadChunk(vocab)
	// tap, if set, takes each gradient as the backward pass makes it
	// (data-parallel reduction); a tapped embedding gradient stays dense.
	tap nn.GradTap
	// checkpoint recomputes each decoder layer in the backward pass
	// (compute.activation_checkpointing; model.GraphConfig.CheckpointLayers).
	checkpoint bool
	// evalOfFullFineTune marks an evaluation graph whose base weights the
	// training run updates: their low-precision copies must be cast again
	// every step, as the training graph's are, not once for good.
	evalOfFullFineTune bool
	// gpu, when set, runs the graph on the Vulkan engine (gpu/vkengine)
	// instead of the CPU kernels: the same graph, compiled for the device.
	gpu *gpuEngine
	// trained names the weights an optimizer updates, which a graph on
	// the GPU uploads again when the engine's weights change; params'
	// names when the runner has them.
	trained []string
	// share, on the GPU, gives the weights another program holds (the
	// training graph's), which this graph reads instead of a copy.
	share func(name string) *vulkan.Buffer
	// sequenceLogProbs and sequenceLoss make the graph a preference
	// objective's (model.GraphConfig): its loss, or without one its
	// per-row log-probabilities only (the reference pass).
	sequenceLogProbs bool
	sequenceLoss     nn.VectorLoss
}

// paramNames are the params' names.
func paramNames(ps []*optim.Param) []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}

// newRunner builds and compiles the graph. With params, it also takes the
// gradient of the loss with respect to each of them.
func newRunner(eng *nn.Engine, m *model.Model, l *peft.Adapter, batch, seqLen int, params []*optim.Param, policy *amp.Policy) (*runner, error) {
	return buildRunner(eng, m, l, batch, seqLen, params, policy, graphOptions{})
}

// trainGraph is how a training run computes: with gradient taps
// (nn.GradTap) if tap is set, each param's gradient is handed to tap's
// function as soon as the backward pass has it, and that function, not
// run, puts it into the param; with more than one rank (world) every
// gradient is kept dense: the buffers are summed across ranks, so they
// hold rows that other ranks' micro-batches wrote, which this rank's list
// of written rows (rowGrad) would not clear.
func trainGraph(tap nn.GradTap, world int, checkpoint bool) graphOptions {
	return graphOptions{tap: tap, denseGrads: world > 1, checkpoint: checkpoint}
}

func buildRunner(eng *nn.Engine, m *model.Model, l *peft.Adapter, batch, seqLen int, params []*optim.Param, policy *amp.Policy, o graphOptions) (*runner, error) {
	b := nn.NewBuilder(eng, tensor.Float32)
	b.PackFrozenWeights = o.gpu == nil // the Vulkan engine reads weights as the graph holds them
	b.RoundInProducts = o.gpu == nil
	b.FuseAdapterAdd = o.gpu == nil
	b.HoldBF16Operands = o.gpu == nil
	if params != nil {
		b.GradTap = o.tap
	}
	if policy != nil && policy.Low != amp.FP32 {
		b.Policy = policy
	}
	nodes := map[string]*G.Node{}
	pos := make([]int, batch*seqLen)
	// The fused head never holds the [N, vocab] logits: peak memory no
	// longer grows with the vocabulary times the tokens.
	gc := model.GraphConfig{Batch: batch, SeqLen: seqLen, Positions: pos, FusedHead: !o.unfusedHead, HeadChunk: o.headChunk,
		CheckpointLayers: o.checkpoint, SequenceLogProbs: o.sequenceLogProbs, SequenceLoss: o.sequenceLoss}
	if l != nil {
		gc.Linear = l.Linear(nodes)
	} else if params != nil || o.evalOfFullFineTune {
		gc.Trainable = func(string) bool { return true }
	}
	var lossGrad *G.Node
	if params != nil {
		// made before the graph so that the fused head can read it and take
		// its gradients in the forward pass, not compute the logits twice
		lossGrad = G.NewScalar(b.G, tensor.Float32, G.WithName("loss_grad"))
		if gc.FusedHead {
			gc.LossGrad = lossGrad
		}
	}
	g, err := m.Build(b, gc)
	if err != nil {
		return nil, err
	}
	for name, n := range g.Params {
		nodes[name] = n
	}
	ru := &runner{eng: eng, g: g, params: params, ids: make([]int, batch*seqLen), tgt: make([]int, batch*seqLen), pos: pos}
	if err := G.Let(g.IDs, tensor.New(tensor.WithShape(len(ru.ids)), tensor.WithBacking(ru.ids))); err != nil {
		return nil, err
	}
	if err := G.Let(g.Targets, tensor.New(tensor.WithShape(len(ru.tgt)), tensor.WithBacking(ru.tgt))); err != nil {
		return nil, err
	}
	if params != nil {
		wrt := make(G.Nodes, len(params))
		for i, p := range params {
			if wrt[i] = nodes[p.Name]; wrt[i] == nil {
				return nil, fmt.Errorf("internal: no graph node for trainable %s", p.Name)
			}
			wrt[i] = b.Leaf(wrt[i])
		}
		ru.lossGrad = lossGrad
		if ru.grads, err = G.Backpropagate(G.Nodes{g.Loss}, G.Nodes{ru.lossGrad}, wrt); err != nil {
			return nil, fmt.Errorf("differentiate the model: %w", err)
		}
		ru.sparse = make([]*rowGrad, len(params))
		for i, gn := range ru.grads {
			if rows, ok := b.RowSparse(gn); ok && !o.denseGrads {
				ru.sparse[i] = &rowGrad{rows: rows, width: gn.Shape()[1], listed: make([]bool, gn.Shape()[0])}
			}
		}
	}
	ru.tapped = b.GradTap != nil
	keep := append(G.Nodes{g.Loss, g.Logits, g.LogProbs}, ru.grads...)
	if o.gpu != nil {
		var opts []vkengine.CompileOption
		if params != nil && b.Policy != nil { // 16-bit gradients: count them as the CPU does (grad_underflow_frac)
			opts = append(opts, vkengine.CountUnderflows())
		}
		if o.memory != unplannedMemory {
			opts = append(opts, vkengine.PlanMemory(keep...))
			if o.memory == poisonedMemory {
				opts = append(opts, vkengine.PoisonMemory())
			}
		}
		return ru, ru.compileGPU(o.gpu, b, nodes, o.trained, o.share, opts...)
	}
	if o.memory != unplannedMemory {
		var opts []nn.PlanOption
		if o.memory == poisonedMemory {
			opts = append(opts, nn.PoisonBlocks())
		}
		if ru.memory, err = b.PlanMemory(slices.DeleteFunc(keep, func(n *G.Node) bool { return n == nil }), opts...); err != nil {
			return nil, err
		}
	}
	ru.vm = nn.NewTapeMachine(b.Eng, b.G)
	return ru, nil
}

// memoryMode is how a graph's op outputs get their memory.
type memoryMode uint8

const (
	plannedMemory   memoryMode = iota // shared where lifetimes allow (nn.Builder.PlanMemory)
	unplannedMemory                   // tests: every output its own, the reference for plannedMemory
	poisonedMemory                    // tests: planned, each output NaN-filled before it is written
)

// compileGPU compiles the runner's graph for the Vulkan engine. The
// weights go up now; the trained ones again whenever the engine's weights
// change (an optimizer step, a restored checkpoint).
func (ru *runner) compileGPU(g *gpuEngine, b *nn.Builder, nodes map[string]*G.Node, trained []string, share func(string) *vulkan.Buffer, opts ...vkengine.CompileOption) error {
	if ru.params != nil {
		trained = paramNames(ru.params)
	}
	for _, name := range trained {
		n := nodes[name]
		if n == nil {
			return fmt.Errorf("internal: no graph node for trained weight %s", name)
		}
		ru.vkSync = append(ru.vkSync, b.Leaf(n))
	}
	if share != nil {
		opts = append(opts, vkengine.Share(share))
	}
	p, err := g.eng.Compile(b.G, b.IsParam, opts...)
	if errors.Is(err, vkengine.ErrUnsupported) { // the recipe asks for what the engine lacks: bad input, exit 2
		return inputError(fmt.Errorf("compute.device: the Vulkan engine (%s) cannot run this model yet: %w; compute on the cpu (compute.device: cpu)", g.phys.Name, err))
	}
	if err != nil {
		return fmt.Errorf("compile the model for %s: %w", g.phys.Name, err)
	}
	ru.vk, ru.vkSeen = p, ru.eng.WeightsVersion()
	p.Transfers = vkengine.Transfers{} // count per step from here: the weights' upload is once
	for _, n := range ru.grads {
		ru.vkGrad = make([]float32, max(len(ru.vkGrad), n.Shape().TotalSize()))
		ru.vkGrads = append(ru.vkGrads, p.Buffer(n))
	}
	return nil
}

// runGPU is run on the Vulkan engine: the micro-batch goes up, the loss
// and the gradients come down.
func (ru *runner) runGPU(first bool, noise uint64) (float64, error) {
	if err := ru.syncWeights(); err != nil {
		return 0, err
	}
	if ru.devOpt != nil {
		err := ru.vk.RunWith(nn.Pass{Noise: noise}, func(r *vulkan.Recorder) error { return ru.devOpt.accumulate(r, ru.vkGrads, first) })
		if err != nil {
			return 0, err
		}
		return ru.readLoss()
	}
	if err := ru.vk.Run(nn.Pass{Noise: noise}); err != nil {
		return 0, err
	}
	for i, p := range ru.params {
		g := ru.vkGrad[:len(p.Grad)]
		if err := ru.vk.Read(ru.grads[i], g); err != nil {
			return 0, err
		}
		accumulate(p.Grad, g, first)
	}
	return ru.readLoss()
}

// syncWeights uploads the trained weights to the device when the host
// changed them since the last upload (a restored checkpoint).
func (ru *runner) syncWeights() error {
	if v := ru.eng.WeightsVersion(); v != ru.vkSeen {
		if err := ru.vk.SyncParams(ru.vkSync...); err != nil {
			return err
		}
		ru.vkSeen = v
	}
	return nil
}

func (ru *runner) readLoss() (float64, error) {
	var loss [1]float32
	if err := ru.vk.Read(ru.g.Loss, loss[:]); err != nil {
		return 0, err
	}
	return float64(loss[0]), nil
}

// run puts one micro-batch through the graph and returns its mean loss.
// With gradients, weight scales this micro-batch's contribution to the
// step and first says whether to overwrite or add into the param grads.
// noise keys random ops (dropout) for this micro-batch; 0 turns them off.
func (ru *runner) run(bt data.Batch, weight float32, first bool, noise uint64) (float64, error) {
	copy(ru.ids, bt.Inputs)
	copy(ru.tgt, bt.Targets)
	if bt.Positions != nil {
		copy(ru.pos, bt.Positions)
	} else {
		rowPositions(ru.pos, bt.SeqLen)
	}
	if ru.lossGrad != nil {
		if err := G.Let(ru.lossGrad, weight); err != nil {
			return 0, err
		}
	}
	if ru.vk != nil {
		return ru.runGPU(first, noise)
	}
	if err := ru.eng.Run(ru.vm, nn.Pass{Noise: noise}); err != nil {
		return 0, err
	}
	params := ru.params
	if ru.tapped {
		params = nil // the taps have put the gradients in
	}
	for i, p := range params {
		g := ru.grads[i].Value().Data().([]float32)
		if rg := ru.sparse[i]; rg != nil {
			rg.add(p.Grad, g, first)
			continue
		}
		accumulate(p.Grad, g, first)
	}
	return float64(ru.g.Loss.Value().Data().(float32)), nil
}

func (ru *runner) close() {
	for _, c := range ru.companions {
		if c != nil {
			c.close()
		}
	}
	if ru.vm != nil {
		ru.vm.Close()
	}
	if ru.vk != nil {
		ru.vk.Close()
	}
}

// accumulate puts a micro-batch's gradient g into a step's gradient dst:
// the step's first micro-batch overwrites it, the others add to it.
func accumulate(dst, g []float32, first bool) {
	if first {
		copy(dst, g)
		return
	}
	for j, v := range g {
		dst[j] += v
	}
}

// rowPositions fills pos with the positions of rows of seqLen tokens that
// each hold one document: 0, 1, …, seqLen−1 in every row. A batch without
// Positions has these.
func rowPositions(pos []int, seqLen int) {
	for i := range pos {
		pos[i] = i % seqLen
	}
}

// rowGrad adds a row-sparse gradient (an untied embedding table's, see
// nn.Builder.RowSparse) into its param's dense buffer, touching only the
// rows the micro-batch looked up, where a dense copy or sum would touch
// all V. It lists the rows it has written since the step's first
// micro-batch, the buffer's only nonzero rows, so that the next step
// clears those and not all V: between steps nothing else writes nonzero
// values into a gradient buffer (unscaling and clipping multiply it,
// which keeps zeros zero). The result is the dense sum's bit for bit:
// the rows left out would have added +0.
type rowGrad struct {
	rows    func() []int // the rows the last backward pass wrote
	width   int
	dirty   []int  // rows written since the buffer was last cleared
	listed  []bool // per row: in dirty
	cleared bool   // the whole buffer has been cleared once
}

func (r *rowGrad) add(dst, g []float32, first bool) {
	w := r.width
	if first {
		if !r.cleared {
			clear(dst)
			r.cleared = true
		}
		for _, id := range r.dirty {
			clear(dst[id*w : (id+1)*w])
			r.listed[id] = false
		}
		r.dirty = r.dirty[:0]
	}
	for _, id := range r.rows() {
		accumulate(dst[id*w:(id+1)*w], g[id*w:(id+1)*w], first)
		if !r.listed[id] {
			r.listed[id] = true
			r.dirty = append(r.dirty, id)
		}
	}
}

// noiseKey is the random-op key of one micro-batch: a pure function of
// the seed and the position, never 0 (which means evaluation).
func noiseKey(seed uint64, step, micro int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d", seed, step, micro)
	return h.Sum64() | 1
}
