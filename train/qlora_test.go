package train

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/peft"
)

// A LoRA run on a 4-bit base loads its projections quantized, trains, and
// starts from a loss near the unquantized base's but not equal to it (the
// base it multiplies by is the dequantized one).
func TestQuantizedBaseTrains(t *testing.T) {
	dir := fixture(t)
	loss := map[string][]float64{}
	for _, q := range []string{"none", "nf4", "fp4"} {
		r := resumeRecipe(t, dir, "name=q-"+q, "train.checkpoint_every=0", "train.steps=6", "model.quantize="+q, "precision=bf16")
		m, err := loadModel(r)
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range m.Weights {
			if quantized := w.Q4 != nil; quantized != (q != "none" && strings.HasSuffix(name, "_proj.weight")) {
				t.Errorf("%s: %s kept 4-bit: %v", q, name, quantized)
			}
		}
		s, err := Run(context.Background(), r, Options{Out: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range readMetrics(t, s.RunDir) {
			if v, ok := line["loss"]; ok {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("%s: loss %v", q, v)
				}
				loss[q] = append(loss[q], v)
			}
		}
	}
	for _, q := range []string{"nf4", "fp4"} {
		first, base := loss[q][0], loss["none"][0]
		if first == base || math.Abs(first-base) > 0.1*base {
			t.Errorf("%s: first loss %v against the unquantized base's %v", q, first, base)
		}
		t.Logf("%s: losses %.4f (unquantized %.4f)", q, loss[q], loss["none"])
	}
}

func TestQuantizeConfig(t *testing.T) {
	dir := fixture(t)
	for _, tc := range []struct {
		sets  []string
		field string // "" : valid
	}{
		{[]string{"model.quantize=nf4"}, ""},
		{[]string{"model.quantize=fp4", "model.double_quant=false"}, ""},
		{[]string{"model.quantize=int4"}, "model.quantize"},
		{[]string{"model.double_quant=true"}, "model.double_quant"},
		{[]string{"model.quantize=nf4", "adapter.type=none"}, "model.quantize"},
		{[]string{"model.quantize=nf4", "adapter.type=dora"}, "model.quantize"},
		{[]string{"model.quantize=nf4", "adapter.init=pissa"}, "adapter.init"},
	} {
		_, err := Load(writeConfig(t, dir, goodConfig), tc.sets)
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%v: %v", tc.sets, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)):
			t.Errorf("%v: error %v, want one naming %s", tc.sets, err, tc.field)
		}
	}
	// a recipe that does not quantize resolves, and so hashes, as before
	r, err := Load(writeConfig(t, dir, goodConfig), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := r.Config.Resolved()
	if bytes.Contains(b, []byte("quantize")) || bytes.Contains(b, []byte("double_quant")) {
		t.Errorf("resolved YAML of an unquantized recipe names quantization:\n%s", b)
	}
}

// A LoRA run trains on a bitsandbytes checkpoint as published; a DoRA run
// on one is refused at the recipe.
func TestTrainOnBitsAndBytesCheckpoint(t *testing.T) {
	dir := fixture(t)
	abs, err := filepath.Abs(bnbFixture)
	if err != nil {
		t.Fatal(err)
	}
	r := resumeRecipe(t, dir, "name=bnb", "train.checkpoint_every=0", "train.steps=3", "model.path="+abs, "data.seq_len=32")
	s, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	adapter := filepath.Join(s.RunDir, "adapter")
	// merging dequantizes the base in fp32 and writes plain floats: the
	// merged model evaluates as the base with the adapter does, up to the
	// fp32 rounding of W + s·B·A (1e-5 relative is far above it)
	m, l, err := loadWithAdapter(abs, adapter)
	if err != nil {
		t.Fatal(err)
	}
	if err := peft.MergeInto(m, l, amp.FP32); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(t.TempDir(), "merged")
	if err := m.Save(merged, amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	if cfg, _ := os.ReadFile(filepath.Join(merged, "config.json")); strings.Contains(string(cfg), "quantization_config") {
		t.Error("the merged model's config.json keeps quantization_config")
	}
	ec := EvalConfig{Model: abs, Adapter: adapter, Data: filepath.Join(bnbFixture, "data.jsonl"), SeqLen: 16, BatchSize: 2, Mode: data.Pad, BLAS: "gonum"}
	withAdapter, err := Eval(ec)
	if err != nil {
		t.Fatal(err)
	}
	ec.Model, ec.Adapter = merged, ""
	mergedLoss, err := Eval(ec)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := float64(withAdapter.Loss), float64(mergedLoss.Loss); math.Abs(a-b) > 1e-5*a {
		t.Errorf("merged model's loss %v, base with adapter %v", b, a)
	}
	_, err = Load(writeConfig(t, dir, goodConfig), []string{"model.path=" + abs, "adapter.type=dora", "data.seq_len=32"})
	if err == nil || !strings.Contains(err.Error(), "model.path") || !strings.Contains(err.Error(), "dora") {
		t.Errorf("dora on a bitsandbytes checkpoint: %v", err)
	}
}
