package model_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// forwardLogits is the training graph's forward on one sequence (batch 1,
// unfused head) on be, in dtype dt under policy (nil: fp32), with adapter l.
func forwardLogits(t *testing.T, be blas.Backend, m *model.Model, l *peft.LoRA, dt tensor.Dtype, policy *amp.Policy, ids []int) []float64 {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: be, Workers: 2}, dt)
	b.Policy = policy
	gc := model.GraphConfig{Batch: 1, SeqLen: len(ids)}
	if l != nil {
		gc.Linear = l.Linear(map[string]*G.Node{})
	}
	g, err := m.Build(b, gc)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*G.Node{g.IDs, g.Targets} {
		if err := G.Let(n, tensor.New(tensor.WithShape(len(ids)), tensor.WithBacking(append([]int(nil), ids...)))); err != nil {
			t.Fatal(err)
		}
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	return f64s(g.Logits.Value().Data())
}

// Decoding runs the training graph with a key/value cache, so its logits
// at every position are the training forward's: for every family (llama
// 3.2 with tying and llama3 RoPE scaling, llama with biases, mistral's
// sliding window, qwen2.5's q/k/v biases, qwen3's q/k norms), in fp32
// and bf16 weights, with no adapter, LoRA and DoRA (unmerged), under the
// fp32 and the bf16 policy, fed as a whole sequence in one run, token by
// token, and a prefix and then token by token:
//
//   - a whole sequence in one run is the training forward's computation
//     call for call: the logits are its bits, on any backend;
//   - fed in pieces, the only difference is in the matrix products: one
//     row against a sequence's rows, and attention over the keys so far
//     against all of them, the later ones weighted 0. On the native
//     backend, whose every element of a product is summed in an order
//     that depends on k alone, and where those zero weights add exact
//     zeros, that changes no bit (TestCachedAttentionMatchesAttention
//     shows it op by op). On another backend (gonum here) the sums may
//     take other orders, and the bound is the training forward's own
//     error: decoding's logits differ from its by no more than it
//     differs from the float64 forward (for bf16, the float64 forward of
//     the same weights).
func TestDecodingMatchesTrainingForward(t *testing.T) {
	ents, err := os.ReadDir(familiesDir)
	if err != nil {
		t.Fatal(err)
	}
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, ent := range ents {
		dir := filepath.Join(familiesDir, ent.Name())
		m, e := loadFamily(t, dir)
		for _, be := range []blas.Backend{blas.Native{Workers: 2}, blas.Gonum{}} {
			_, native := be.(blas.Native)
			for _, kind := range []string{"none", "lora", "dora"} {
				if !native && kind != "none" {
					continue // the bound's case; adapters add nothing to it
				}
				var l *peft.LoRA
				if kind != "none" {
					l, _ = e.adapterFrom(t, m, kind)
				}
				for _, policy := range []*amp.Policy{nil, &bf16} {
					name := ent.Name() + "/" + be.Name() + "/" + kind + "/fp32"
					if policy != nil {
						name = ent.Name() + "/" + be.Name() + "/" + kind + "/bf16"
					}
					t.Run(name, func(t *testing.T) {
						cfg := model.DecodeConfig{Policy: policy}
						if l != nil {
							cfg.Linear = l.Linear(map[string]*G.Node{})
						}
						d := model.NewDecoderWith(m, &nn.Engine{BLAS: be, Workers: 2}, cfg)
						for row := 0; row < e.batch; row++ {
							ids := e.ids[row*e.seq : (row+1)*e.seq]
							want := forwardLogits(t, be, m, l, tensor.Float32, policy, ids)
							bound := 0.0
							if !native {
								bound = maxAbsDiff(want, forwardLogits(t, be, m, l, tensor.Float64, nil, ids))
							}
							for _, prefill := range []int{e.seq, 1, 3} {
								got, err := d.Logits(ids, prefill)
								if err != nil {
									t.Fatal(err)
								}
								var flat []float64
								for _, lg := range got {
									flat = append(flat, f64s(lg)...)
								}
								diff := maxAbsDiff(flat, want)
								switch {
								case prefill == e.seq && diff != 0:
									t.Errorf("row %d in one run: logits differ from the training forward's by %.3g, want bit for bit", row, diff)
								case diff > bound:
									t.Errorf("row %d, prefill %d: logits differ from the training forward's by %.3g, bound %.3g", row, prefill, diff, bound)
								}
								if !native && row == 0 && prefill == 1 {
									t.Logf("token by token: %.2g from the training forward, whose own error is %.2g", diff, bound)
								}
							}
						}
					})
				}
			}
		}
	}
}

// maxAbsDiff is the largest |a[i] − b[i]|.
func maxAbsDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var worst float64
	for i := range a {
		worst = max(worst, math.Abs(a[i]-b[i]))
	}
	return worst
}
