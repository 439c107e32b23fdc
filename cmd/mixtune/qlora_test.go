package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/quant"
)

// merge --base-quantize nf4 merges into the base a QLoRA run trained on:
// the checkpoint quantized as the run did and dequantized in fp32. An
// unadapted projection comes out as its NF4 round trip, an adapted one as
// that plus the adapter's delta.
func TestMergeIntoQuantizedBase(t *testing.T) {
	dir := t.TempDir()
	baseDir, m := tinyBase(t, dir)
	ts, _ := peft.Targets(peft.ModelTargets(m), []string{"q_proj"})
	l, err := peft.New(peft.Config{R: 2, Alpha: 4, TargetModules: []string{"q_proj"}}, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range l.Modules {
		for j := range mod.B {
			mod.B[j] = 0.01 * float32(j%7-3)
		}
	}
	adapterDir := filepath.Join(dir, "adapter")
	if err := l.Save(adapterDir, baseDir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "merged")
	if code, _, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir, "--out", out, "--dtype", "fp32", "--base-quantize", "nf4"); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	merged, err := model.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(name string) []float32 {
		w := m.Weights[name]
		q, err := quant.Quantize(quant.NF4, w.Float32(), w.Shape, quant.Options{Double: true})
		if err != nil {
			t.Fatal(err)
		}
		return q.Dequantize()
	}
	up := "model.layers.1.mlp.up_proj.weight"
	for i, v := range roundTrip(up) {
		if merged.Weights[up].Data[i] != v {
			t.Fatalf("%s[%d] = %v, its NF4 round trip %v", up, i, merged.Weights[up].Data[i], v)
		}
	}
	qp := "model.layers.0.self_attn.q_proj"
	want, err := l.Merged(qp, roundTrip(qp+".weight"))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range want {
		if merged.Weights[qp+".weight"].Data[i] != v {
			t.Fatalf("%s[%d] = %v, the NF4 base merged %v", qp, i, merged.Weights[qp+".weight"].Data[i], v)
		}
	}
	code, _, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir, "--out", filepath.Join(dir, "m2"), "--base-quantize", "int4")
	if code != 2 || !strings.Contains(stderr, "--base-quantize") {
		t.Errorf("--base-quantize int4: exit %d, %s", code, stderr)
	}
}
