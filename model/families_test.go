package model_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
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

// The fixtures come from scripts/gen_family_fixtures.py: one scaled-down
// checkpoint per family (llama 3.2 with llama3 rope scaling and tying, a
// llama with linear rope scaling and attention and MLP biases, mistral with
// a sliding window of 4 over 7 tokens, qwen2.5 with q/k/v biases and a
// 7:1 grouped-query ratio, qwen3 with q/k norms and head_dim 16 ≠ 32/4),
// in F32 and BF16, and PyTorch's float64 outputs of a re-implementation of
// transformers' and PEFT's code: logits, loss, every weight gradient, and
// LoRA's and DoRA's on every linear module.
const familiesDir = "testdata/families"

type familyFixture struct {
	f            *safetensors.File
	ids, targets []int
	batch, seq   int
	r            int
	alpha        float64
}

func loadFamily(t *testing.T, dir string) (*model.Model, familyFixture) {
	t.Helper()
	m, err := model.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.ReadFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	md := f.Metadata()
	e := familyFixture{f: f}
	json.Unmarshal([]byte(md["input_ids"]), &e.ids)
	json.Unmarshal([]byte(md["targets"]), &e.targets)
	e.batch, _ = strconv.Atoi(md["batch"])
	e.seq, _ = strconv.Atoi(md["seq_len"])
	e.r, _ = strconv.Atoi(md["lora_r"])
	e.alpha, _ = strconv.ParseFloat(md["lora_alpha"], 64)
	return m, e
}

func (e familyFixture) f64(t *testing.T, name string) []float64 {
	t.Helper()
	raw, err := e.f.Raw(name)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(raw)/8)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[i*8:]))
	}
	return out
}

// run builds m (with adapter l) in dtype dt on the fixture's batch and
// returns logits, loss and the gradients of the named parameters.
func (e familyFixture) run(t *testing.T, m *model.Model, l *peft.Adapter, dt tensor.Dtype, wrtNames []string) ([]float64, float64, map[string][]float64) {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, dt)
	nodes := map[string]*G.Node{}
	gc := model.GraphConfig{Batch: e.batch, SeqLen: e.seq}
	if l != nil {
		gc.Linear = l.Linear(nodes)
	} else if len(wrtNames) > 0 {
		gc.Trainable = func(string) bool { return true }
	}
	g, err := m.Build(b, gc)
	if err != nil {
		t.Fatal(err)
	}
	for name, n := range g.Params {
		nodes[name] = n
	}
	for _, in := range []struct {
		n *G.Node
		v []int
	}{{g.IDs, e.ids}, {g.Targets, e.targets}} {
		if err := G.Let(in.n, tensor.New(tensor.WithShape(len(in.v)), tensor.WithBacking(append([]int(nil), in.v...)))); err != nil {
			t.Fatal(err)
		}
	}
	var wrt G.Nodes
	for _, name := range wrtNames {
		if nodes[name] == nil {
			t.Fatalf("no node %s", name)
		}
		wrt = append(wrt, nodes[name])
	}
	var grads G.Nodes
	if len(wrt) > 0 {
		if grads, err = G.Grad(g.Loss, wrt...); err != nil {
			t.Fatal(err)
		}
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float64{}
	for i, n := range grads {
		out[wrtNames[i]] = f64s(n.Value().Data())
	}
	return f64s(g.Logits.Value().Data()), f64s(g.Loss.Value().Data())[0], out
}

func f64s(d any) []float64 {
	switch x := d.(type) {
	case []float64:
		return append([]float64(nil), x...)
	case []float32:
		r := make([]float64, len(x))
		for i, v := range x {
			r[i] = float64(v)
		}
		return r
	case float64:
		return []float64{x}
	case float32:
		return []float64{float64(x)}
	}
	panic("unexpected value type")
}

