package vkengine

import (
	"testing"

	G "gorgonia.org/gorgonia"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/nn"
)

// documents returns AttentionShape.Positions for rows packed with
// documents of the given lengths, one list per batch row (each adding up
// to the row's length).
func documents(rows ...[]int) []int {
	var pos []int
	for _, docs := range rows {
		for _, n := range docs {
			for p := range n {
				pos = append(pos, p)
			}
		}
	}
	return pos
}

// attentionCases cover grouped-query attention (2 and 4 query heads per
// key/value head, and none), sequences of several 16-row tiles and a
// partial one, a sliding window, packed documents (also with a window),
// a head dimension over the shaders' 64-wide chunks and not a multiple
// of 16, and both CPU kernels (the same spec).
var attentionCases = []struct {
	name string
	s    nn.AttentionShape
}{
	{"gqa", nn.AttentionShape{Batch: 2, SeqLen: 37, Heads: 4, KVHeads: 2, HeadDim: 16}},
	{"gqa tiled", nn.AttentionShape{Batch: 2, SeqLen: 37, Heads: 4, KVHeads: 2, HeadDim: 16, Kernel: nn.AttentionTiled}},
	{"window", nn.AttentionShape{Batch: 2, SeqLen: 40, Heads: 4, KVHeads: 1, HeadDim: 8, Window: 9}},
	{"packed", nn.AttentionShape{Batch: 2, SeqLen: 36, Heads: 4, KVHeads: 2, HeadDim: 16,
		Positions: documents([]int{15, 21}, []int{30, 6})}},
	{"packed window tiled", nn.AttentionShape{Batch: 2, SeqLen: 36, Heads: 2, KVHeads: 2, HeadDim: 8, Window: 7,
		Positions: documents([]int{5, 20, 11}, []int{36}), Kernel: nn.AttentionTiled}},
	{"mqa head dim 72", nn.AttentionShape{Batch: 1, SeqLen: 20, Heads: 2, KVHeads: 1, HeadDim: 72}},
}

// attentionBuild is a case's graph: q, k and v weights of standard
// deviation 1 (scores of standard deviation about 1) through attention.
func attentionBuild(s nn.AttentionShape) func(b *nn.Builder) (*G.Node, G.Nodes) {
	return func(b *nn.Builder) (*G.Node, G.Nodes) {
		n := s.Batch * s.SeqLen
		q := param(b, "q", 11, 1, true, n, s.Heads*s.HeadDim)
		k := param(b, "k", 12, 1, true, n, s.KVHeads*s.HeadDim)
		v := param(b, "v", 13, 1, true, n, s.KVHeads*s.HeadDim)
		return b.Attention(q, k, v, s), G.Nodes{q, k, v}
	}
}

func TestAttention(t *testing.T) {
	e := openEngine(t)
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, c := range attentionCases {
		t.Run(c.name, func(t *testing.T) {
			checkCase(t, e, opCase{name: c.name + " fp32", build: attentionBuild(c.s), tol: 1e-4})
			checkCase(t, e, opCase{name: c.name + " bf16", build: attentionBuild(c.s), policy: &bf16, tol: 0.1})
		})
	}
}
