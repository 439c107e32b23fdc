package peft_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/peft"
)

// frobRel is ‖a − b‖_F / ‖b‖_F in float64.
func frobRel(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		e := float64(a[i]) - float64(b[i])
		d += e * e
		n += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d / n)
}

// From base + a known rank-r change, extraction at rank r recovers the
// change to 1e-5, and the result loads and merges as an ordinary adapter.
func TestExtractRecoversAKnownRankDelta(t *testing.T) {
	const r = 3
	m := tinyModel(t)
	tuned := cloneWeights(m)
	rng := rand.New(rand.NewPCG(5, 5))
	targets := linearTargets(m)
	for _, tg := range targets {
		w := tuned[tg.Path+".weight"].Data
		u, v := make([]float64, tg.Out*r), make([]float64, r*tg.In)
		for i := range u {
			u[i] = rng.NormFloat64() * 0.1
		}
		for i := range v {
			v[i] = rng.NormFloat64() * 0.1
		}
		for o := 0; o < tg.Out; o++ {
			for j := 0; j < tg.In; j++ {
				var d float64
				for k := 0; k < r; k++ {
					d += u[o*r+k] * v[k*tg.In+j]
				}
				w[o*tg.In+j] += float32(d)
			}
		}
	}
	l, reps, err := peft.Extract(targets, m.Weights, tuned, r, amp.FP32)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for _, rep := range reps {
		worst = max(worst, rep.RelError)
	}
	t.Logf("rank %d: worst relative reconstruction error over %d modules %.2g", r, len(reps), worst)
	if worst > 1e-5 {
		t.Errorf("worst relative error %.2g at the delta's own rank", worst)
	}
	dir := t.TempDir()
	if err := l.Save(dir, "base"); err != nil {
		t.Fatal(err)
	}
	cfg := readJSON(t, dir+"/"+peft.ConfigFile)
	if cfg["r"] != float64(r) || cfg["lora_alpha"] != float64(r) {
		t.Errorf("r = %v, alpha = %v: want both %d (scaling 1)", cfg["r"], cfg["lora_alpha"], r)
	}
	l2, err := peft.Load(dir, peft.Base{Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		merged, err := l2.Merged(tg.Path, m.Weights[tg.Path+".weight"].Data)
		if err != nil {
			t.Fatal(err)
		}
		if e := frobRel(merged, tuned[tg.Path+".weight"].Data); e > 1e-6 {
			t.Errorf("%s: base + loaded adapter is %.2g from the tuned weight", tg.Path, e)
		}
	}
	if _, _, err := peft.Extract(targets, m.Weights, tuned, 5, amp.FP32); err == nil ||
		err.Error() != "rank 5 exceeds min(out, in) = 4 of model.layers.0.self_attn.k_proj" {
		t.Errorf("rank above a module's dimensions: %v", err)
	}
}

// fineTuneFully trains every weight of a copy of m for a few AdamW steps on
// fixed random tokens and returns the tuned weights.
func fineTuneFully(t *testing.T, m *model.Model, steps int) map[string]*model.Tensor {
	t.Helper()
	tuned := &model.Model{Config: m.Config, Weights: cloneWeights(m)}
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float32)
	const batch, seq = 4, 8
	g, err := tuned.Build(b, model.GraphConfig{Batch: batch, SeqLen: seq, Trainable: func(string) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(8, 1))
	ids, tgt := make([]int, batch*seq), make([]int, batch*seq)
	for i := range ids {
		ids[i] = rng.IntN(m.Config.VocabSize)
		tgt[i] = (ids[i]*7 + 3) % m.Config.VocabSize // a learnable map
	}
	G.Let(g.IDs, tensor.New(tensor.WithShape(len(ids)), tensor.WithBacking(ids)))
	G.Let(g.Targets, tensor.New(tensor.WithShape(len(tgt)), tensor.WithBacking(tgt)))
	var params []*optim.Param
	var wrt []*G.Node
	for _, s := range model.Specs(m.Config) {
		w := tuned.Weights[s.Name]
		params = append(params, &optim.Param{Name: s.Name, Shape: w.Shape, Value: w.Data, Grad: make([]float32, len(w.Data))})
		wrt = append(wrt, g.Params[s.Name])
	}
	grads, err := G.Grad(g.Loss, wrt...)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	opt, _ := optim.NewAdamW(optim.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	for i := 0; i < steps; i++ {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		for j, gr := range grads {
			copy(params[j].Grad, gr.Value().Data().([]float32))
		}
		if err := opt.Step(params, 3e-3); err != nil {
			t.Fatal(err)
		}
	}
	return tuned.Weights
}

// The error of extraction against rank from a fully fine-tuned model: it
// falls with the rank and vanishes at full rank. The table goes to the
// test log (go test -v -run ErrorVsRank ./peft/).
func TestExtractErrorVsRank(t *testing.T) {
	m, err := model.New(model.Config{VocabSize: 40, HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 16, RMSNormEps: 1e-5, RopeTheta: 10000,
		InitializerRange: 0.05}, 3)
	if err != nil {
		t.Fatal(err)
	}
	tuned := fineTuneFully(t, m, 20)
	targets := peft.ModelTargets(m)
	var table strings.Builder
	fmt.Fprintf(&table, "rank | mean rel. error | max rel. error | adapter params\n-----|-----------------|----------------|---------------\n")
	prev := math.Inf(1)
	for _, r := range []int{1, 2, 4, 8, 16} {
		l, reps, err := peft.Extract(targets, m.Weights, tuned, r, amp.FP32)
		if err != nil {
			t.Fatal(err)
		}
		var mean, worst float64
		for _, rep := range reps {
			mean += rep.RelError / float64(len(reps))
			worst = max(worst, rep.RelError)
		}
		fmt.Fprintf(&table, "%4d | %15.4f | %14.4f | %d\n", r, mean, worst, l.NumParams())
		if mean > prev {
			t.Errorf("rank %d: mean error %.4g above the smaller rank's %.4g", r, mean, prev)
		}
		prev = mean
		if r == 16 && worst > 1e-6 { // 16 = min(out, in) of k_proj and v_proj, not of the others
			for _, rep := range reps {
				if strings.HasSuffix(rep.Path, "k_proj") || strings.HasSuffix(rep.Path, "v_proj") {
					if rep.RelError > 1e-6 {
						t.Errorf("%s at full rank 16: error %.2g", rep.Path, rep.RelError)
					}
				}
			}
		}
	}
	t.Logf("extraction from a fully fine-tuned model (hidden 32, 2 layers, 14 modules, 20 AdamW steps):\n%s", table.String())
}
