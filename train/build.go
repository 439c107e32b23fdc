package train

import (
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/dist"
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
	lora        *peft.LoRA // nil for full fine-tuning
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
	comm        dist.Comm     // the processes training together; a Single for one
	dp          *dataParallel // nil for one process
}

// build makes the run's components. Every input is read and checked here
// (datasets, the task file, the model, a from: adapter), and the run's
// memory estimated against the machine's, so that bad input is reported
// before a run directory exists.
func build(r *Recipe, choice *DeviceChoice, opt Options) (*components, error) {
	c := &components{device: choice, format: r.text.Format, stop: r.text.Stop, comm: opt.Comm}
	if c.comm == nil {
		c.comm = dist.NewSingle()
	}
	c.tok = c.format.Tok
	sel := choice.Selection
	c.policy = r.policyFor(sel.Precision)
	var err error
	if c.eng, err = openEngine(rankCompute(r.Compute, c.comm)); err != nil {
		return nil, err
	}
	if have, ok := sysinfo.TotalMemory(); ok {
		if err := checkDataMemory(r, have); err != nil {
			return nil, err
		}
	}
	c.rows = &rowReader{cache: r.Data.Cache, out: opt.Out, progress: opt.Progress}
	trainEx, valEx, err := datasets(r, c.format, c.rows)
	if err != nil {
		return nil, inputError(err)
	}
	c.valExamples = len(valEx)
	if r.Task.EvalFile != "" {
		if c.task, err = loadTask(r.Task.EvalFile, c.format, r.Task.Limit); err != nil {
			return nil, inputError(err)
		}
	}
	if err := c.loaders(r, trainEx, valEx); err != nil {
		return nil, err
	}
	if err := checkMemory(r, rowsPerRank(c.batch, c.comm)); err != nil {
		return nil, err
	}
	if c.model, err = loadModel(r); err != nil {
		return nil, inputError(err)
	}
	if c.lora, err = newAdapter(r, c.model); err != nil {
		return nil, inputError(err)
	}
	c.params = trainables(c.model, c.lora)
	if c.optimizer, err = newOptimizer(r.Optimizer); err != nil {
		return nil, err
	}
	c.schedule = r.schedule()
	if sel.LossScaling {
		if c.scaler, err = amp.NewLossScaler(r.scalerConfig()); err != nil {
			return nil, err
		}
	}
	rows := c.batch
	var tap nn.GradTap
	if c.comm.Size() > 1 { // data parallel: this rank's rows of every micro-batch (parallel.go)
		c.dp = newDataParallel(c.comm, c.batch, r.Data.SeqLen, c.tok.PAD(), c.params, opt.Overlap, opt.BucketBytes)
		rows = c.dp.rows
		c.eng.NoiseRowOffset = c.dp.lo * r.Data.SeqLen
		if opt.Overlap {
			tap = c.dp.tap(paramIndex(c.params))
		}
	}
	ckpt := r.Compute.ActivationCheckpointing
	if c.trainer, err = buildRunner(c.eng, c.model, c.lora, rows, r.Data.SeqLen, c.params, &c.policy, trainGraph(tap, c.comm.Size(), ckpt)); err != nil {
		return nil, err
	}
	if len(c.valBatches) > 0 {
		if c.evaluator, err = buildRunner(c.eng, c.model, c.lora, rows, r.Data.SeqLen, nil, &c.policy, graphOptions{checkpoint: ckpt, evalOfFullFineTune: c.lora == nil}); err != nil {
			c.close()
			return nil, err
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
}

// checkMemory refuses a run whose estimated peak memory exceeds what the
// machine (or its container) has, rather than letting the kernel kill it,
// or the Go runtime crash, mid-run.
func checkMemory(r *Recipe, batch int) error {
	held, _ := dataMemory(r.dataFileBytes(), r.text.Format.MaxRow(), runtime.GOMAXPROCS(0))
	need := r.estimateMemory(batch) + held
	have, ok := sysinfo.TotalMemory()
	if !ok || need <= have {
		return nil
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

// openEngine picks the matmul backend and the kernels' thread count.
func openEngine(c ComputeConfig) (*nn.Engine, error) {
	threads := c.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	be, err := blas.Open(string(c.BLAS), threads)
	if err != nil {
		return nil, err
	}
	return &nn.Engine{BLAS: be, Workers: threads}, nil
}

// loadModel loads the pretrained base or initializes a random one, and
// keeps the frozen base matrices in 16 bits if base_dtype says so.
func loadModel(r *Recipe) (*model.Model, error) {
	// validated: a 16-bit base_dtype is an adapter run's, whose base is frozen
	if r.Model.Init == InitRandom {
		return model.NewAs(r.Base, r.Seed, r.Model.BaseDtype)
	}
	return model.LoadAs(r.Model.Path, r.Model.BaseDtype)
}

// datasets tokenizes the training rows and the validation rows (a file,
// or a seeded split of the training rows).
func datasets(r *Recipe, f data.Format, rd *rowReader) (trainEx, valEx []data.Example, err error) {
	trainEx, err = rd.load(r.Data.Train, f)
	if err != nil {
		return nil, nil, err
	}
	if r.Data.Validation != "" {
		valEx, err = rd.load(r.Data.Validation, f)
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
}

// Sizes above which a file's tokens are cached, and a progress bar shown:
// smaller files tokenize in well under a second.
const (
	cacheMinBytes    = 1 << 20
	progressMinBytes = 8 << 20
)

func (rd *rowReader) load(path string, f data.Format) ([]data.Example, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var opt data.LoadOptions
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
		return data.Load(path, f, opt)
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return data.Load(path, f, opt)
	}
	ex, hit, err := data.Cache{Dir: filepath.Join(dir, "mixtune", "tokens")}.Load(path, f, opt)
	if hit {
		rd.hits = append(rd.hits, path)
	}
	return ex, err
}

func newLoader(ex []data.Example, d DataConfig, batch int, shuffle bool, seed uint64, tok data.Tokenizer) (*data.Loader, error) {
	return data.NewLoader(ex, data.LoaderConfig{SeqLen: d.SeqLen, BatchSize: batch,
		Mode: d.Mode, Shuffle: shuffle, Seed: seed, PadID: tok.PAD()})
}

func newOptimizer(c OptimizerConfig) (optim.Optimizer, error) {
	if c.Name == SGD {
		return optim.NewSGD(optim.SGDConfig{Momentum: c.Momentum, WeightDecay: c.WeightDecay, Nesterov: c.Nesterov})
	}
	return optim.NewAdamW(optim.AdamWConfig{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay})
}

// runner owns one compiled graph of fixed batch shape: a training graph
// (forward and backward) or an evaluation graph (forward only). The model
// and adapter weights are shared with the optimizer, not copied, so an
// optimizer step is seen by the next run.
type runner struct {
	eng      *nn.Engine
	g        *model.Graph
	vm       G.VM
	ids, tgt []int      // the input tensors' backing arrays, refilled per batch
	pos      []int      // each token's position in its document, refilled per batch
	lossGrad *G.Node    // d(step loss)/d(this micro-batch's loss): its share of the step's targets
	grads    G.Nodes    // aligned with params
	sparse   []*rowGrad // aligned with params: non-nil for a gradient kept row by row
	params   []*optim.Param
	tapped   bool // gradient taps move the gradients into params, not run
}

// graphOptions are the runner's ways of computing that tests compare with
// the references they replace; the zero value is what training uses.
type graphOptions struct {
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
}

// newRunner builds and compiles the graph. With params, it also takes the
// gradient of the loss with respect to each of them.
func newRunner(eng *nn.Engine, m *model.Model, l *peft.LoRA, batch, seqLen int, params []*optim.Param, policy *amp.Policy) (*runner, error) {
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

func buildRunner(eng *nn.Engine, m *model.Model, l *peft.LoRA, batch, seqLen int, params []*optim.Param, policy *amp.Policy, o graphOptions) (*runner, error) {
	b := nn.NewBuilder(eng, tensor.Float32)
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
		CheckpointLayers: o.checkpoint}
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
	ru.vm = G.NewTapeMachine(b.G)
	ru.tapped = b.GradTap != nil
	return ru, nil
}

// run puts one micro-batch through the graph and returns its mean loss.
// With gradients, weight scales this micro-batch's contribution to the
// step and first says whether to overwrite or add into the param grads.
// noise keys random ops (dropout) for this micro-batch; 0 turns them off.
func (ru *runner) run(bt data.Batch, weight float32, first bool, noise uint64) (float64, error) {
	ru.eng.NoiseKey = noise
	copy(ru.ids, bt.Inputs)
	copy(ru.tgt, bt.Targets)
	if bt.Positions != nil {
		copy(ru.pos, bt.Positions)
	} else { // one document per row
		for i := range ru.pos {
			ru.pos[i] = i % bt.SeqLen
		}
	}
	if ru.lossGrad != nil {
		if err := G.Let(ru.lossGrad, weight); err != nil {
			return 0, err
		}
	}
	ru.vm.Reset()
	if err := ru.vm.RunAll(); err != nil {
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
		if first {
			copy(p.Grad, g)
		} else {
			for j, v := range g {
				p.Grad[j] += v
			}
		}
	}
	return float64(ru.g.Loss.Value().Data().(float32)), nil
}

func (ru *runner) close() { ru.vm.Close() }

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
		d, s := dst[id*w:(id+1)*w], g[id*w:(id+1)*w]
		if first {
			copy(d, s)
		} else {
			for j, v := range s {
				d[j] += v
			}
		}
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
