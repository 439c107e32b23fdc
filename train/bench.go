package train

import (
	"cmp"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/pprof"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/internal/cpufeat"
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
	KVHeads                                             int                // key/value heads (grouped-query attention); 0: Heads
	Checkpoint                                          bool               // activation checkpointing per decoder layer
	Adapter                                             AdapterKind        // lora, dora, or none (full fine-tuning)
	BaseDtype                                           amp.Format         // fp32, or bf16/fp16 to keep the frozen base in 16 bits
	Quantize                                            model.Quantization // a 4-bit base's projections (QLoRA); Type 0: none
	Precision                                           amp.Format         // fp32, bf16 or fp16 (emulated)
	BF16Matmul                                          amp.BF16Matmul     // where bf16 products run: auto, emulate or hardware
	Steps, Warmup                                       int
	BLAS                                                blas.Kind
	// VulkanDevice, when set, trains on the Vulkan engine on that device
	// (an index, UUID or PCI bus id, as compute.vulkan_device), with the
	// optimizer there too; "" computes on the CPU.
	VulkanDevice string
	// ScalarGEMM keeps the Vulkan engine off the tensor cores
	// (compute.scalar_gemm).
	ScalarGEMM bool
	// NoSplitK keeps the Vulkan engine's products in one pass over K
	// (compute.no_split_k).
	NoSplitK bool
	// Narrow16 narrows the 16-bit products' fp32 operands first
	// (ComputeConfig.Narrow16).
	Narrow16 bool
	// NoRecordAhead records each run in one command buffer
	// (ComputeConfig.NoRecordAhead).
	NoRecordAhead bool
	// SplitDKV runs attention's dK/dV kernel as two
	// (ComputeConfig.SplitDKV).
	SplitDKV SplitDKV
	// GemmTile picks the Vulkan engine's tensor-core tile
	// (compute.gemm_tile).
	GemmTile string
	Threads  int
	// Comm, with several ranks, splits each batch's rows among them and
	// sums the gradients (as training does; Overlap and BucketBytes as in
	// Options): the batch stays the global one.
	Comm        dist.Comm
	Overlap     bool
	BucketBytes int
	// Profile times every command of the timed steps with GPU timestamps
	// (the Vulkan engine only) and reports the time by kernel and op kind.
	Profile bool
	// CPUProfile, when not nil, receives a Go CPU profile (runtime/pprof)
	// of the timed steps alone: no setup, warm-up or backend measurement.
	CPUProfile io.Writer
}

// DefaultBench is the benchmark configuration.
func DefaultBench() BenchConfig {
	return BenchConfig{Vocab: 512, Dim: 256, Layers: 4, Heads: 8, FFN: 688, SeqLen: 128, Batch: 8, Rank: 8,
		Adapter: LoRA, BaseDtype: amp.FP32, Precision: amp.FP32, Steps: 10, Warmup: 2, BLAS: blas.KindAuto}
}

// BenchResult is one measurement.
type BenchResult struct {
	Backend string `json:"backend"`
	Engine  string `json:"engine"` // cpu, or the Vulkan device
	// GemmTile is the tensor-core tile of the Vulkan engine's 16-bit
	// products and GemmTileReason why (compute.gemm_tile, auto's timing).
	GemmTile       string `json:"gemm_tile,omitempty"`
	GemmTileReason string `json:"gemm_tile_reason,omitempty"`
	// SplitDKVReason says how attention's dK/dV kernel runs where auto
	// timed it (compute.split_dkv).
	SplitDKVReason string      `json:"split_dkv_reason,omitempty"`
	Warnings       []string    `json:"warnings,omitempty"`
	Adapter        AdapterKind `json:"adapter"`
	Precision      amp.Format  `json:"precision"`
	BF16Matmul     string      `json:"bf16_matmul,omitempty"` // emulate or hardware: where the bf16 products ran
	BF16Kernel     string      `json:"bf16_kernel,omitempty"` // why, and which bf16 GEMM
	BaseDtype      amp.Format  `json:"base_dtype"`
	Quantize       string      `json:"quantize,omitempty"` // nf4 or fp4: a 4-bit base
	WeightBytes    int         `json:"base_weight_bytes"`
	TokensPerSec   float64     `json:"tokens_per_s"`
	MsPerStep      float64     `json:"ms_per_step"`
	PeakRSS        uint64      `json:"peak_rss_bytes"`
	DevicePeak     uint64      `json:"device_peak_bytes,omitempty"` // the Vulkan device's buffers at most (vulkan.Device.MemoryUse)
	Params         int         `json:"params"`
	Trainable      int         `json:"trainable"`
	Loss           float64     `json:"loss"`
	// With several ranks: how many, and per step the time waiting for the
	// gradient sums after the backward pass, and their whole time.
	Ranks           int     `json:"ranks,omitempty"`
	AllreduceMs     float64 `json:"allreduce_ms,omitempty"`
	AllreduceBusyMs float64 `json:"allreduce_busy_ms,omitempty"`
	// With Profile: per timed step, the batches' command-buffer GPU time,
	// how many batches, the time of their commands summed (the rest is
	// barriers and gaps between commands), and the time by kernel and op
	// kind, the longest first.
	GPUMsPerStep     float64      `json:"gpu_ms_per_step,omitempty"`
	SubmitsPerStep   float64      `json:"submits_per_step,omitempty"`
	CommandMsPerStep float64      `json:"command_ms_per_step,omitempty"`
	Profile          []KernelTime `json:"profile,omitempty"`
}

