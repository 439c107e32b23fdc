package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/quant"
	"github.com/mixtune/mixtune/train"
)

func cmdEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", "eval --model DIR [--adapter DIR] --data FILE [--vulkan-device D] [--json]", stderr)
	var c train.EvalConfig
	fs.StringVar(&c.Model, "model", "", "base model directory (HF layout)")
	fs.StringVar(&c.Adapter, "adapter", "", "PEFT LoRA adapter directory (optional)")
	fs.StringVar(&c.Data, "data", "", "JSONL or Parquet file: text, prompt/completion or input_ids rows")
	fs.IntVar(&c.SeqLen, "seq-len", 128, "sequence length (use the recipe's data.seq_len to match its validation)")
	fs.IntVar(&c.BatchSize, "batch-size", 8, "rows per batch (the recipe's train.batch_size)")
	fs.TextVar(&c.Mode, "mode", data.Pad, "pad (one row per example) or pack (the recipe's data.mode)")
	textFlags(fs, &c.Text)
	fs.TextVar(&c.Text.LossOn, "loss-on", data.LossAssistant, "conversations: assistant, last_turn or all (the recipe's data.loss_on)")
	fs.TextVar(&c.BLAS, "blas", blas.KindAuto, "matmul backend: auto, openblas, onednn, native or gonum")
	fs.StringVar(&c.VulkanDevice, "vulkan-device", "", "compute on the Vulkan engine on this device (an index, UUID or PCI bus id; see vkprobe)")
	asJSON := fs.Bool("json", false, "print a JSON object instead of text")
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.Model == "" || c.Data == "" {
		return usageError{"--model and --data are required"}
	}
	if c.SeqLen < 1 || c.BatchSize < 1 {
		return usageError{"--seq-len and --batch-size must be positive"}
	}
	rep, err := train.Eval(c)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	fmt.Fprintf(stdout, "loss %.6f per token · perplexity %.4f · %d target tokens in %d batches\n", rep.Loss, rep.Perplexity, rep.Tokens, rep.Batches)
	return nil
}

func cmdGenerate(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("generate", "generate --model DIR [--adapter DIR] --prompt TEXT [--vulkan-device D]", stderr)
	var c train.GenerateConfig
	fs.StringVar(&c.Model, "model", "", "base model directory (HF layout)")
	fs.StringVar(&c.Adapter, "adapter", "", "PEFT LoRA adapter directory (optional)")
	fs.StringVar(&c.Prompt, "prompt", "", "text to continue (with --chat: the user's message)")
	fs.BoolVar(&c.Chat, "chat", false, "send the prompt as a user turn through the chat template, with the generation prompt")
	fs.StringVar(&c.System, "system", "", "with --chat: a system message first")
	textFlags(fs, &c.Text)
	fs.IntVar(&c.MaxNewTokens, "max-new-tokens", 64, "stop after this many tokens (or at end of sequence)")
	fs.Float64Var(&c.Sampling.Temperature, "temperature", 0, "0: greedy; otherwise sample from softmax(logits/temperature)")
	fs.IntVar(&c.Sampling.TopK, "top-k", 0, "sample among the k most likely tokens (0: all)")
	fs.Uint64Var(&c.Sampling.Seed, "seed", 0, "sampling seed")
	fs.TextVar(&c.BLAS, "blas", blas.KindAuto, "matmul backend: auto, openblas, onednn, native or gonum")
	fs.StringVar(&c.VulkanDevice, "vulkan-device", "", "decode on the Vulkan engine on this device (an index, UUID or PCI bus id; see vkprobe), the key/value cache there too")
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.Model == "" || c.Prompt == "" {
		return usageError{"--model and --prompt are required"}
	}
	if t := c.Sampling.Temperature; !(t >= 0) || math.IsInf(t, 0) { // !(t >= 0) catches NaN
		return usageError{fmt.Sprintf("--temperature must be a finite number >= 0, got %v", t)}
	}
	if c.MaxNewTokens < 1 || c.Sampling.TopK < 0 {
		return usageError{"--max-new-tokens must be positive and --top-k not negative"}
	}
	out, err := train.Generate(c)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, out)
	return nil
}

