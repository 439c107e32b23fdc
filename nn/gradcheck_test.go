package nn

import (
	"fmt"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn/nntest"
)

// checkTol is the largest relative error allowed between analytic and
// float64 central-difference gradients (nntest.GradCheck's two measures),
// as the README states.
const checkTol = 1e-8

// weightedSum reduces out to a scalar with fixed random weights, using
// gorgonia's own ops so the check does not rest on nn's code.
func weightedSum(t *testing.T, b *Builder, out *G.Node, rng *rand.Rand) *G.Node {
	t.Helper()
	if out.IsScalar() {
		return out
	}
	w := make([]float64, out.Shape().TotalSize())
	for i := range w {
		w[i] = rng.Float64()*2 - 1
	}
	r := G.NewTensor(b.G, tensor.Float64, out.Dims(), G.WithShape(out.Shape()...), G.WithName(fmt.Sprintf("weights%d", out.ID())),
		G.WithValue(tensor.New(tensor.WithShape(out.Shape()...), tensor.WithBacking(w))))
	return G.Must(G.Sum(G.Must(G.HadamardProd(out, r))))
}

func randParam(b *Builder, rng *rand.Rand, name string, scale float32, shape ...int) *G.Node {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = (rng.Float32()*2 - 1) * scale
	}
	return b.Param(name, shape, data, true)
}

func intInput(b *Builder, name string, vals []int) *G.Node {
	n := b.IntInput(name, len(vals))
	if err := G.Let(n, tensor.New(tensor.WithShape(len(vals)), tensor.WithBacking(vals))); err != nil {
		panic(err)
	}
	return n
}

func TestOpGradients(t *testing.T) {
	attn := func(b AttentionShape) func(*Builder, *rand.Rand) (*G.Node, []*G.Node) {
		return func(bl *Builder, rng *rand.Rand) (*G.Node, []*G.Node) {
			n := b.Batch * b.SeqLen
			q := randParam(bl, rng, "q", 1, n, b.Heads*b.HeadDim)
			k := randParam(bl, rng, "k", 1, n, b.KVHeads*b.HeadDim)
			v := randParam(bl, rng, "v", 1, n, b.KVHeads*b.HeadDim)
			return bl.Attention(q, k, v, b), []*G.Node{q, k, v}
		}
	}
	cases := []struct {
		name  string
		build func(*Builder, *rand.Rand) (*G.Node, []*G.Node)
	}{
		{"linear", func(b *Builder, rng *rand.Rand) (*G.Node, []*G.Node) {
			x, w := randParam(b, rng, "x", 1, 5, 4), randParam(b, rng, "w", 1, 3, 4)
			return b.Linear(x, w), []*G.Node{x, w}
		}},
		{"rmsnorm", func(b *Builder, rng *rand.Rand) (*G.Node, []*G.Node) {
			// 70 rows: three reduction chunks for the weight gradient
			x, w := randParam(b, rng, "x", 2, 70, 6), randParam(b, rng, "w", 1, 6)
			return b.RMSNorm(x, w, 1e-5), []*G.Node{x, w}
		}},
		{"rope", func(b *Builder, rng *rand.Rand) (*G.Node, []*G.Node) {
			x := randParam(b, rng, "x", 1, 2*5, 3*4)
			return b.Rope(x, 3, 4, 5, 10000), []*G.Node{x}
		}},
		{"attention", attn(AttentionShape{Batch: 2, SeqLen: 4, Heads: 2, KVHeads: 2, HeadDim: 3})},
		{"attention gqa", attn(AttentionShape{Batch: 2, SeqLen: 5, Heads: 4, KVHeads: 2, HeadDim: 2})},
		{"attention mqa", attn(AttentionShape{Batch: 1, SeqLen: 6, Heads: 3, KVHeads: 1, HeadDim: 4})},
		{"swiglu", func(b *Builder, rng *rand.Rand) (*G.Node, []*G.Node) {
			a, u := randParam(b, rng, "gate", 4, 6, 7), randParam(b, rng, "up", 1, 6, 7)
			return b.SwiGLU(a, u), []*G.Node{a, u}
		}},
		{"add scaled", func(b *Builder, rng *rand.Rand) (*G.Node, []*G.Node) {
			x, y := randParam(b, rng, "x", 1, 4, 3), randParam(b, rng, "y", 1, 4, 3)
			return b.AddScaled(x, y, 0.37), []*G.Node{x, y}
		}},
		{"embedding with repeated ids", func(b *Builder, rng *rand.Rand) (*G.Node, []*G.Node) {
			table := randParam(b, rng, "table", 1, 7, 5)
			ids := intInput(b, "ids", []int{3, 0, 3, 6, 3, 1})
			return b.Embedding(ids, table), []*G.Node{table}
		}},
		{"cross-entropy with ignored targets", func(b *Builder, rng *rand.Rand) (*G.Node, []*G.Node) {
			logits := randParam(b, rng, "logits", 3, 6, 9)
			targets := intInput(b, "targets", []int{2, IgnoreIndex, 8, 0, IgnoreIndex, 5})
			return b.CrossEntropy(logits, targets), []*G.Node{logits}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 3}, tensor.Float64)
			out, params := tc.build(b, rng)
			worst := nntest.GradCheck(t, b.G, weightedSum(t, b, out, rng), params, checkTol)
			t.Logf("worst relative error %.2g", worst)
		})
	}
}
