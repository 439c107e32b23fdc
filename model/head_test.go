package model

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/nn/nntest"
)

var (
	headIDs     = []int{0, 5, 3, 9, 4, 0, 7, 7, 10, 6}
	headTargets = []int{5, 3, 9, 4, nn.IgnoreIndex, 7, 7, 10, 6, 8}
)

// The whole model with the fused head, in blocks of 3 of its 10 tokens,
// against float64 central differences: every weight, the tied embedding
// (gradients from the lookup and from the head) included.
func TestFusedHeadModelGradients(t *testing.T) {
	for _, tied := range []bool{false, true} {
		for _, seeded := range []bool{false, true} {
			t.Run(fmt.Sprintf("tied %v, seeded %v", tied, seeded), func(t *testing.T) {
				m, err := New(tinyConfig(tied), 3)
				if err != nil {
					t.Fatal(err)
				}
				b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
				gc := GraphConfig{Batch: 2, SeqLen: 5, Trainable: func(string) bool { return true }, FusedHead: true, HeadChunk: 3}
				var seed *G.Node
				if seeded {
					seed = G.NewScalar(b.G, tensor.Float64, G.WithName("seed"), G.WithValue(1.3))
					gc.LossGrad = seed
				}
				g, err := m.Build(b, gc)
				if err != nil {
					t.Fatal(err)
				}
				if g.Logits != nil {
					t.Fatal("a fused head built logits")
				}
				setBatch(t, g, headIDs, headTargets)
				var params []*G.Node
				for _, s := range Specs(m.Config) {
					params = append(params, g.Params[s.Name])
				}
				var worst float64
				if seeded {
					worst = nntest.GradCheckSeeded(t, b.G, g.Loss, seed, params, 1e-8)
				} else {
					worst = nntest.GradCheck(t, b.G, g.Loss, params, 1e-8)
				}
				t.Logf("%d weights, worst relative error %.2g", len(params), worst)
			})
		}
	}
}

// modelRun is a float32 graph's loss and weight gradients.
type modelRun struct {
	loss  float32
	grads map[string][]float32
}

func runModel(t *testing.T, m *Model, f amp.Format, fused bool, chunk int) modelRun {
	t.Helper()
	return runModelWith(t, m, f, GraphConfig{FusedHead: fused, HeadChunk: chunk})
}

// runModelWith is runModel for any graph options; every weight trains.
func runModelWith(t *testing.T, m *Model, f amp.Format, gc GraphConfig) modelRun {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	if f != amp.FP32 {
		p := amp.DefaultPolicy(f)
		b.Policy = &p
	}
	seed := G.NewScalar(b.G, tensor.Float32, G.WithName("seed"))
	gc.Batch, gc.SeqLen, gc.Trainable = 2, 5, func(string) bool { return true }
	if gc.FusedHead {
		gc.LossGrad = seed
	}
	g, err := m.Build(b, gc)
	if err != nil {
		t.Fatal(err)
	}
	setBatch(t, g, headIDs, headTargets)
	specs := Specs(m.Config)
	var wrt G.Nodes
	for _, s := range specs {
		wrt = append(wrt, g.Params[s.Name])
	}
	grads, err := G.Backpropagate(G.Nodes{g.Loss}, G.Nodes{seed}, wrt)
	if err != nil {
		t.Fatal(err)
	}
	if err := G.Let(seed, float32(0.37)); err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	r := modelRun{loss: g.Loss.Value().Data().(float32), grads: map[string][]float32{}}
	for i, s := range specs {
		r.grads[s.Name] = append([]float32(nil), grads[i].Value().Data().([]float32)...)
	}
	return r
}

// The fused head changes nothing in a model's training step, in any
// precision: with the tokens in one block, the loss and every weight's
// gradient are the unfused graph's bit for bit; in several blocks, only
// the head's weight gradient (the tied embedding's, which includes it)
// sums its tokens in another order, and agrees to fp32 rounding, then one
// ulp of the compute format.
func TestFusedHeadEqualsUnfusedModel(t *testing.T) {
	for _, tied := range []bool{false, true} {
		m, err := New(tinyConfig(tied), 3)
		if err != nil {
			t.Fatal(err)
		}
		head := "lm_head.weight"
		if tied {
			head = "model.embed_tokens.weight"
		}
		for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
			ref := runModel(t, m, f, false, 0)
			for _, chunk := range []int{0, 3} {
				t.Run(fmt.Sprintf("tied %v/%v/chunk %d", tied, f, chunk), func(t *testing.T) {
					got := runModel(t, m, f, true, chunk)
					if math.Float32bits(got.loss) != math.Float32bits(ref.loss) {
						t.Errorf("loss %v, unfused %v", got.loss, ref.loss)
					}
					differ, worst := 0, 0.0
					for name, want := range ref.grads {
						g := got.grads[name]
						var scale float64
						for _, v := range want {
							scale = max(scale, math.Abs(float64(v)))
						}
						for i := range want {
							if math.Float32bits(g[i]) == math.Float32bits(want[i]) {
								continue
							}
							d := math.Abs(float64(g[i] - want[i]))
							differ, worst = differ+1, max(worst, d/scale)
							// several blocks: fp32 sums of 10 tokens' products in
							// two orders, then a rounding to f, relative to the
							// largest gradient value
							tol := 18 * 0x1p-24 * scale
							if f != amp.FP32 {
								tol += math.Ldexp(scale, -7)
							}
							if chunk == 0 || name != head || d > tol {
								t.Errorf("%s[%d] = %v, unfused %v", name, i, g[i], want[i])
								break
							}
						}
					}
					t.Logf("%d gradient values differ from the unfused graph's, by up to %.2g of their weight's largest", differ, worst)
				})
			}
		}
	}
}