// textFlags are the recipe's data.tokenizer and data.chat_template.
func textFlags(fs *flag.FlagSet, c *train.TextConfig) {
	fs.StringVar(&c.Tokenizer, "tokenizer", "auto", "auto (the model's tokenizer.json, else bytes), byte, a tokenizer.json path, or a directory with one")
	fs.StringVar(&c.ChatTemplate, "chat-template", "", "a built-in chat template (chatml, llama3, qwen3, ...) or a template; default: the model's own")
}

func cmdBench(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", "bench [--blas auto|openblas|onednn|native|gonum] [--vulkan-device D [--scalar-gemm] [--no-split-k] [--gemm-tile T] [--narrow-16bit-operands] [--no-record-ahead] [--split-dkv]] [--precision P] [--bf16-matmul auto|emulate|hardware] [--base-dtype D] [--quantize nf4|fp4] [--dim N --layers N ...] [--profile] [--cpuprofile FILE] [--json]", stderr)
	c := train.DefaultBench()
	// The shape flags default to the fixed benchmark model; change them to
	// measure a larger one (e.g. --dim 1024 --layers 8 --ffn 2752).
	fs.IntVar(&c.Dim, "dim", c.Dim, "hidden size")
	fs.IntVar(&c.Layers, "layers", c.Layers, "decoder layers")
	fs.IntVar(&c.Heads, "heads", c.Heads, "attention heads")
	fs.IntVar(&c.KVHeads, "kv-heads", 0, "key/value heads (fewer than --heads: grouped-query attention; 0: --heads)")
	fs.IntVar(&c.FFN, "ffn", c.FFN, "MLP intermediate size")
	fs.IntVar(&c.Vocab, "vocab", c.Vocab, "vocabulary size")
	fs.IntVar(&c.SeqLen, "seq", c.SeqLen, "sequence length")
	fs.IntVar(&c.Batch, "batch", c.Batch, "sequences per step")
	fs.IntVar(&c.Rank, "rank", c.Rank, "LoRA rank")
	fs.TextVar(&c.BLAS, "blas", c.BLAS, "matmul backend: auto, openblas, onednn, native or gonum")
	fs.StringVar(&c.VulkanDevice, "vulkan-device", "", "train on the Vulkan engine on this device (an index, UUID or PCI bus id; see vkprobe), the optimizer there too")
	fs.BoolVar(&c.ScalarGEMM, "scalar-gemm", false, "on the Vulkan engine, keep every product on the scalar fp32 GEMM (no tensor cores), to compare")
	fs.StringVar(&c.GemmTile, "gemm-tile", "", "on the Vulkan engine, the tensor-core tile of the 16-bit products ("+strings.Join(train.GemmTiles(), ", ")+"; auto, the default: the fastest at the run's products, timed on the device and cached), to compare")
	fs.BoolVar(&c.Narrow16, "narrow-16bit-operands", false, "on the Vulkan engine, narrow the 16-bit products' fp32 operands to 16-bit memory once before each product, so the tensor-core kernel only copies them (the same bits), to compare")
	fs.Var((*splitFlag)(&c.SplitDKV), "split-dkv", "on the Vulkan engine, run the tensor-core attention's dK/dV kernel as two, one for dK and one for dV (the same results), to compare; =false keeps it one kernel; by default (auto) both are timed and the faster taken")
	fs.BoolVar(&c.NoRecordAhead, "no-record-ahead", false, "on the Vulkan engine, record each run of the graph into one command buffer instead of handing the device every 128 commands while recording the rest (the same results), to compare")
	fs.BoolVar(&c.NoSplitK, "no-split-k", false, "on the Vulkan engine, run every product in one pass over K (no split-K for the LoRA adapters' thin products), to compare")
	fs.IntVar(&c.Steps, "steps", c.Steps, "timed steps (after warm-up)")
	fs.IntVar(&c.Warmup, "warmup", c.Warmup, "untimed steps first")
	fs.IntVar(&c.Threads, "threads", 0, "threads (0: every core)")
	fs.TextVar(&c.Adapter, "adapter", c.Adapter, "lora, dora or none (full fine-tuning)")
	fs.TextVar(&c.Precision, "precision", c.Precision, "fp32, bf16 or fp16 (emulated)")
	fs.TextVar(&c.BF16Matmul, "bf16-matmul", c.BF16Matmul, "with --precision bf16: auto (where the CPU has bf16 units, the fastest of its bf16 GEMMs, oneDNN's and the native kernel, if it measures faster than the emulation), emulate (bf16 values in the fp32 kernels, the exact emulation) or hardware (bf16 GEMMs: oneDNN's where libdnnl loads, else the native AMX kernel where the CPU has AMX-BF16 and the OS grants it, or the VDPBF16PS kernel)")
	fs.TextVar(&c.BaseDtype, "base-dtype", c.BaseDtype, "fp32, or bf16/fp16 to keep the frozen base weights in 16 bits")
	fs.BoolVar(&c.Checkpoint, "checkpoint", false, "activation checkpointing: recompute each decoder layer in the backward pass")
	quantize := fs.String("quantize", "none", "none, nf4 or fp4: keep the base's decoder projections 4-bit (QLoRA)")
	fs.BoolVar(&c.Quantize.Double, "double-quant", true, "with --quantize: quantize the per-block absmax values to 8 bits too")
	asJSON := fs.Bool("json", false, "print one JSON line")
	fs.BoolVar(&c.Profile, "profile", false, "with --vulkan-device: time every GPU command of the timed steps with GPU timestamps and print where the step's time goes, by kernel and op kind")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the timed steps to this file (go tool pprof FILE)")
	fs.BoolVar(&c.Overlap, "overlap", true, "under mpirun or srun: sum gradients during the backward pass")
	bucketMB := fs.Float64("bucket-mb", 4, "under mpirun or srun, with --overlap: MiB of gradients per sum")
	allreduce := fs.String("allreduce", "native", "under mpirun or srun: native or ordered sums")
	if err := parse(fs, args); err != nil {
		return err
	}
	c.BucketBytes = int(*bucketMB * (1 << 20))
	if *quantize != "none" {
		t, err := quant.ParseType(*quantize)
		if err != nil {
			return usageError{"--quantize: must be none, nf4 or fp4, got " + *quantize}
		}
		c.Quantize.Type = t
		if c.Adapter == train.FullFineTune {
			return usageError{"--quantize: a 4-bit base is frozen; full fine-tuning (--adapter none) updates fp32 master weights"}
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"dim", c.Dim}, {"layers", c.Layers}, {"heads", c.Heads}, {"ffn", c.FFN}, {"vocab", c.Vocab}, {"seq", c.SeqLen}, {"batch", c.Batch}, {"rank", c.Rank}, {"steps", c.Steps}} {
		if f.v <= 0 {
			return usageError{fmt.Sprintf("--%s must be positive, got %d", f.name, f.v)}
		}
	}
	if c.GemmTile != "" && !slices.Contains(train.GemmTiles(), c.GemmTile) {
		return usageError{fmt.Sprintf("--gemm-tile: must be one of %s, got %q", strings.Join(train.GemmTiles(), ", "), c.GemmTile)}
	}
	if c.Profile && c.VulkanDevice == "" {
		return usageError{"--profile: the profile is of the Vulkan engine's GPU kernels; give --vulkan-device (the CPU engine has no per-op timing)"}
	}
	if c.Dim%c.Heads != 0 {
		return usageError{fmt.Sprintf("--dim %d is not divisible by --heads %d", c.Dim, c.Heads)}
	}
	if c.Warmup < 0 {
		return usageError{fmt.Sprintf("--warmup must be 0 or more, got %d", c.Warmup)}
	}
	c.KVHeads = cmp.Or(c.KVHeads, c.Heads)
	if c.KVHeads < 0 || c.Heads%c.KVHeads != 0 {
		return usageError{fmt.Sprintf("--kv-heads %d must divide --heads %d", c.KVHeads, c.Heads)}
	}
	red, err := dist.ParseReduction(*allreduce)
	if err != nil {
		return usageError{"--allreduce: " + err.Error()}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return usageError{"--cpuprofile: " + err.Error()}
		}
		defer f.Close()
		c.CPUProfile = f
	}
	// Under a launcher every rank computes its rows of the batch; rank 0
	// reports.
	comm, err := dist.Open(dist.Options{Reduction: red})
	if err != nil {
		return err
	}
	defer comm.Close()
	c.Comm = comm
	res, err := train.Bench(c)
	if err != nil {
		return err
	}
	if comm.Rank() != 0 {
		return nil
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	base := res.BaseDtype.String()
	if res.Quantize != "" {
		base = res.Quantize + " projections, the rest " + base
	}
	fmt.Fprintf(stdout, "%s · %s · %s · base weights %s (%.1f MiB) · %d params (%d trainable) · batch %d × seq %d\n", res.Backend, res.Adapter,
		res.Precision, base, float64(res.WeightBytes)/(1<<20), res.Params, res.Trainable, c.Batch, c.SeqLen)
	for _, w := range res.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	if res.Engine != "cpu" {
		fmt.Fprintf(stdout, "engine: %s\n", res.Engine)
		if res.GemmTileReason != "" {
			fmt.Fprintf(stdout, "gemm tile: %s\n", res.GemmTileReason)
		}
		if res.SplitDKVReason != "" {
			fmt.Fprintf(stdout, "attention dK/dV: %s\n", res.SplitDKVReason)
		}
	} else if res.BF16Kernel != "" {
		fmt.Fprintf(stdout, "bf16 matmul: %s\n", res.BF16Kernel)
	}
	device := ""
	if res.DevicePeak > 0 {
		device = fmt.Sprintf(" · device peak %d MiB", res.DevicePeak>>20)
	}
	fmt.Fprintf(stdout, "%.1f tokens/s · %.1f ms/step · peak RSS %d MiB%s · loss %.4f\n", res.TokensPerSec, res.MsPerStep, res.PeakRSS>>20, device, res.Loss)
	if res.Ranks > 1 {
		fmt.Fprintf(stdout, "%d ranks · per step: %.2f ms waiting for the gradient sums after the backward pass, %.2f ms summing in all\n", res.Ranks, res.AllreduceMs, res.AllreduceBusyMs)
	}
	if c.Profile {
		printProfile(stdout, res, c.Steps)
	}
	return nil
}