// KernelTime is one kernel run for one op kind in a profiled benchmark,
// per timed step.
type KernelTime struct {
	Kernel string  `json:"kernel"`         // the shader
	Kind   string  `json:"kind,omitempty"` // the graph op kind that lowered it, or the optimizer's phase
	Calls  float64 `json:"calls_per_step"`
	Ms     float64 `json:"ms_per_step"`
	// Share is the fraction of the step's command-buffer GPU time.
	Share float64 `json:"share"`
	// GFlops is the floating-point operations per step, in 1e9 (GEMMs:
	// 2·M·N·K a call), and TFlopsPerSec their rate over Ms.
	GFlops       float64 `json:"gflop_per_step,omitempty"`
	TFlopsPerSec float64 `json:"tflop_per_s,omitempty"`
	// SlowestNode is the graph node (its name) whose call took longest, and SlowestMs that call's time.
	SlowestNode string  `json:"slowest_node,omitempty"`
	SlowestMs   float64 `json:"slowest_ms,omitempty"`
}

// kernelTimes are p's rows per step of steps.
func kernelTimes(p *vulkan.Profile, steps int) []KernelTime {
	perStep := 1 / float64(steps)
	var rows []KernelTime
	for _, r := range p.Rows() {
		k := KernelTime{Kernel: r.Kernel, Kind: r.Kind, Calls: float64(r.Calls) * perStep, Ms: r.Nanos * 1e-6 * perStep,
			GFlops: r.Flops * 1e-9 * perStep, SlowestNode: r.SlowestNode, SlowestMs: r.SlowestNanos * 1e-6}
		if p.GPUNanos > 0 {
			k.Share = r.Nanos / p.GPUNanos
		}
		if r.Flops > 0 && r.Nanos > 0 {
			k.TFlopsPerSec = r.Flops / r.Nanos * 1e-3
		}
		rows = append(rows, k)
	}
	return rows
}

// benchModel builds the benchmark's engine, random model and adapter.
func benchModel(c BenchConfig) (*nn.Engine, *model.Model, *peft.Adapter, error) {
	eng, _, err := openEngine(ComputeConfig{BLAS: c.BLAS, Threads: c.Threads})
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := model.NewQuantized(model.Config{VocabSize: c.Vocab, HiddenSize: c.Dim, IntermediateSize: c.FFN,
		NumHiddenLayers: c.Layers, NumAttentionHeads: c.Heads, NumKeyValueHeads: cmp.Or(c.KVHeads, c.Heads),
		MaxPositionEmbeddings: c.SeqLen, RMSNormEps: 1e-5, RopeTheta: 10000, BOSTokenID: 0, EOSTokenID: 1, PadTokenID: 2}, 0, c.BaseDtype, c.Quantize)
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
	return eng, m, lora, nil
}

