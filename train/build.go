package train

import (
	"fmt"
	"hash/fnv"
	"runtime"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/peft"
)

// Small functions that build each component from the recipe.

// openEngine picks the matmul backend and the kernels' thread count.
func openEngine(c ComputeConfig) (*nn.Engine, error) {
	threads := c.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	be, err := blas.Open(c.BLAS, threads)
	if err != nil {
		return nil, err
	}
	return &nn.Engine{BLAS: be, Workers: threads}, nil
}

// loadModel loads the pretrained base or initializes a random one, and
// keeps the frozen base matrices in 16 bits if base_dtype says so.
func loadModel(r *Recipe) (*model.Model, error) {
	var m *model.Model
	var err error
	if r.Model.Init == "random" {
		m, err = model.New(r.Base, r.Seed)
	} else {
		m, err = model.Load(r.Model.Path)
	}
	if err != nil {
		return nil, err
	}
	if f, _ := amp.ParseFormat(r.Model.BaseDtype); f != amp.FP32 {
		m.Compact(f, func(string) bool { return true }) // validated: an adapter run, the base is frozen
	}
	return m, nil
}

// datasets tokenizes the training rows and the validation rows (a file,
// or a seeded split of the training rows).
func datasets(r *Recipe, tok data.Tokenizer) (trainEx, valEx []data.Example, err error) {
	trainEx, err = data.LoadJSONL(r.Data.Train, tok)
	if err != nil {
		return nil, nil, err
	}
	if r.Data.Validation != "" {
		valEx, err = data.LoadJSONL(r.Data.Validation, tok)
		return trainEx, valEx, err
	}
	if r.Data.ValidationSplit == 0 {
		return trainEx, nil, nil
	}
	return data.Split(trainEx, r.Data.ValidationSplit, r.Seed)
}

func newLoader(ex []data.Example, seqLen, batch int, mode string, shuffle bool, seed uint64, tok data.Tokenizer) (*data.Loader, error) {
	md, err := data.ParseMode(mode)
	if err != nil {
		return nil, err
	}
	return data.NewLoader(ex, data.LoaderConfig{SeqLen: seqLen, BatchSize: batch,
		Mode: md, Shuffle: shuffle, Seed: seed, PadID: tok.PAD()})
}

func newOptimizer(c OptimizerConfig) (optim.Optimizer, error) {
	if c.Name == "sgd" {
		return optim.NewSGD(optim.SGDConfig{Momentum: c.Momentum, WeightDecay: c.WeightDecay, Nesterov: c.Nesterov})
	}
	return optim.NewAdamW(optim.AdamWConfig{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay})
}

func newSchedule(r *Recipe) optim.Schedule {
	return optim.Schedule{Kind: r.Schedule.Kind, Peak: r.Optimizer.LR, Min: r.Schedule.MinLR,
		Warmup: r.Schedule.WarmupSteps, Total: r.Train.Steps}
}

// runner owns one compiled graph of fixed batch shape: a training graph
// (forward and backward) or an evaluation graph (forward only). The model
// and adapter weights are shared with the optimizer, not copied, so an
// optimizer step is seen by the next run.
type runner struct {
	eng      *nn.Engine
	g        *model.Graph
	vm       G.VM
	ids, tgt []int   // the input tensors' backing arrays, refilled per batch
	lossGrad *G.Node // d(step loss)/d(this micro-batch's loss): its share of the step's targets
	grads    G.Nodes // aligned with params
	params   []*optim.Param
}

// newRunner builds and compiles the graph. With params, it also takes the
// gradient of the loss with respect to each of them.
func newRunner(eng *nn.Engine, m *model.Model, l *peft.LoRA, batch, seqLen int, params []*optim.Param, policy *amp.Policy) (*runner, error) {
	b := nn.NewBuilder(eng, tensor.Float32)
	if policy != nil && policy.Low != amp.FP32 {
		b.Policy = policy
	}
	nodes := map[string]*G.Node{}
	gc := model.GraphConfig{Batch: batch, SeqLen: seqLen}
	if l != nil {
		gc.Linear = l.Linear(nodes)
	} else if params != nil {
		gc.Trainable = func(string) bool { return true }
	}
	g, err := m.Build(b, gc)
	if err != nil {
		return nil, err
	}
	for name, n := range g.Params {
		nodes[name] = n
	}
	ru := &runner{eng: eng, g: g, params: params, ids: make([]int, batch*seqLen), tgt: make([]int, batch*seqLen)}
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
		}
		ru.lossGrad = G.NewScalar(b.G, tensor.Float32, G.WithName("loss_grad"))
		if ru.grads, err = G.Backpropagate(G.Nodes{g.Loss}, G.Nodes{ru.lossGrad}, wrt); err != nil {
			return nil, fmt.Errorf("differentiate the model: %w", err)
		}
	}
	ru.vm = G.NewTapeMachine(b.G)
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
	if ru.lossGrad != nil {
		if err := G.Let(ru.lossGrad, weight); err != nil {
			return 0, err
		}
	}
	ru.vm.Reset()
	if err := ru.vm.RunAll(); err != nil {
		return 0, err
	}
	for i, p := range ru.params {
		g := ru.grads[i].Value().Data().([]float32)
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

// noiseKey is the random-op key of one micro-batch: a pure function of
// the seed and the position, never 0 (which means evaluation).
func noiseKey(seed uint64, step, micro int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d", seed, step, micro)
	return h.Sum64() | 1
}
