package train

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/safetensors"
)

// bnbFixture is a tiny Llama in bitsandbytes' 4-bit layout (NF4, double
// quantization) from scripts/gen_bnb4_fixture.py, which quantizes it in
// torch independently of mixtune and evaluates the dequantized weights in
// float64.
const bnbFixture = "../model/testdata/bnb4"

// `mixtune eval` on a bitsandbytes checkpoint matches the float64 loss of
// its dequantized weights to 1e-6 relative. Bound: the weights are the
// same fp32 values; what differs is fp32 arithmetic in a 2-layer model of
// width 64 over 44 tokens, whose loss error is ~1e-7 relative (a few
// hundred roundings of 6e-8 each, largely cancelling).
func TestEvalBitsAndBytesCheckpoint(t *testing.T) {
	var want struct {
		Loss   float64 `json:"loss"`
		Tokens int     `json:"tokens"`
		SeqLen int     `json:"seq_len"`
	}
	b, err := os.ReadFile(filepath.Join(bnbFixture, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(bnbFixture)
	if err != nil {
		t.Fatal(err)
	}
	n4 := 0
	for name, w := range m.Weights {
		if w.Q4 != nil {
			n4++
			if m.Stored[name] != "NF4" {
				t.Errorf("%s stored as %s", name, m.Stored[name])
			}
		}
	}
	if n4 != 14 {
		t.Errorf("%d weights loaded 4-bit, want the 14 projections", n4)
	}
	rep, err := Eval(EvalConfig{Model: bnbFixture, Data: filepath.Join(bnbFixture, "data.jsonl"), SeqLen: want.SeqLen, BatchSize: 2, Mode: data.Pad, BLAS: "gonum"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Tokens != want.Tokens {
		t.Fatalf("%d target tokens, the reference has %d", rep.Tokens, want.Tokens)
	}
	rel := math.Abs(float64(rep.Loss)-want.Loss) / want.Loss
	if rel > 1e-6 {
		t.Errorf("eval loss %.9f, float64 reference %.9f (relative error %.2g)", float64(rep.Loss), want.Loss, rel)
	}
	t.Logf("eval loss %.9f, float64 reference %.9f, relative error %.2g", float64(rep.Loss), want.Loss, rel)
}

// copyFixture copies the bnb fixture, rewriting its config.json with edit
// and its weights without the tensors drop names (and with those change
// rewrites).
func copyFixture(t *testing.T, edit func(map[string]any), drop string, change func(name string, b []byte) []byte) string {
	t.Helper()
	dir := t.TempDir()
	cb, err := os.ReadFile(filepath.Join(bnbFixture, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(cb, &cfg); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	cb, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cb, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(bnbFixture, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	// a safetensors file by hand: the package writes float tensors only
	hdr, blob := map[string]any{}, []byte{}
	for _, name := range f.Names() {
		if name == drop {
			continue
		}
		info, _ := f.Info(name)
		raw, err := f.Raw(name)
		if err != nil {
			t.Fatal(err)
		}
		if change != nil {
			raw = change(name, raw)
		}
		hdr[name] = map[string]any{"dtype": info.Dtype, "shape": info.Shape, "data_offsets": []int{len(blob), len(blob) + len(raw)}}
		blob = append(blob, raw...)
	}
	hb, _ := json.Marshal(hdr)
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	out := make([]byte, 8, 8+len(hb)+len(blob))
	for i := range 8 {
		out[i] = byte(uint64(len(hb)) >> (8 * i))
	}
	out = append(append(out, hb...), blob...)
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// What a bitsandbytes checkpoint does not hold is refused as the user's
// input (exit 2), naming the file or tensor at fault.
func TestBitsAndBytesCheckpointErrors(t *testing.T) {
	const q = "model.layers.1.mlp.up_proj.weight"
	for _, tc := range []struct {
		name   string
		edit   func(map[string]any)
		drop   string
		change func(string, []byte) []byte
		want   string
	}{
		{name: "8-bit", edit: func(c map[string]any) {
			qc := c["quantization_config"].(map[string]any)
			qc["load_in_8bit"], qc["load_in_4bit"] = true, false
		}, want: "8-bit"},
		{name: "gptq", edit: func(c map[string]any) { c["quantization_config"] = map[string]any{"quant_method": "gptq"} }, want: `quant_method "gptq"`},
		{name: "no quantization_config", edit: func(c map[string]any) { delete(c, "quantization_config") }, want: "no quantization_config"},
		{name: "missing absmax", drop: q + ".absmax", want: q + ".absmax"},
		{name: "missing nested map", drop: q + ".nested_quant_map", want: q + ".nested_quant_map"},
		{name: "short codes", change: func(name string, b []byte) []byte {
			if name == q {
				return b[:len(b)-2]
			}
			return b
		}, want: q},
		{name: "bad quant state", change: func(name string, b []byte) []byte {
			if name == q+".quant_state.bitsandbytes__nf4" {
				return []byte(strings.Replace(string(b), `"shape": [320, 64]`, `"shape": [64, 320]`, 1))
			}
			return b
		}, want: "config.json implies [320 64]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t, tc.edit, tc.drop, tc.change)
			_, err := Eval(EvalConfig{Model: dir, Data: filepath.Join(bnbFixture, "data.jsonl"), SeqLen: 16, BatchSize: 2, Mode: data.Pad, BLAS: "gonum"})
			if err == nil {
				t.Fatal("loaded")
			}
			if !IsInputError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want an input error naming %q", err, tc.want)
			}
		})
	}
}
