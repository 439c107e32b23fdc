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
// unfused head) in dtype dt under policy (nil: fp32), with adapter l.
func forwardLogits(t *testing.T, m *model.Model, l *peft.LoRA, dt tensor.Dtype, policy *amp.Policy, ids []int) []float64 {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, dt)
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
// fp32 and the bf16 policy:
//
//   - a whole sequence in one run is the training forward's computation
//     call for call: the logits are its bits;
//   - fed token by token, or a prefix and then token by token, the only
//     difference is the order of fp32 sums in the matrix products (one
//     row against a sequence's rows; attention over the keys so far
//     against all, the later ones weighted 0), and the bound is the
//     training forward's own error: decoding's logits differ from its by
//     no more than it differs from the float64 forward (for bf16, from
//     the float64 forward of the same weights, which is fp32's).
func TestDecodingMatchesTrainingForward(t *testing.T) {
	ents, err := os.ReadDir(familiesDir)
	if err != nil {
		t.Fatal(err)
	}
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, ent := range ents {
		dir := filepath.Join(familiesDir, ent.Name())
		m, e := loadFamily(t, dir)
		for _, kind := range []string{"none", "lora", "dora"} {
			var l *peft.LoRA
			if kind != "none" {
				l, _ = e.adapterFrom(t, m, kind)
			}
			for _, policy := range []*amp.Policy{nil, &bf16} {
				name := ent.Name() + "/" + kind + "/fp32"
				if policy != nil {
					name = ent.Name() + "/" + kind + "/bf16"
				}
				t.Run(name, func(t *testing.T) {
					cfg := model.DecodeConfig{Policy: policy}
					if l != nil {
						cfg.Linear = l.Linear(map[string]*G.Node{})
					}
					d := model.NewDecoderWith(m, &nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, cfg)
					for row := 0; row < e.batch; row++ {
						ids := e.ids[row*e.seq : (row+1)*e.seq]
						want := forwardLogits(t, m, l, tensor.Float32, policy, ids)
						exact := forwardLogits(t, m, l, tensor.Float64, nil, ids)
						bound := maxAbsDiff(want, exact)
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
							if prefill == e.seq {
								if diff != 0 {
									t.Errorf("row %d in one run: logits differ from the training forward's by %.3g, want bit for bit", row, diff)
								}
								continue
							}
							if diff > bound {
								t.Errorf("row %d, prefill %d: logits differ from the training forward's by %.3g, more than its own error %.3g", row, prefill, diff, bound)
							}
							if row == 0 && prefill == 1 {
								t.Logf("token by token: %.2g from the training forward, whose error is %.2g", diff, bound)
							}
						}
					}
				})
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