// Bench times full optimizer steps (forward, backward, AdamW) on random
// tokens, after Warmup untimed steps, like the PyTorch peer.
func Bench(c BenchConfig) (BenchResult, error) {
	b, err := newBenchRun(c, plannedMemory)
	if err != nil {
		return BenchResult{}, err
	}
	defer b.close()
	for i := 0; i < c.Warmup; i++ {
		if err := b.step(); err != nil {
			return BenchResult{}, err
		}
	}
	b.comm = commTimes{}
	var prof *vulkan.Profile
	if c.Profile {
		if b.gpu == nil {
			return BenchResult{}, fmt.Errorf("bench: the profile times the Vulkan engine's GPU kernels; give a Vulkan device")
		}
		prof = &vulkan.Profile{}
		if err := b.gpu.eng.Time(prof.Add); err != nil {
			return BenchResult{}, fmt.Errorf("bench: profile on %s: %w", b.gpu.phys.Name, err)
		}
	}
	if c.CPUProfile != nil {
		if err := pprof.StartCPUProfile(c.CPUProfile); err != nil {
			return BenchResult{}, fmt.Errorf("bench: CPU profile: %w", err)
		}
	}
	t0 := time.Now()
	for i := 0; i < c.Steps; i++ {
		if err := b.step(); err != nil {
			if c.CPUProfile != nil {
				pprof.StopCPUProfile()
			}
			return BenchResult{}, err
		}
	}
	dt := time.Since(t0).Seconds() / float64(c.Steps)
	if c.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	res := b.result(dt)
	if prof != nil {
		if err := b.gpu.eng.Time(nil); err != nil {
			return res, err
		}
		steps := float64(c.Steps)
		res.GPUMsPerStep, res.CommandMsPerStep = prof.GPUNanos*1e-6/steps, prof.CommandNanos*1e-6/steps
		res.SubmitsPerStep = float64(prof.Batches) / steps
		res.Profile = kernelTimes(prof, c.Steps)
	}
	if dt <= 0 {
		return res, fmt.Errorf("no time measured")
	}
	return res, nil
}

// benchRun is one benchmark: the model, its runner and optimizer, and the
// fixed random batch every step trains on.
type benchRun struct {
	c      BenchConfig
	eng    *nn.Engine
	m      *model.Model
	lora   *peft.Adapter
	params []*optim.Param
	opt    optim.Optimizer
	ru     *runner
	dp     *dataParallel    // this rank's part: all of the batch for one process
	bt     data.Batch       // this rank's rows
	weight float32          // their share of the batch's targets
	loss   float64          // the last step's
	comm   commTimes        // gradient sums since the timing started
	bf16   bf16Decision     // where the bf16 products run
	gpu    *gpuEngine       // the Vulkan engine, or nil
	devOpt *deviceOptimizer // AdamW on it
	// warnings are problems that did not stop the run (the GEMM tile's
	// timing)
	warnings []string
}

// close frees the run's graphs and device.
func (b *benchRun) close() {
	b.ru.close()
	if b.devOpt != nil {
		b.devOpt.close()
	}
	b.gpu.close()
}

