package peft_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/safetensors"
)

// testdata/peft_dora comes from scripts/gen_peft_dora_fixture.py: a DoRA
// adapter (rsLoRA, B and magnitudes as after training) in PEFT's file
// layout for model/testdata/torch_llama, whose weights are stored in mixed
// BF16/F16/F32, and PyTorch's float64 logits, loss and adapter gradients
// computed with PEFT's DoraLinearLayer formulas.
const doraFixture = "testdata/peft_dora"

func f64s(t *testing.T, f *safetensors.File, name string) []float64 {
	t.Helper()
	raw, err := f.Raw(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(raw)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[i*8:]))
	}
	return out
}

func relErr(got, want []float64) float64 {
	var d, n float64
	for i := range got {
		d += (got[i] - want[i]) * (got[i] - want[i])
		n += want[i] * want[i]
	}
	return math.Sqrt(d / n)
}

// A PEFT-written DoRA adapter loads, and the adapted model's logits, loss
// and gradients of every A, B and magnitude match PyTorch's in float64.
func TestDoRAMatchesPyTorch(t *testing.T) {
	m, err := model.Load("../model/testdata/torch_llama")
	if err != nil {
		t.Fatal(err)
	}
	l, err := peft.Load(doraFixture, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if !l.Config.UseDoRA || !l.Config.UseRSLoRA || len(l.Modules) != 6 {
		t.Fatalf("loaded %s with %d modules", l.Config, len(l.Modules))
	}
	exp, err := safetensors.ReadFile(filepath.Join(doraFixture, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	md := exp.Metadata()
	var ids, targets []int
	json.Unmarshal([]byte(md["input_ids"]), &ids)
	json.Unmarshal([]byte(md["targets"]), &targets)
	batch, _ := strconv.Atoi(md["batch"])
	seq, _ := strconv.Atoi(md["seq_len"])
	for i, v := range targets {
		if v == -100 {
			targets[i] = nn.IgnoreIndex
		}
	}

	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
	nodes := map[string]*G.Node{}
	g, err := m.Build(b, model.GraphConfig{Batch: batch, SeqLen: seq, Linear: l.Linear(nodes)})
	if err != nil {
		t.Fatal(err)
	}
	G.Let(g.IDs, tensor.New(tensor.WithShape(len(ids)), tensor.WithBacking(ids)))
	G.Let(g.Targets, tensor.New(tensor.WithShape(len(targets)), tensor.WithBacking(targets)))
	var names []string
	var wrt []*G.Node
	for _, mod := range l.Modules {
		for _, k := range []string{peft.KeyA(mod.Path), peft.KeyB(mod.Path), peft.KeyM(mod.Path)} {
			names = append(names, k)
			wrt = append(wrt, nodes[k])
		}
	}
	grads, err := G.Grad(g.Loss, wrt...)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	// 1e-14: what the README states (measured: logits 8.0e-16, loss 0,
	// gradients 3.8e-15).
	const tol = 1e-14
	el := relErr(g.Logits.Value().Data().([]float64), f64s(t, exp, "logits"))
	if el > tol {
		t.Errorf("logits: relative error %.2g", el)
	}
	loss, want := g.Loss.Value().Data().(float64), f64s(t, exp, "loss")[0]
	if math.Abs(loss-want) > tol*want {
		t.Errorf("loss %.15g, PyTorch %.15g", loss, want)
	}
	var worst float64
	for i, n := range names {
		e := relErr(grads[i].Value().Data().([]float64), f64s(t, exp, "grad."+n))
		worst = max(worst, e)
		if e > tol {
			t.Errorf("gradient of %s: relative error %.2g", n, e)
		}
	}
	t.Logf("logits %.3g; loss %.12f (PyTorch %.12f, relative %.3g); %d adapter gradients, worst relative error %.3g", el, loss, want, math.Abs(loss-want)/want, len(names), worst)
}
