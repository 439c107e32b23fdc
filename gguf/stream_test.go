package gguf

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/testadapter"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/quant"
)

// fileBytes writes f into memory.
func fileBytes(t *testing.T, f *File) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The streamed export writes the file llama.cpp loaded for every golden
// case (the hashes the goldens hold), and the whole-model build's bytes.
func TestPlanExportMatchesGoldens(t *testing.T) {
	for _, c := range loadGoldens(t).Cases {
		if c.TokenizerOnly {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			whole, dir := buildCase(t, c)
			adapter := ""
			if c.Adapter != "" {
				adapter = filepath.Join("..", c.Adapter)
			}
			typ, _ := ParseType(c.Type)
			name, _ := whole.File.Get("general.name").(string)
			plan, err := PlanExport(dir, adapter, c.LoRA, ModelOptions{Type: typ, Name: name})
			if err != nil {
				t.Fatal(err)
			}
			b := fileBytes(t, plan.File)
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != c.SHA256 || int64(len(b)) != c.Size {
				t.Errorf("streamed: %d bytes, sha256 %x; the file llama.cpp loaded: %d bytes, %s", len(b), sum, c.Size, c.SHA256)
			}
			if !bytes.Equal(b, fileBytes(t, whole.File)) {
				t.Error("streamed and whole-model files differ")
			}
		})
	}
}

