package model

import (
	"bytes"
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/quant"
	"github.com/mixtune/mixtune/safetensors"
)

func TestQuantizable(t *testing.T) {
	for name, want := range map[string]bool{
		"model.layers.0.self_attn.q_proj.weight": true,
		"model.layers.3.mlp.down_proj.weight":    true,
		"model.layers.0.self_attn.q_proj.bias":   false,
		"model.layers.0.input_layernorm.weight":  false,
		"model.embed_tokens.weight":              false,
		"lm_head.weight":                         false,
		"model.norm.weight":                      false,
	} {
		if Quantizable(name) != want {
			t.Errorf("Quantizable(%s) = %v", name, !want)
		}
	}
}

// lossOf runs m's fp32 graph on a fixed batch.
func lossOf(t *testing.T, m *Model) float64 {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 1}, tensor.Float32)
	g, err := m.Build(b, GraphConfig{Batch: 2, SeqLen: 5})
	if err != nil {
		t.Fatal(err)
	}
	setBatch(t, g, []int{0, 5, 3, 9, 4, 0, 7, 7, 10, 6}, []int{5, 3, 9, 4, nn.IgnoreIndex, 7, 7, 10, 6, 8})
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	return float64(g.Loss.Value().Data().(float32))
}

// LoadQuantized keeps exactly the decoder layers' projections 4-bit, as
// Quantize does to a model in memory, and the 4-bit model's loss is the
// loss of its dequantized weights in fp32 (the same values; only the
// order of fp32 sums may differ: 1e-5 relative is far above that and far
// below the change 4-bit rounding makes to the loss).
func TestLoadQuantized(t *testing.T) {
	c := tinyConfig(false)
	dir := t.TempDir()
	m, err := New(c, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir, amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	full := lossOf(t, m)
	q := Quantization{Type: quant.NF4, Double: true}
	loaded, err := LoadQuantized(dir, amp.BF16, q)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Quantize(q); err != nil {
		t.Fatal(err)
	}
	for name, w := range loaded.Weights {
		if (w.Q4 != nil) != Quantizable(name) {
			t.Errorf("%s: 4-bit %v", name, w.Q4 != nil)
		}
		if w.Q4 == nil && name != "model.norm.weight" && len(w.Shape) == 2 && w.Bits == nil {
			t.Errorf("%s: not kept in the 16-bit base dtype", name)
		}
		if w.Q4 != nil && !bytes.Equal(w.Q4, m.Weights[name].Q4) {
			t.Errorf("%s: loaded blob differs from Quantize's", name)
		}
	}
	deq := &Model{Config: m.Config, Weights: map[string]*Tensor{}}
	for name, w := range m.Weights {
		deq.Weights[name] = &Tensor{Shape: w.Shape, Data: w.Float32()}
	}
	got, want := lossOf(t, m), lossOf(t, deq)
	if math.Abs(got-want) > 1e-5*math.Abs(want) {
		t.Errorf("4-bit loss %v, dequantized fp32 loss %v", got, want)
	}
	if got == full {
		t.Errorf("4-bit loss equals the unquantized loss %v: nothing was quantized", full)
	}
	t.Logf("loss: fp32 %.6f, nf4 %.6f; weights %d bytes against %d", full, got, m.WeightBytes(), deq.WeightBytes())
}

// SaveBnB4 writes a bitsandbytes 4-bit model in the layout it was read
// from: the bitsandbytes-layout fixture (written by
// scripts/gen_bnb4_fixture.py, independently of this code) loaded and
// saved again gives its tensors back byte for byte (codes, absmax codes,
// nested absmax, both maps, the quant state's JSON), with dtypes and
// shapes, and a quantization_config that reads back as the fixture's.
func TestSaveBnB4ReproducesFixture(t *testing.T) {
	const fixture = "testdata/bnb4"
	m, err := Load(fixture)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.SaveBnB4(dir, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	want, err := safetensors.OpenCheckpoint(fixture)
	if err != nil {
		t.Fatal(err)
	}
	got, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Names(), want.Names()) {
		t.Fatalf("tensors %v, the fixture's %v", got.Names(), want.Names())
	}
	for _, name := range want.Names() {
		wb, wi, err := want.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		gb, gi, err := got.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		if wi.Dtype != gi.Dtype || !slices.Equal(wi.Shape, gi.Shape) || !bytes.Equal(wb, gb) {
			t.Errorf("%s: %s %v (%d bytes), the fixture's %s %v (%d bytes)%s", name, gi.Dtype, gi.Shape, len(gb), wi.Dtype, wi.Shape, len(wb),
				map[bool]string{true: ": other bytes", false: ""}[wi.Dtype == gi.Dtype && slices.Equal(wi.Shape, gi.Shape)])
		}
	}
	c, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if *c.BnB4 != *m.Config.BnB4 {
		t.Errorf("quantization_config reads back as %+v, the fixture's %+v", *c.BnB4, *m.Config.BnB4)
	}
}

// A random base kept in bf16 with NF4 projections (NewQuantized) holds the
// values of the fp32 initialization, compacted or quantized: the same
// seeds and draws. It is made one tensor at a time without a copy of the
// whole model: all it allocates is the model as kept, one projection's
// fp32 scratch and a float32 per quantization block (double
// quantization's absmax before it is coded), plus small change, so the
// collector has nothing to let pile up and the peak is the model plus one
// tensor (per goroutine drawing: one, then three, give the same weights).
func TestNewQuantizedIsTheFP32InitKeptSmall(t *testing.T) {
	for _, procs := range []int{1, 3} {
		t.Run(fmt.Sprintf("GOMAXPROCS=%d", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			testNewQuantizedKeptSmall(t, min(procs, maxQuantizeWorkers))
		})
	}
}

func testNewQuantizedKeptSmall(t *testing.T, workers int) {
	c := Config{VocabSize: 1000, HiddenSize: 256, IntermediateSize: 688, NumHiddenLayers: 3, NumAttentionHeads: 8, NumKeyValueHeads: 4,
		MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000, BOSTokenID: 0, EOSTokenID: 1, PadTokenID: 2}
	q := Quantization{Type: quant.NF4, Double: true}
	ref, err := New(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m, err := NewQuantized(c, 3, amp.BF16, q)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	largest, scales := 0, 0
	for name, w := range m.Weights {
		r := ref.Weights[name].Data
		switch {
		case w.Q4 != nil:
			want, err := quant.Quantize(q.Type, r, w.Shape, quant.Options{Double: true})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w.Q4, want.Encode()) {
				t.Fatalf("%s: the blob differs from the fp32 init's quantized", name)
			}
			largest, scales = max(largest, len(r)), scales+4*want.Blocks()
		case w.Bits != nil:
			for i, b := range w.Bits {
				if b != amp.BF16.Bits16(r[i]) || w.Format != amp.BF16 {
					t.Fatalf("%s[%d]: bits %#04x, the fp32 init's %v in bf16 %#04x", name, i, b, r[i], amp.BF16.Bits16(r[i]))
				}
			}
		default:
			if !slices.Equal(w.Data, r) {
				t.Fatalf("%s: %v, the fp32 init's %v", name, w.Data[:3], r[:3])
			}
		}
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	bound := uint64(m.WeightBytes()+workers*4*largest+scales) + 1<<20
	t.Logf("allocated %d bytes: the model %d, one projection in fp32 %d for each of %d workers, block scales %d", alloc, m.WeightBytes(), 4*largest, workers, scales)
	if alloc > bound {
		t.Errorf("NewQuantized allocated %d bytes, over the model (%d) plus one fp32 projection (%d) for each of %d workers and the block scales (%d)", alloc, m.WeightBytes(), 4*largest, workers, scales)
	}
}
