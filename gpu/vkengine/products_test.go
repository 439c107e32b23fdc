package vkengine

import (
	"fmt"
	"testing"

	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// TestProducts: a compiled training graph lists the GEMMs one run
// records (what ChooseTile times a tile at), counted from the model's
// shape here: each layer's seven projections forward (x·Wᵀ), to the
// input (dY·W) and to the weight (dYᵀ·x), the forward ones twice where
// the layers are checkpointed (their programs recompute them), every one
// with bf16 operands under the bf16 policy; and the head's three
// products; and each layer's attention backward pass with dK and dV, once
// a layer (ChooseSplitDKV times them).
func TestProducts(t *testing.T) {
	e := openEngine(t)
	m := testModels(t, 3)["llama"]
	c := m.Config
	const n = 12 // trainingGraph's batch × seq
	d, kv, f, L := c.HiddenSize, c.NumKeyValueHeads*c.HiddenSize/c.NumAttentionHeads, c.IntermediateSize, c.NumHiddenLayers
	type key struct {
		m, n, k  int
		ta, tb   bool
		operands vulkan.Rounding
	}
	for _, ckpt := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpointed=%v", ckpt), func(t *testing.T) {
			b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 1}, Workers: 1}, tensor.Float32)
			pol := amp.DefaultPolicy(amp.BF16)
			b.Policy = &pol
			trainingGraph(t, b, m, ckpt, 0.5)
			p, err := e.Compile(b.G, b.IsParam)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			fwd := L
			if ckpt {
				fwd = 2 * L
			}
			bf := vulkan.RoundBF16
			want := map[key]int{
				{n, d, d, false, true, bf}: 2 * fwd, {n, kv, d, false, true, bf}: 2 * fwd, {n, f, d, false, true, bf}: 2 * fwd, {n, d, f, false, true, bf}: fwd,
				{n, d, d, false, false, bf}: 2 * L, {n, d, kv, false, false, bf}: 2 * L, {n, d, f, false, false, bf}: 2 * L, {n, f, d, false, false, bf}: L,
				{d, d, n, true, false, bf}: 2 * L, {kv, d, n, true, false, bf}: 2 * L, {f, d, n, true, false, bf}: 2 * L, {d, f, n, true, false, bf}: L,
			}
			got := map[key]int{}
			head := 0
			for _, s := range p.Products() {
				k := key{s.M, s.N, s.K, s.TransA, s.TransB, s.Operands}
				if s.M == c.VocabSize || s.N == c.VocabSize || s.K == c.VocabSize {
					head += s.Count
					continue
				}
				got[k] += s.Count
			}
			for k, w := range want {
				if got[k] != w {
					t.Errorf("%+v: %d products, want %d", k, got[k], w)
				}
			}
			for k, g := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("%+v: %d products not of the model", k, g)
				}
			}
			if head != 3 {
				t.Errorf("%d products of the head, want 3 (logits, dx, dW in one chunk)", head)
			}
			// one backward pass a layer, with dK and dV
			as := p.Attentions()
			if len(as) != 1 || as[0].Count != L || as[0].Shape.Heads != c.NumAttentionHeads || as[0].Shape.KVHeads != c.NumKeyValueHeads || as[0].Shape.Operands != vulkan.RoundBF16 {
				t.Errorf("attention backward passes %+v, want one shape ×%d", as, L)
			}
		})
	}
}
