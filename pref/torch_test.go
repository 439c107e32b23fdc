package pref_test

import (
	"cmp"
	"encoding/json"
	"math"
	"path/filepath"
	"strconv"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/fixture"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/pref"
	"github.com/mixtune/mixtune/safetensors"
)

// testdata/lora_pairs comes from scripts/gen_pref_fixture.py: a LoRA
// adapter for model/testdata/torch_llama, two preference pairs, and each
// objective's loss and adapter gradients from TRL's formulas in float64
// PyTorch.
const pairsDir = "testdata/lora_pairs"

type pairsFixture struct {
	f             *safetensors.File
	ids, targets  []int
	batch, seqLen int
	objectives    []struct {
		Name, Loss     string
		Beta           float64
		LabelSmoothing float64 `json:"label_smoothing"`
		Gamma          float64
	}
}

func loadFixture(t *testing.T) pairsFixture {
	t.Helper()
	f, err := safetensors.ReadFile(filepath.Join(pairsDir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	md := f.Metadata()
	fx := pairsFixture{f: f}
	for k, v := range map[string]any{"input_ids": &fx.ids, "targets": &fx.targets, "objectives": &fx.objectives} {
		if err := json.Unmarshal([]byte(md[k]), v); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	fx.batch, _ = strconv.Atoi(md["batch"])
	fx.seqLen, _ = strconv.Atoi(md["seq_len"])
	return fx
}

func (fx pairsFixture) f64(t *testing.T, name string) []float64 {
	t.Helper()
	v, err := fixture.F64(fx.f, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func toF64(v G.Value) []float64 {
	switch d := v.Data().(type) {
	case []float64:
		return d
	case float64:
		return []float64{d}
	case float32:
		return []float64{float64(d)}
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	}
	panic("unexpected value")
}

// sequenceLogProbs runs m (with the adapter's Linear when linear is not
// nil) on the fixture's batch and returns the graph's builder, its
// graph, whose LogProbs are the rows' summed log-probabilities and whose
// Loss is loss of them.
func sequenceLogProbs(t *testing.T, m *model.Model, pc precision, fx pairsFixture, linear model.LinearFunc, loss nn.VectorLoss) (*nn.Builder, *model.Graph) {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, pc.dtype)
	if pc.low != amp.FP32 {
		p := amp.DefaultPolicy(pc.low)
		b.Policy = &p
	}
	g, err := m.Build(b, model.GraphConfig{Batch: fx.batch, SeqLen: fx.seqLen, Linear: linear, SequenceLogProbs: true, SequenceLoss: loss})
	if err != nil {
		t.Fatal(err)
	}
	targets := make([]int, len(fx.targets))
	for i, v := range fx.targets {
		targets[i] = v
		if v == -100 {
			targets[i] = nn.IgnoreIndex
		}
	}
	G.Let(g.IDs, tensor.New(tensor.WithShape(len(fx.ids)), tensor.WithBacking(fx.ids)))
	G.Let(g.Targets, tensor.New(tensor.WithShape(len(targets)), tensor.WithBacking(targets)))
	return b, g
}

func tokens(fx pairsFixture) []int {
	n := make([]int, fx.batch)
	for i, v := range fx.targets {
		if v != -100 {
			n[i/fx.seqLen]++
		}
	}
	return n
}

// precision is how a graph computes: its element type and, for mixed
// precision, the low format of autocast's default lists.
type precision struct {
	name  string
	dtype tensor.Dtype
	low   amp.Format
	tol   float64 // relative error bound, loss and gradients
	// whole bounds the relative error of the 12 gradients together, one
	// vector; 0: tol
	whole float64
}

// Every objective's loss and its gradients with respect to each LoRA A
// and B match TRL's formulas in float64 PyTorch, through the model: the
// reference is the same model with the adapter off. The bounds:
//
//   - float64, 1e-12: the graph and PyTorch differ in summation order
//     only, ~1e-16 per operation over a few hundred on a path.
//   - float32: the 1e-6 for the loss and for the gradient, all 12
//     tensors as one vector (measured: losses 5.8e-7, gradients 8.2e-7
//     worst, sigmoid DPO's). Each tensor alone, 4e-6 (64 units of fp32
//     rounding, 2⁻²⁴ each), measured 1.38e-6: the worst is always layer
//     1's q_proj B, the smallest gradient (a norm 10 to 25 times below
//     the largest tensor's), whose path runs through attention's softmax
//     backward, where dS = P⊙(dP − Σ P⊙dP) subtracts nearly equal terms.
//     It is fp32 rounding alone: the float32 graph is as far from the
//     float64 graph (which matches PyTorch to 3e-15) as from PyTorch, to
//     the digits printed.
//   - bf16 matmuls (autocast's lists; softmax, norms and the loss in
//     fp32), 0.1: each matmul input rounded to 8 bits (relative 2⁻⁹ ≈
//     2e-3), through 2 layers and their backward pass, about 10 roundings
//     on a path (2e-2), and the losses' log-ratios subtract sums of ~25
//     that differ by ~1, which magnifies a sum's error some 5 times for
//     the loss and its gradients (measured: losses 2.4e-3, gradients
//     6.7e-2 worst, SimPO's).
func TestObjectivesMatchPyTorch(t *testing.T) {
	fx := loadFixture(t)
	m, err := model.Load("../model/testdata/torch_llama")
	if err != nil {
		t.Fatal(err)
	}
	l, err := peft.Load(pairsDir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	wantRef := fx.f64(t, "reference_logps")
	for _, pc := range []precision{
		{"float64", tensor.Float64, amp.FP32, 1e-12, 0},
		{"float32", tensor.Float32, amp.FP32, 4e-6, 1e-6},
		{"bf16", tensor.Float32, amp.BF16, 0.1, 0},
	} {
		tol, whole := pc.tol, cmp.Or(pc.whole, pc.tol)
		// the reference: the base model, no adapter
		rb, rg := sequenceLogProbs(t, m, pc, fx, nil, nil)
		rvm := G.NewTapeMachine(rb.G)
		if err := rvm.RunAll(); err != nil {
			t.Fatal(err)
		}
		ref := append([]float64(nil), toF64(rg.LogProbs.Value())...)
		rvm.Close()
		if e := fixture.RelErr(ref, wantRef); e > tol {
			t.Errorf("%s reference logps: relative error %.3g", pc.name, e)
		}
		for _, o := range fx.objectives {
			t.Run(o.Name+"/"+pc.name, func(t *testing.T) {
				obj := pref.Objective{Loss: pref.Loss(o.Loss), Beta: o.Beta, LabelSmoothing: o.LabelSmoothing, Gamma: o.Gamma}
				if err := obj.Validate(); err != nil {
					t.Fatal(err)
				}
				n := tokens(fx)
				step := &pref.Step{Objective: obj, Batch: pref.Batch{Tokens: n},
					Norm: pref.Norm{Pairs: fx.batch / 2, ChosenTokens: n[0] + n[1]}}
				if obj.NeedsReference() {
					step.Batch.Reference = ref
				}
				nodes := map[string]*G.Node{}
				b, g := sequenceLogProbs(t, m, pc, fx, l.Linear(nodes), step)
				loss, lp := g.Loss, g.LogProbs
				var names []string
				var wrt []*G.Node
				for _, p := range l.Params() { // each module's A and B
					names = append(names, p.Name)
					wrt = append(wrt, nodes[p.Name])
				}
				grads, err := G.Grad(loss, wrt...)
				if err != nil {
					t.Fatal(err)
				}
				vm := G.NewTapeMachine(b.G)
				defer vm.Close()
				if err := vm.RunAll(); err != nil {
					t.Fatal(err)
				}
				if e := fixture.RelErr(toF64(lp.Value()), fx.f64(t, o.Name+".logps")); e > tol {
					t.Errorf("policy logps: relative error %.3g", e)
				}
				got, want := toF64(loss.Value())[0], fx.f64(t, o.Name+".loss")[0]
				el := math.Abs(got-want) / math.Abs(want)
				if el > whole {
					t.Errorf("loss %.15g, PyTorch %.15g (relative %.3g)", got, want, el)
				}
				var worst float64
				var all, allWant []float64
				for i, name := range names {
					g, w := toF64(grads[i].Value()), fx.f64(t, o.Name+".grad."+name)
					e := fixture.RelErr(g, w)
					worst = max(worst, e)
					if e > tol {
						t.Errorf("gradient of %s: relative error %.3g", name, e)
					}
					all, allWant = append(all, g...), append(allWant, w...)
				}
				ew := fixture.RelErr(all, allWant)
				if ew > whole {
					t.Errorf("the gradient, all %d tensors: relative error %.3g", len(names), ew)
				}
				t.Logf("loss %.10f (PyTorch %.10f, relative %.3g); %d adapter gradients: together relative error %.3g (bound %g), worst tensor %.3g (bound %g)", got, want, el, len(names), ew, whole, worst, tol)
			})
		}
	}
}
