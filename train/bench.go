package train

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/internal/sysinfo"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/peft"
)

// BenchConfig is the fixed benchmark model of the performance target:
// vocab 512, dim 256, 4 layers, 8 heads, FFN 688, seq 128, batch 8, LoRA
// r=8 on q,k,v,o, fp32, AdamW; the same as ../shared/bench/torch_peer.py.
type BenchConfig struct {
	Vocab, Dim, Layers, Heads, FFN, SeqLen, Batch, Rank int
	Adapter                                             AdapterKind // lora, or none (full fine-tuning)
	BaseDtype                                           amp.Format  // fp32, or bf16/fp16 to keep the frozen base in 16 bits
	Precision                                           amp.Format  // fp32, bf16 or fp16 (emulated)
	Steps, Warmup                                       int
	BLAS                                                blas.Kind
	Threads                                             int
	// Comm, with several ranks, splits each batch's rows among them and
	// sums the gradients (as training does; Overlap and BucketBytes as in
	// Options): the batch stays the global one.
	Comm        dist.Comm
	Overlap     bool
	BucketBytes int
}

// DefaultBench is the benchmark configuration.
func DefaultBench() BenchConfig {
	return BenchConfig{Vocab: 512, Dim: 256, Layers: 4, Heads: 8, FFN: 688, SeqLen: 128, Batch: 8, Rank: 8,
		Adapter: LoRA, BaseDtype: amp.FP32, Precision: amp.FP32, Steps: 10, Warmup: 2, BLAS: blas.KindAuto}
}

// BenchResult is one measurement.
type BenchResult struct {
	Backend      string      `json:"backend"`
	Adapter      AdapterKind `json:"adapter"`
	Precision    amp.Format  `json:"precision"`
	BaseDtype    amp.Format  `json:"base_dtype"`
	WeightBytes  int         `json:"base_weight_bytes"`
	TokensPerSec float64     `json:"tokens_per_s"`
	MsPerStep    float64     `json:"ms_per_step"`
	PeakRSS      uint64      `json:"peak_rss_bytes"`
	Params       int         `json:"params"`
	Trainable    int         `json:"trainable"`
	Loss         float64     `json:"loss"`
	// With several ranks: how many, and per step the time waiting for the
	// gradient sums after the backward pass, and their whole time.
	Ranks           int     `json:"ranks,omitempty"`
	AllreduceMs     float64 `json:"allreduce_ms,omitempty"`
	AllreduceBusyMs float64 `json:"allreduce_busy_ms,omitempty"`
}

// benchModel builds the benchmark's engine, random model and adapter.
func benchModel(c BenchConfig) (*nn.Engine, *model.Model, *peft.LoRA, error) {
	eng, err := openEngine(ComputeConfig{BLAS: c.BLAS, Threads: c.Threads})
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := model.New(model.Config{VocabSize: c.Vocab, HiddenSize: c.Dim, IntermediateSize: c.FFN,
		NumHiddenLayers: c.Layers, NumAttentionHeads: c.Heads, NumKeyValueHeads: c.Heads,
		MaxPositionEmbeddings: c.SeqLen, RMSNormEps: 1e-5, RopeTheta: 10000, BOSTokenID: 0, EOSTokenID: 1, PadTokenID: 2}, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	r := &Recipe{Config: Defaults()}
	r.Adapter.Type, r.Adapter.R, r.Adapter.Alpha = c.Adapter, c.Rank, float64(2*c.Rank)
	r.Adapter.TargetModules = []string{"q_proj", "k_proj", "v_proj", "o_proj"}
	lora, err := newAdapter(r, m)
	if err != nil {
		return nil, nil, nil, err
	}
	if c.BaseDtype != amp.FP32 {
		m.Compact(c.BaseDtype, func(string) bool { return true })
	}
	return eng, m, lora, nil
}

// Bench times full optimizer steps (forward, backward, AdamW) on random
// tokens, after Warmup untimed steps, like the PyTorch peer.
func Bench(c BenchConfig) (BenchResult, error) {
	eng, m, lora, err := benchModel(c)
	if err != nil {
		return BenchResult{}, err
	}
	policy := amp.DefaultPolicy(c.Precision)
	params := trainables(m, lora)
	opt, err := optim.NewAdamW(optim.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		return BenchResult{}, err
	}
	rows, weight := c.Batch, float32(1)
	var dp *dataParallel
	var tap nn.GradTap
	world := 1
	if c.Comm != nil && c.Comm.Size() > 1 {
		world = c.Comm.Size()
		dp = newDataParallel(c.Comm, c.Batch, c.SeqLen, 0, params, c.Overlap, c.BucketBytes)
		rows = dp.rows
		if c.Overlap {
			tap = dp.tap(paramIndex(params))
		}
	}
	ru, err := newTrainRunner(eng, m, lora, rows, c.SeqLen, params, &policy, tap, world)
	if err != nil {
		return BenchResult{}, err
	}
	defer ru.close()
	rng := rand.New(rand.NewPCG(1, 2))
	n := c.Batch * c.SeqLen
	bt := data.Batch{Rows: c.Batch, SeqLen: c.SeqLen, Inputs: make([]int, n), Targets: make([]int, n), NumTargets: n}
	for i := range bt.Inputs {
		bt.Inputs[i], bt.Targets[i] = rng.IntN(c.Vocab), rng.IntN(c.Vocab)
	}
	var comm commTimes
	if dp != nil { // this rank's rows, weighted by their share of the batch
		bt = dp.shard(bt)
		weight = float32(bt.NumTargets) / float32(n)
	}
	var loss float64
	step := func() error {
		if dp != nil {
			dp.beforeMicro(0, 1)
		}
		if loss, err = ru.run(bt, weight, true, 1); err != nil {
			return err
		}
		if dp != nil {
			sc := []float64{loss * float64(weight)}
			ct, err := dp.reduce(ru.tapped, sc)
			if err != nil {
				return err
			}
			loss = sc[0]
			comm.wait += ct.wait
			comm.busy += ct.busy
		}
		if err := opt.Step(params, 1e-3); err != nil {
			return err
		}
		eng.WeightVersion++
		return nil
	}
	for i := 0; i < c.Warmup; i++ {
		if err := step(); err != nil {
			return BenchResult{}, err
		}
	}
	comm = commTimes{}
	t0 := time.Now()
	for i := 0; i < c.Steps; i++ {
		if err := step(); err != nil {
			return BenchResult{}, err
		}
	}
	dt := time.Since(t0).Seconds() / float64(c.Steps)
	res := BenchResult{Backend: eng.BLAS.Name(), Adapter: c.Adapter, Precision: c.Precision, BaseDtype: c.BaseDtype,
		TokensPerSec: float64(n) / dt, MsPerStep: dt * 1e3, Params: m.NumParams(), WeightBytes: m.WeightBytes(), Loss: loss}
	for _, p := range params {
		res.Trainable += len(p.Value)
	}
	if dp != nil {
		res.Ranks = dp.size
		res.AllreduceMs = comm.wait.Seconds() * 1e3 / float64(c.Steps)
		res.AllreduceBusyMs = comm.busy.Seconds() * 1e3 / float64(c.Steps)
	}
	if lora != nil {
		res.Params += lora.NumParams()
	}
	res.PeakRSS, _ = sysinfo.PeakRSS()
	if dt <= 0 {
		return res, fmt.Errorf("no time measured")
	}
	return res, nil
}
