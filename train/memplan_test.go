package train

import (
	"context"
	"io"
	"math"
	"path/filepath"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/quant"
)

// The memory plan moves op outputs into shared blocks; it must not change
// a bit of what training computes. Each case trains a few steps with
// every output in memory of its own (the reference) and with the plan,
// every planned output NaN-filled just before its op writes it: a value
// read after the plan let another output overwrite it, or an element an
// op leaves unwritten, would change the losses or the weights.
func TestMemoryPlanIsBitIdentical(t *testing.T) {
	small := BenchConfig{Vocab: 96, Dim: 32, Layers: 2, Heads: 4, KVHeads: 2, FFN: 48, SeqLen: 16, Batch: 2, Rank: 4,
		Adapter: LoRA, BaseDtype: amp.FP32, Precision: amp.FP32, BLAS: blas.KindNative, Threads: 2}
	with := func(f func(*BenchConfig)) BenchConfig {
		c := small
		f(&c)
		return c
	}
	for _, tc := range []struct {
		name string
		c    BenchConfig
	}{
		{"fp32 lora", small},
		{"bf16 lora, bf16 base", with(func(c *BenchConfig) { c.Precision, c.BaseDtype = amp.BF16, amp.BF16 })},
		{"fp16 lora", with(func(c *BenchConfig) { c.Precision = amp.FP16 })},
		{"bf16 dora", with(func(c *BenchConfig) { c.Precision, c.Adapter = amp.BF16, DoRA })},
		{"fp32 full", with(func(c *BenchConfig) { c.Adapter = FullFineTune })},
		{"bf16 full", with(func(c *BenchConfig) { c.Precision, c.Adapter = amp.BF16, FullFineTune })},
		{"bf16 checkpointed", with(func(c *BenchConfig) { c.Precision, c.Checkpoint = amp.BF16, true })},
		{"nf4 base", with(func(c *BenchConfig) {
			c.Quantize = model.Quantization{Type: quant.NF4, Double: true}
			c.Dim, c.FFN = 64, 128 // 4-bit blocks of 64
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := benchSteps(t, tc.c, unplannedMemory)
			got := benchSteps(t, tc.c, poisonedMemory)
			if got.plan.Planned == 0 || got.plan.BlockBytes >= got.plan.PlannedBytes {
				t.Errorf("nothing shared: %v", got.plan)
			}
			t.Logf("%v", got.plan)
			for i := range ref.losses {
				if math.Float64bits(ref.losses[i]) != math.Float64bits(got.losses[i]) {
					t.Errorf("step %d: loss %v planned, %v unplanned", i, got.losses[i], ref.losses[i])
				}
			}
			for i := range ref.weights {
				if math.Float32bits(ref.weights[i]) != math.Float32bits(got.weights[i]) {
					t.Fatalf("trained weight %d: %v planned, %v unplanned", i, got.weights[i], ref.weights[i])
				}
			}
		})
	}
}

type benchTrace struct {
	losses  []float64
	weights []float32
	plan    nn.MemoryPlan
	// devicePeak is, on the Vulkan engine, the most bytes the device's
	// buffers held (a device of the run's own)
	devicePeak uint64
}

func benchSteps(t *testing.T, c BenchConfig, mem memoryMode) benchTrace {
	t.Helper()
	b, err := newBenchRun(c, mem)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	tr := benchTrace{plan: b.ru.memory}
	for range 3 {
		if err := b.step(); err != nil {
			t.Fatal(err)
		}
		tr.losses = append(tr.losses, b.loss)
	}
	if b.devOpt != nil {
		if _, err := b.devOpt.syncHost(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range b.params {
		tr.weights = append(tr.weights, p.Value...)
	}
	if b.gpu != nil {
		_, tr.devicePeak = b.gpu.dev.MemoryUse()
	}
	return tr
}

// The same through whole runs: LoRA dropout, the evaluation graph and a
// DPO run (its reference and policy graphs), each against its unplanned
// twin, metrics and saved adapter alike.
func TestMemoryPlanRunsAreBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		name string
		pref bool
		sets []string
	}{
		{"sft with dropout and evaluation", false, []string{"adapter.dropout=0.1", "precision=bf16", "train.eval_every=3"}},
		{"checkpointed sft with dropout", false, []string{"adapter.dropout=0.1", "precision=fp16", "compute.activation_checkpointing=true"}},
		{"dpo", true, []string{"train.steps=4", "train.batch_size=4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs []string
			for _, mem := range []memoryMode{unplannedMemory, poisonedMemory} {
				var dir string
				var r *Recipe
				if tc.pref {
					dir = prefFixture(t)
					var err error
					if r, err = Load(writeConfig(t, dir, prefConfig), append(tc.sets, "compute.blas=native")); err != nil {
						t.Fatal(err)
					}
				} else {
					dir = fixture(t)
					r = resumeRecipe(t, dir, append(tc.sets, "compute.blas=native")...)
				}
				sum, err := Run(context.Background(), r, Options{Out: io.Discard, memory: mem})
				if err != nil {
					t.Fatal(err)
				}
				runs = append(runs, sum.RunDir)
			}
			sameMetrics(t, runs[0], runs[1])
			sameFile(t, filepath.Join(runs[0], "adapter/adapter_model.safetensors"), filepath.Join(runs[1], "adapter/adapter_model.safetensors"))
		})
	}
}
