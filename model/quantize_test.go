package model

import (
	"bytes"
	"math"
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