func mustF32(t *testing.T, f *safetensors.File, name string) []float32 {
	t.Helper()
	v, _, err := f.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// l2RelErr is ‖got − want‖₂ / ‖want‖₂.
func l2RelErr(got, want []float64) float64 {
	var d, n float64
	for i := range want {
		d += (got[i] - want[i]) * (got[i] - want[i])
		n += want[i] * want[i]
	}
	return math.Sqrt(d / n)
}

// relErr is the largest difference relative to the reference's largest value.
func relErr(got, want []float64) float64 {
	var worst, scale float64
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for i := range want {
		worst = max(worst, math.Abs(got[i]-want[i])/max(scale, 1e-300))
	}
	return worst
}

// adapterFrom makes a LoRA or DoRA adapter on every linear module of m with
// the fixture's A, B and magnitudes.
func (e familyFixture) adapterFrom(t *testing.T, m *model.Model, kind string) (*peft.Adapter, []string) {
	t.Helper()
	c := peft.Config{R: e.r, Alpha: e.alpha, UseDoRA: kind == "dora", TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}}
	ts, err := peft.Select(peft.ModelTargets(m), c)
	if err != nil {
		t.Fatal(err)
	}
	l, err := peft.New(c, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mod := range l.Modules {
		set := func(dst []float32, key string) {
			for i, v := range e.f64(t, kind+"."+mod.Path+"."+key) {
				dst[i] = float32(v) // fp32 values in the fixture, held exactly
			}
		}
		set(mod.A, "A")
		set(mod.B, "B")
		names = append(names, peft.KeyA(mod.Path), peft.KeyB(mod.Path))
		if kind == "dora" {
			set(mod.M, "M")
			names = append(names, peft.KeyM(mod.Path))
		}
	}
	return l, names
}

func TestFamiliesMatchPyTorch(t *testing.T) {
	ents, err := os.ReadDir(familiesDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		dir := filepath.Join(familiesDir, ent.Name())
		t.Run(ent.Name(), func(t *testing.T) {
			m, e := loadFamily(t, dir)
			var names []string
			for _, s := range model.Specs(m.Config) {
				names = append(names, s.Name)
			}
			// float64: the computation itself, to float64 rounding
			logits, loss, grads := e.run(t, m, nil, tensor.Float64, names)
			worstGrad := 0.0
			for _, n := range names {
				worstGrad = max(worstGrad, relErr(grads[n], e.f64(t, "grad."+n)))
			}
			dl, dLoss := relErr(logits, e.f64(t, "logits")), math.Abs(loss-e.f64(t, "loss")[0])/e.f64(t, "loss")[0]
			// fp32: what training computes, to fp32 rounding
			logits32, loss32, _ := e.run(t, m, nil, tensor.Float32, nil)
			// in fp32 the logits' relative L2 error, and the largest one
			// against PyTorch's own fp32 forward's
			dl32, dLoss32 := l2RelErr(logits32, e.f64(t, "logits")), math.Abs(loss32-e.f64(t, "loss")[0])/e.f64(t, "loss")[0]
			torch32 := f64s(mustF32(t, e.f, "logits_fp32"))
			worst32, torchWorst32 := relErr(logits32, e.f64(t, "logits")), relErr(torch32, e.f64(t, "logits"))
			t.Logf("%s (%s): float64 logits %.1e loss %.1e grads %.1e; fp32 logits %.1e (L2) loss %.1e, largest %.1e (PyTorch fp32's %.1e)",
				ent.Name(), m.Config.Family, dl, dLoss, worstGrad, dl32, dLoss32, worst32, torchWorst32)
			if worst32 > 2*max(torchWorst32, 5e-7) {
				t.Errorf("fp32: largest logit error %.2g, PyTorch's own fp32 forward's %.2g", worst32, torchWorst32)
			}
			if dl > 1e-13 || dLoss > 1e-13 || worstGrad > 1e-13 {
				t.Errorf("float64: logits %.2g, loss %.2g, gradients %.2g from PyTorch's", dl, dLoss, worstGrad)
			}
			if dl32 > 1e-6 || dLoss32 > 1e-6 {
				t.Errorf("fp32: logits %.2g, loss %.2g from PyTorch's float64", dl32, dLoss32)
			}
			for _, kind := range []string{"lora", "dora"} {
				l, pnames := e.adapterFrom(t, m, kind)
				lg, ls, ag := e.run(t, m, l, tensor.Float64, pnames)
				worst := 0.0
				for _, mod := range l.Modules {
					keys := [][2]string{{peft.KeyA(mod.Path), "A"}, {peft.KeyB(mod.Path), "B"}}
					if kind == "dora" {
						keys = append(keys, [2]string{peft.KeyM(mod.Path), "M"})
					}
					for _, k := range keys {
						worst = max(worst, relErr(ag[k[0]], e.f64(t, kind+".grad."+mod.Path+"."+k[1])))
					}
				}
				dl, dLoss := relErr(lg, e.f64(t, kind+".logits")), math.Abs(ls-e.f64(t, kind+".loss")[0])/e.f64(t, kind+".loss")[0]
				t.Logf("  %s: logits %.1e loss %.1e adapter grads %.1e", kind, dl, dLoss, worst)
				if dl > 1e-13 || dLoss > 1e-13 || worst > 1e-12 {
					t.Errorf("%s: logits %.2g, loss %.2g, adapter gradients %.2g from PyTorch's", kind, dl, dLoss, worst)
				}
			}
		})
	}
}