func newBenchRun(c BenchConfig, mem memoryMode) (*benchRun, error) {
	eng, m, lora, err := benchModel(c)
	if err != nil {
		return nil, err
	}
	f := cpufeat.Detect()
	d, err := decideBF16(c.BF16Matmul, c.Precision, f, func() ([]blas.BF16Choice, error) { return blas.BF16Candidates(eng.BLAS, f, eng.Workers) }, measureBF16(eng), blas.CheckBF16)
	if err != nil {
		return nil, err
	}
	eng.BF16 = d.gemmer
	b := &benchRun{c: c, eng: eng, m: m, lora: lora, params: trainables(m, lora), weight: 1, bf16: d}
	opt, err := optim.NewAdamW(optim.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		return nil, err
	}
	b.opt = engineOptimizer{opt, eng}
	comm := c.Comm
	if comm == nil {
		comm = dist.NewSingle()
	}
	b.dp = newDataParallel(comm, c.Batch, c.SeqLen, 0, b.params, c.Overlap, c.BucketBytes)
	var tap nn.GradTap
	if b.dp.overlap {
		tap = b.dp.tap(paramIndex(b.params))
	}
	policy := amp.DefaultPolicy(c.Precision)
	tg := trainGraph(tap, b.dp.size, c.Checkpoint)
	tg.memory = mem
	if c.VulkanDevice != "" {
		if b.dp.size > 1 {
			return nil, fmt.Errorf("bench on the Vulkan engine: one process")
		}
		if b.gpu, _, err = openGPU(ComputeConfig{Device: ComputeGPU, VulkanDevice: c.VulkanDevice, ScalarGEMM: c.ScalarGEMM, NoSplitK: c.NoSplitK, Narrow16: c.Narrow16, NoRecordAhead: c.NoRecordAhead, SplitDKV: c.SplitDKV, GemmTile: c.GemmTile}, device.Selection{}, c.Precision); err != nil {
			return nil, err
		}
		tg.gpu = b.gpu
	}
	if b.ru, err = buildRunner(eng, m, lora, b.dp.rows, c.SeqLen, b.params, &policy, tg); err != nil {
		b.gpu.close()
		return nil, err
	}
	if b.gpu != nil {
		oc := OptimizerConfig{Name: AdamW, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
		if b.devOpt, err = newDeviceOptimizer(b.gpu, oc, b.params, b.ru.vk.Param); err != nil {
			b.ru.close()
			b.gpu.close()
			return nil, err
		}
		b.ru.devOpt = b.devOpt
		warnings, err := b.gpu.settleTile(c.GemmTile, c.Precision, b.ru.vk.Products(), "", nil)
		if err != nil {
			b.ru.close()
			b.gpu.close()
			return nil, err
		}
		b.warnings = append(b.warnings, warnings...)
		b.warnings = append(b.warnings, b.gpu.settleSplit(c.SplitDKV, c.Precision, b.ru.vk.Attentions())...)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	n := c.Batch * c.SeqLen
	b.bt = data.Batch{Rows: c.Batch, SeqLen: c.SeqLen, Inputs: make([]int, n), Targets: make([]int, n), NumTargets: n}
	for i := range b.bt.Inputs {
		b.bt.Inputs[i], b.bt.Targets[i] = rng.IntN(c.Vocab), rng.IntN(c.Vocab)
	}
	b.bt = b.dp.shard(b.bt) // this rank's rows, weighted by their share of the batch
	b.weight = float32(b.bt.NumTargets) / float32(n)
	return b, nil
}

// step is one optimizer step on the batch (with the ranks' gradient sums).
func (b *benchRun) step() error {
	b.dp.beforeMicro(0, 1)
	loss, err := b.ru.run(b.bt, b.weight, true, 1)
	if err != nil {
		return err
	}
	sc := []float64{loss * float64(b.weight)}
	ct, err := b.dp.reduce(b.ru.tapped, sc)
	if err != nil {
		return err
	}
	b.loss = sc[0]
	if ct != nil {
		b.comm.wait += ct.wait
		b.comm.busy += ct.busy
	}
	if b.devOpt != nil { // unclipped, unscaled: the CPU step's work
		_, err := b.devOpt.apply(nil, 0, 1e-3, true, true)
		return err
	}
	return b.opt.Step(b.params, 1e-3)
}

// result reports a timing of dt seconds per step.
func (b *benchRun) result(dt float64) BenchResult {
	c, n := b.c, b.c.Batch*b.c.SeqLen
	engine := "cpu"
	var tile, tileReason, splitReason string
	if b.gpu != nil {
		engine = "vulkan: " + b.gpu.describe()
		tile, tileReason, splitReason = b.gpu.tile, b.gpu.tileReason, b.gpu.splitReason
	}
	res := BenchResult{Backend: b.eng.BLAS.Name(), Engine: engine, GemmTile: tile, GemmTileReason: tileReason, SplitDKVReason: splitReason, Warnings: b.warnings, Adapter: c.Adapter, Precision: c.Precision, BF16Matmul: b.bf16.path, BF16Kernel: b.bf16.reason, BaseDtype: c.BaseDtype,
		TokensPerSec: float64(n) / dt, MsPerStep: dt * 1e3, Params: b.m.NumParams(), WeightBytes: b.m.WeightBytes(), Loss: b.loss}
	if c.Quantize.Type != 0 {
		res.Quantize = c.Quantize.Type.String()
	}
	for _, p := range b.params {
		res.Trainable += len(p.Value)
	}
	if b.dp.size > 1 {
		res.Ranks = b.dp.size
		res.AllreduceMs = b.comm.wait.Seconds() * 1e3 / float64(c.Steps)
		res.AllreduceBusyMs = b.comm.busy.Seconds() * 1e3 / float64(c.Steps)
	}
	if b.lora != nil {
		res.Params += b.lora.NumParams()
	}
	res.PeakRSS, _ = sysinfo.PeakRSS()
	if b.gpu != nil {
		_, res.DevicePeak = b.gpu.dev.MemoryUse()
	}
	return res
}
