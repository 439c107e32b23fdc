package train

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/optim"
)

// fullFineTune runs steps optimizer steps of full fine-tuning, two
// micro-batches each (of different tokens, some ignored), and returns the
// losses and the final weights.
func fullFineTune(t *testing.T, tied bool, f amp.Format, o graphOptions, steps int) ([]float64, map[string][]float32, *runner) {
	t.Helper()
	return fullFineTuneOn(t, &nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tied, f, o, steps)
}

// fullFineTuneOn is fullFineTune on engine eng.
func fullFineTuneOn(t *testing.T, eng *nn.Engine, tied bool, f amp.Format, o graphOptions, steps int) ([]float64, map[string][]float32, *runner) {
	t.Helper()
	m, err := model.New(headTestConfig(tied), 3)
	if err != nil {
		t.Fatal(err)
	}
	const batch, seqLen = 2, 12
	params := trainables(m, nil)
	policy := amp.DefaultPolicy(f)
	ru, err := buildRunner(eng, m, nil, batch, seqLen, params, &policy, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ru.close)
	adamw, err := optim.NewAdamW(optim.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	opt := engineOptimizer{adamw, eng} // as build makes it
	rng := rand.New(rand.NewPCG(4, 4))
	var losses []float64
	for s := 0; s < steps; s++ {
		for micro, weight := range []float32{0.37, 0.63} {
			n := batch * seqLen
			bt := data.Batch{Rows: batch, SeqLen: seqLen, Inputs: make([]int, n), Targets: make([]int, n)}
			for i := range bt.Inputs {
				// a different 40-token slice of the vocabulary each micro-batch
				bt.Inputs[i] = (s*80 + micro*40 + rng.IntN(40)) % 256
				bt.Targets[i] = rng.IntN(259)
				if i%5 == 0 {
					bt.Targets[i] = nn.IgnoreIndex
				}
			}
			loss, err := ru.run(bt, weight, micro == 0, noiseKey(1, s, micro))
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, loss)
		}
		if err := opt.Step(params, 1e-2); err != nil {
			t.Fatal(err)
		}
	}
	w := map[string][]float32{}
	for _, p := range params {
		w[p.Name] = append([]float32(nil), p.Value...)
	}
	return losses, w, ru
}

func headTestConfig(tied bool) model.Config {
	return model.Config{VocabSize: 259, HiddenSize: 16, IntermediateSize: 24, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		InitializerRange: 0.2, TieWordEmbeddings: tied, BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}
}

// Full fine-tuning with the fused head and the row-sparse embedding
// gradient trains exactly as the unfused head and dense gradients did:
// losses and final weights bit for bit, tied or untied, in every
// precision (the tokens of a micro-batch fit one block of the head, whose
// dW is then the unfused product's). The training graph holds no logits,
// and only an untied embedding's gradient is kept row by row.
func TestFusedHeadAndSparseEmbeddingGradsTrainAsBefore(t *testing.T) {
	for _, tied := range []bool{false, true} {
		for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
			t.Run(fmt.Sprintf("tied %v/%v", tied, f), func(t *testing.T) {
				lossRef, wRef, ref := fullFineTune(t, tied, f, graphOptions{unfusedHead: true, denseGrads: true}, 3)
				loss, w, ru := fullFineTune(t, tied, f, graphOptions{}, 3)
				if ref.g.Logits == nil || ru.g.Logits != nil {
					t.Fatalf("logits: unfused %v, fused %v", ref.g.Logits, ru.g.Logits)
				}
				for i, p := range ru.params {
					if sparse := ru.sparse[i] != nil; sparse != (p.Name == "model.embed_tokens.weight" && !tied) {
						t.Errorf("%s kept row by row: %v", p.Name, sparse)
					}
				}
				for i := range lossRef {
					if loss[i] != lossRef[i] {
						t.Errorf("micro-batch %d: loss %v, before %v", i, loss[i], lossRef[i])
					}
				}
				for name, want := range wRef {
					for i, v := range w[name] {
						if math.Float32bits(v) != math.Float32bits(want[i]) {
							t.Errorf("%s[%d] = %v, before %v", name, i, v, want[i])
							break
						}
					}
				}
			})
		}
	}
}

// With the head in several blocks, dW sums its tokens in another order:
// training stays the same to fp32 rounding (the loss of the first
// micro-batch, before any step, exactly).
func TestFusedHeadInBlocksTrainsToRounding(t *testing.T) {
	lossRef, wRef, _ := fullFineTune(t, false, amp.FP32, graphOptions{unfusedHead: true, denseGrads: true}, 2)
	loss, w, _ := fullFineTune(t, false, amp.FP32, graphOptions{headChunk: 5}, 2)
	if loss[0] != lossRef[0] {
		t.Errorf("first loss %v, unfused %v", loss[0], lossRef[0])
	}
	for i := range loss {
		if d := math.Abs(loss[i]-lossRef[i]) / lossRef[i]; d > 1e-5 {
			t.Errorf("micro-batch %d: loss %v, unfused %v", i, loss[i], lossRef[i])
		}
	}
	var worst float64
	for name, want := range wRef {
		for i, v := range w[name] {
			worst = max(worst, math.Abs(float64(v-want[i])))
		}
	}
	// two AdamW steps of lr 1e-2 move a weight by about 2e-2 whatever its
	// gradient's size; rounding differences in the gradient change that by
	// far less than 1e-4 of it
	if worst > 2e-6 {
		t.Errorf("weights differ from the unfused run's by up to %.3g", worst)
	}
	t.Logf("weights differ from the unfused run's by up to %.3g", worst)
}

// The run's optimizer tells the engine of each step: after training, a
// bf16 graph computes with the updated weights, as one built afresh on
// them does, and not with low-precision copies cast before the last step.
func TestOptimizerStepRecastsTheWeights(t *testing.T) {
	for _, f := range []amp.Format{amp.BF16, amp.FP16} {
		_, trained, ru := fullFineTune(t, false, f, graphOptions{}, 2)
		m, err := model.New(headTestConfig(false), 3)
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range trained {
			copy(m.Weights[name].Data, w)
		}
		policy := amp.DefaultPolicy(f)
		fresh, err := buildRunner(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, m, nil, 2, 12, nil, &policy, graphOptions{evalOfFullFineTune: true})
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.close()
		bt := data.Batch{Rows: 2, SeqLen: 12, Inputs: make([]int, 24), Targets: make([]int, 24)}
		for i := range bt.Inputs {
			bt.Inputs[i], bt.Targets[i] = (7*i)%256, (11*i)%256
		}
		got, err := ru.run(bt, 1, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.run(bt, 0, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%v: loss %v after training, %v on a graph built on the trained weights", f, got, want)
		}
	}
}
