package model

import (
	"fmt"
	"math"
	"testing"

	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/nn/nntest"

	G "gorgonia.org/gorgonia"
)

// checkpointConfigs are models whose layers differ in what a checkpointed
// layer's graph must carry: grouped-query attention, tied or not, and
// qwen3's q/k norms with biases and mistral's window.
func checkpointConfigs() map[string]Config {
	qwen := tinyConfig(false)
	qwen.NumHiddenLayers, qwen.QKNorm, qwen.AttentionBias, qwen.SlidingWindow = 3, true, true, 3
	return map[string]Config{"untied": tinyConfig(false), "tied": tinyConfig(true), "qknorm-bias-window": qwen}
}

// A checkpointed model's gradients against float64 central differences:
// the layers' gradients come from recomputing each layer in a graph of
// its own, shared by all of them.
func TestCheckpointedModelGradients(t *testing.T) {
	for name, c := range checkpointConfigs() {
		t.Run(name, func(t *testing.T) {
			m, err := New(c, 3)
			if err != nil {
				t.Fatal(err)
			}
			b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float64)
			g, err := m.Build(b, GraphConfig{Batch: 2, SeqLen: 5, Trainable: func(string) bool { return true }, FusedHead: true, CheckpointLayers: true})
			if err != nil {
				t.Fatal(err)
			}
			setBatch(t, g, headIDs, headTargets)
			var params []*G.Node
			for _, s := range Specs(m.Config) {
				if g.Params[s.Name] == nil {
					t.Fatalf("no node for %s", s.Name)
				}
				params = append(params, g.Params[s.Name])
			}
			worst := nntest.GradCheck(t, b.G, g.Loss, params, 1e-8)
			t.Logf("%d weights, worst relative error %.2g", len(params), worst)
		})
	}
}

// Checkpointing changes nothing but memory and time: in every precision
// the loss and every weight's gradient are the whole graph's bit for bit.
func TestCheckpointedLayersEqualTheWholeGraph(t *testing.T) {
	for name, c := range checkpointConfigs() {
		m, err := New(c, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
			t.Run(fmt.Sprintf("%s/%v", name, f), func(t *testing.T) {
				ref := runModelWith(t, m, f, GraphConfig{FusedHead: true})
				got := runModelWith(t, m, f, GraphConfig{FusedHead: true, CheckpointLayers: true})
				if math.Float32bits(got.loss) != math.Float32bits(ref.loss) {
					t.Errorf("loss %v, whole graph %v", got.loss, ref.loss)
				}
				for name, want := range ref.grads {
					g := got.grads[name]
					for i := range want {
						if math.Float32bits(g[i]) != math.Float32bits(want[i]) {
							t.Errorf("%s[%d] = %v, whole graph %v", name, i, g[i], want[i])
							break
						}
					}
				}
			})
		}
	}
}