// adapterFor saves in dir a random adapter on targets of the model in
// baseDir (testadapter.Random), with init_lora_weights set to init when it
// is not empty.
func adapterFor(t *testing.T, baseDir, dir string, targets []string, dora bool, seed uint64, init string) string {
	t.Helper()
	if err := testadapter.Random(baseDir, dir, targets, dora, seed); err != nil {
		t.Fatal(err)
	}
	if init == "" {
		return dir
	}
	path := filepath.Join(dir, peft.ConfigFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	fields["init_lora_weights"] = init
	if raw, err = json.Marshal(fields); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The streamed export writes the same bytes as the whole-model build, by
// design (each weight goes through the same per-weight arithmetic: read,
// dequantized, merged in float64 and rounded to fp32 once, permuted,
// converted), for a bitsandbytes NF4 checkpoint, bases quantized as they
// load, fp32 sharded and bf16 checkpoints, LoRA and DoRA, each type, the
// adapter alone, and a pissa adapter (merged into the base loaded
// whole). Where an adapter is given, the file must differ from the base's.
func TestPlanExportBitIdentical(t *testing.T) {
	dir := t.TempDir()
	const bnb = "../model/testdata/bnb4"
	cfg := model.Config{VocabSize: 259, HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		InitializerRange: 0.02, BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}
	m, err := model.New(cfg, 6)
	if err != nil {
		t.Fatal(err)
	}
	fp32Dir, bf16Dir := filepath.Join(dir, "fp32"), filepath.Join(dir, "bf16")
	if err := m.Save(fp32Dir, amp.FP32, 30_000); err != nil { // several shards
		t.Fatal(err)
	}
	if err := m.Save(bf16Dir, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	attn, mlp := []string{"q_proj", "k_proj", "v_proj"}, []string{"q_proj", "o_proj", "down_proj", "up_proj"}
	bnbLoRA := adapterFor(t, bnb, filepath.Join(dir, "bnb-lora"), attn, false, 1, "")
	bnbDoRA := adapterFor(t, bnb, filepath.Join(dir, "bnb-dora"), mlp, true, 2, "")
	fp32LoRA := adapterFor(t, fp32Dir, filepath.Join(dir, "fp32-lora"), mlp, false, 3, "")
	fp32DoRA := adapterFor(t, fp32Dir, filepath.Join(dir, "fp32-dora"), attn, true, 4, "")
	pissa := adapterFor(t, fp32Dir, filepath.Join(dir, "pissa"), attn, false, 5, "pissa")
	nf4 := model.Quantization{Type: quant.NF4, Double: true}
	fp4 := model.Quantization{Type: quant.FP4}
	for _, c := range []struct {
		name, base, adapter string
		lora                bool
		typ                 TensorType
		q                   model.Quantization
	}{
		{"bnb f16", bnb, "", false, F16, model.Quantization{}},
		{"bnb lora f32", bnb, bnbLoRA, false, F32, model.Quantization{}},
		{"bnb lora f16", bnb, bnbLoRA, false, F16, model.Quantization{}},
		{"bnb lora bf16", bnb, bnbLoRA, false, BF16, model.Quantization{}},
		{"bnb lora q8_0", bnb, bnbLoRA, false, Q8_0, model.Quantization{}},
		{"bnb dora q8_0", bnb, bnbDoRA, false, Q8_0, model.Quantization{}},
		{"bnb dora bf16 base-quantize nf4", bnb, bnbDoRA, false, BF16, nf4},
		{"bnb lora adapter file q8_0", bnb, bnbLoRA, true, Q8_0, model.Quantization{}},
		{"fp32 sharded f32", fp32Dir, "", false, F32, model.Quantization{}},
		{"fp32 sharded nf4-on-load lora f16", fp32Dir, fp32LoRA, false, F16, nf4},
		{"fp32 sharded nf4-on-load dora q8_0", fp32Dir, fp32DoRA, false, Q8_0, nf4},
		{"fp32 sharded fp4-on-load bf16", fp32Dir, "", false, BF16, fp4},
		{"fp32 sharded dora f32", fp32Dir, fp32DoRA, false, F32, model.Quantization{}},
		{"bf16 nf4-on-load lora bf16", bf16Dir, fp32LoRA, false, BF16, nf4},
		{"bf16 dora f16", bf16Dir, fp32DoRA, false, F16, model.Quantization{}},
		{"bf16 lora adapter file f32", bf16Dir, fp32LoRA, true, F32, model.Quantization{}},
		{"fp32 pissa unconverted f16", fp32Dir, pissa, false, F16, model.Quantization{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := ModelOptions{Type: c.typ, Name: "x", Base: c.q}
			whole, err := Build(c.base, c.adapter, c.lora, opt)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := PlanExport(c.base, c.adapter, c.lora, opt)
			if err != nil {
				t.Fatal(err)
			}
			got := fileBytes(t, plan.File)
			if want := fileBytes(t, whole.File); !bytes.Equal(got, want) {
				t.Fatalf("streamed %d bytes differ from the whole-model build's %d", len(got), len(want))
			}
			if c.adapter == "" || c.lora {
				return
			}
			base, err := PlanExport(c.base, "", false, opt)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(got, fileBytes(t, base.File)) {
				t.Error("the file is the base's: nothing was merged")
			}
		})
	}
}

// A file whose tensors give their values through Fill is written as the
// same file with them in Data, each Fill called once, in file order; a
// Fill that fails or gives the wrong values stops the write with a
// *DataError naming the tensor.
func TestWriteToFill(t *testing.T) {
	f := sampleFile()
	want := fileBytes(t, f)
	var order []string
	lazy := &File{KV: f.KV}
	for _, tn := range f.Tensors {
		data := tn.Data
		tn.Data = nil
		tn.Fill = func() ([]float32, error) {
			order = append(order, tn.Name)
			return data, nil
		}
		lazy.Tensors = append(lazy.Tensors, tn)
	}
	if got := fileBytes(t, lazy); !bytes.Equal(got, want) {
		t.Fatalf("filled: %d bytes, differ from the file with Data (%d bytes)", len(got), len(want))
	}
	if !slices.Equal(order, []string{"a", "b", "c", "d"}) {
		t.Errorf("Fill called for %v, want each once in file order", order)
	}
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		fill func() ([]float32, error)
		want string
	}{
		{"error", func() ([]float32, error) { return nil, boom }, "boom"},
		{"short", func() ([]float32, error) { return make([]float32, 13), nil }, "tensor b has shape [2 7] (14 values) but 13 values"},
		{"NaN", func() ([]float32, error) {
			d := make([]float32, 14)
			d[5] = float32(math.Inf(-1))
			return d, nil
		}, "tensor b holds a non-finite value (-Inf at index 5)"},
	} {
		bad := &File{KV: lazy.KV, Tensors: slices.Clone(lazy.Tensors)}
		bad.Tensors[1].Fill = c.fill
		if err := bad.Check(); err != nil {
			t.Fatalf("%s: Check reads no values but says %v", c.name, err)
		}
		_, err := bad.WriteTo(&bytes.Buffer{})
		var de *DataError
		if !errors.As(err, &de) || de.Tensor != "b" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a *DataError for tensor b containing %q", c.name, err, c.want)
		}
	}
}