// profileRows is how many of a profile's rows the table shows; the rest
// are summed on one line.
const profileRows = 25

// printProfile prints a profiled benchmark's GPU time: per step, the
// command buffers' GPU time against the wall time, then the kernels, the
// longest first.
func printProfile(w io.Writer, res train.BenchResult, steps int) {
	fmt.Fprintf(w, "\nGPU profile of the %d timed steps (GPU timestamps around every command; times per step):\n", steps)
	fmt.Fprintf(w, "wall %.2f ms · command buffers on the GPU %.2f ms in %.0f submits (host and sync outside them: %.2f ms) · commands %.2f ms (barriers and gaps between them: %.2f ms)\n",
		res.MsPerStep, res.GPUMsPerStep, res.SubmitsPerStep, res.MsPerStep-res.GPUMsPerStep, res.CommandMsPerStep, res.GPUMsPerStep-res.CommandMsPerStep)
	fmt.Fprintf(w, "%10s %6s %7s %8s  %-32s %-24s %s\n", "ms", "share", "calls", "TFLOP/s", "kernel", "op kind", "slowest node (ms)")
	line := func(k train.KernelTime) {
		tf, slow := "-", ""
		if k.TFlopsPerSec > 0 {
			tf = fmt.Sprintf("%.3g", k.TFlopsPerSec)
		}
		if k.SlowestNode != "" {
			slow = fmt.Sprintf("%s (%.3f)", k.SlowestNode, k.SlowestMs)
		}
		fmt.Fprintf(w, "%10.3f %5.1f%% %7.0f %8s  %-32s %-24s %s\n", k.Ms, 100*k.Share, k.Calls, tf, k.Kernel, cmp.Or(k.Kind, "-"), slow)
	}
	var rest, total train.KernelTime // no rate: they mix GEMMs with kernels of unknown work
	rest.Kernel, total.Kernel = fmt.Sprintf("(%d more rows)", max(len(res.Profile)-profileRows, 0)), "total"
	for i, k := range res.Profile {
		if i < profileRows {
			line(k)
		} else {
			rest.Ms, rest.Share, rest.Calls = rest.Ms+k.Ms, rest.Share+k.Share, rest.Calls+k.Calls
		}
		total.Ms, total.Share, total.Calls = total.Ms+k.Ms, total.Share+k.Share, total.Calls+k.Calls
	}
	if len(res.Profile) > profileRows {
		line(rest)
	}
	line(total)
}

// splitFlag is --split-dkv: bare or =true, =false, =auto (unset).
type splitFlag train.SplitDKV

func (f *splitFlag) String() string   { return train.SplitDKV(*f).String() }
func (f *splitFlag) IsBoolFlag() bool { return true }
func (f *splitFlag) Set(s string) error {
	return (*train.SplitDKV)(f).UnmarshalText([]byte(s))
}
