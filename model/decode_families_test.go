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
func forwardLogits(t *testing.T, be blas.Backend, m *model.Model, l *peft.Adapter, dt tensor.Dtype, policy *amp.Policy, ids []int) []float64 {
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
// at every position are the training forward's. For every family (llama
// 3.2 with tying and llama3 RoPE scaling, llama with biases, mistral's
// sliding window, qwen2.5's q/k/v biases, qwen3's q/k norms), in fp32
// and bf16 weights, fed as a whole sequence in one run, token by token,
// and a prefix and then token by token:
//
//   - a whole sequence in one run is the training forward's computation
//     call for call: the logits are its bits, on any backend;
//   - fed in pieces, the only difference is in the matrix products: one
//     row against a sequence's rows, and attention over the keys so far
//     against all of them, the later ones weighted 0. On the native
//     backend, whose every element of a product is summed in an order
//     that depends on k alone, and where those zero weights add exact
//     zeros, that changes no bit, with no adapter, LoRA and DoRA
//     (unmerged), under the fp32 and the bf16 policy
//     (TestCachedAttentionMatchesAttention shows it op by op);
//   - on another backend (gonum, OpenBLAS where it loads) the sums may
//     take other orders, and decoding in fp32 is held to the standard
//     TestFamiliesMatchPyTorch holds the training forward to: its largest
//     error against PyTorch's float64 logits, of the largest logit, is
//     within twice that of an fp32 forward: PyTorch's own, or the
//     training graph's on the same backend, whichever is larger (at
//     least 5e-7).
func TestDecodingMatchesTrainingForward(t *testing.T) {
	ents, err := os.ReadDir(familiesDir)
	if err != nil {
		t.Fatal(err)
	}
	bf16 := amp.DefaultPolicy(amp.BF16)
	others := []blas.Backend{blas.Gonum{}}
	if ob, err := blas.OpenOpenBLAS(1); err == nil {
		others = append(others, ob)
	} else {
		t.Logf("OpenBLAS not checked: %v", err)
	}
	native := blas.Native{Workers: 2}
	for _, ent := range ents {
		dir := filepath.Join(familiesDir, ent.Name())
		m, e := loadFamily(t, dir)
		// decoded runs the rows of the fixture through d, prefill tokens
		// first, and returns the logits of every position, row after row.
		decoded := func(t *testing.T, d *model.Decoder, prefill int) [][]float64 {
			t.Helper()
			var rows [][]float64
			for row := 0; row < e.batch; row++ {
				got, err := d.Logits(e.ids[row*e.seq:(row+1)*e.seq], prefill)
				if err != nil {
					t.Fatal(err)
				}
				var flat []float64
				for _, lg := range got {
					flat = append(flat, f64s(lg)...)
				}
				rows = append(rows, flat)
			}
			return rows
		}
		for _, kind := range []string{"none", "lora", "dora"} {
			var l *peft.Adapter
			if kind != "none" {
				l, _ = e.adapterFrom(t, m, kind)
			}
			for _, policy := range []*amp.Policy{nil, &bf16} {
				name := ent.Name() + "/native/" + kind + "/fp32"
				if policy != nil {
					name = ent.Name() + "/native/" + kind + "/bf16"
				}
				t.Run(name, func(t *testing.T) {
					cfg := model.DecodeConfig{Policy: policy}
					if l != nil {
						cfg.Linear = l.Linear(map[string]*G.Node{})
					}
					d := model.NewDecoderWith(m, &nn.Engine{BLAS: native, Workers: 2}, cfg)
					for _, prefill := range []int{e.seq, 1, 3} {
						for row, got := range decoded(t, d, prefill) {
							want := forwardLogits(t, native, m, l, tensor.Float32, policy, e.ids[row*e.seq:(row+1)*e.seq])
							if diff := maxAbsDiff(got, want); diff != 0 {
								t.Errorf("row %d, prefill %d: logits differ from the training forward's by %.3g, want bit for bit", row, prefill, diff)
							}
						}
					}
				})
			}
		}
		exact, torch32 := e.f64(t, "logits"), f64s(mustF32(t, e.f, "logits_fp32"))
		for _, be := range others {
			t.Run(ent.Name()+"/"+be.Name(), func(t *testing.T) {
				var train []float64
				for row := 0; row < e.batch; row++ {
					train = append(train, forwardLogits(t, be, m, nil, tensor.Float32, nil, e.ids[row*e.seq:(row+1)*e.seq])...)
				}
				bound := 2 * max(relErr(torch32, exact), relErr(train, exact), 5e-7)
				d := model.NewDecoderWith(m, &nn.Engine{BLAS: be, Workers: 2}, model.DecodeConfig{})
				for _, prefill := range []int{e.seq, 1, 3} {
					var got []float64
					for _, lg := range decoded(t, d, prefill) {
						got = append(got, lg...)
					}
					if prefill == e.seq {
						if diff := maxAbsDiff(got, train); diff != 0 {
							t.Errorf("rows in one run each: logits differ from the training forward's by %.3g, want bit for bit", diff)
						}
						continue
					}
					if r := relErr(got, exact); r > bound {
						t.Errorf("prefill %d: largest logit error %.3g of the largest logit, bound %.3g", prefill, r, bound)
					} else if prefill == 1 {
						t.Logf("token by token: largest logit error %.2g, bound %.2g", r, bound)
					}
				}
			})
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
