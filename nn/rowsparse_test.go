package nn

import (
	"math/rand/v2"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
)

// A row-sparse embedding gradient, over passes with different ids (the
// rows one pass wrote must not linger into the next), is the gradient of
// Σ c·table[ids] computed directly: row id gets the sum, in position
// order, of the c rows of the positions that looked it up. The dense
// upkeep gives the same values, and the reported rows are the distinct
// ids in first-use order.
func TestRowSparseEmbeddingGradient(t *testing.T) {
	const v, d = 9, 5
	passes := [][]int{{3, 0, 3, 6, 3, 1}, {2, 2, 8, 0, 5, 7}, {4, 4, 4, 4, 4, 4}, {8, 0, 1, 2, 3, 8}}
	rng := rand.New(rand.NewPCG(5, 8))
	c := make([]float64, len(passes[0])*d)
	for i := range c {
		c[i] = rng.Float64()*2 - 1
	}
	build := func(sparse bool) (vm G.VM, ids []int, grad *G.Node, rows func() []int) {
		b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 3}, tensor.Float64)
		table := randParam(b, rng, "table", 1, v, d)
		ids = make([]int, len(passes[0]))
		in := b.IntInput("ids", len(ids))
		if err := G.Let(in, tensor.New(tensor.WithShape(len(ids)), tensor.WithBacking(ids))); err != nil {
			t.Fatal(err)
		}
		out := b.Embedding(in, table)
		cn := G.NewTensor(b.G, tensor.Float64, 2, G.WithShape(len(ids), d), G.WithName("c"),
			G.WithValue(tensor.New(tensor.WithShape(len(ids), d), tensor.WithBacking(c))))
		grads, err := G.Grad(G.Must(G.Sum(G.Must(G.HadamardProd(out, cn)))), table)
		if err != nil {
			t.Fatal(err)
		}
		if sparse {
			var ok bool
			if rows, ok = b.RowSparse(grads[0]); !ok {
				t.Fatal("RowSparse refused an embedding table's gradient")
			}
		}
		return G.NewTapeMachine(b.G), ids, grads[0], rows
	}
	vmS, idsS, gradS, rows := build(true)
	defer vmS.Close()
	vmD, idsD, gradD, _ := build(false)
	defer vmD.Close()
	for p, pass := range passes {
		want := make([]float64, v*d)
		var wantRows []int
		for r, id := range pass {
			for j := 0; j < d; j++ {
				want[id*d+j] += c[r*d+j]
			}
			if !slices.Contains(wantRows, id) {
				wantRows = append(wantRows, id)
			}
		}
		copy(idsS, pass)
		copy(idsD, pass)
		for _, vm := range []G.VM{vmS, vmD} {
			vm.Reset()
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
		}
		for name, g := range map[string]*G.Node{"row-sparse": gradS, "dense": gradD} {
			if got := g.Value().Data().([]float64); !slices.Equal(got, want) {
				t.Errorf("pass %d, %s: gradient %v, want %v", p, name, got, want)
			}
		}
		if !slices.Equal(rows(), wantRows) {
			t.Errorf("pass %d: rows %v, want %v", p, rows(), wantRows)
		}
	}
}

// RowSparse refuses gradients it cannot keep row by row: a tied table's,
// which gorgonia sums with the head's, and any non-embedding gradient.
func TestRowSparseRefuses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 1}, tensor.Float32)
	table := randParam(b, rng, "table", 1, 7, 4)
	w := randParam(b, rng, "w", 1, 3, 4)
	x := b.Embedding(intInput(b, "ids", []int{1, 2, 1}), table)
	loss := b.CrossEntropy(b.Linear(b.Linear(x, w), b.Linear(table, w)), intInput(b, "targets", []int{0, 6, 3}))
	grads, err := G.Grad(loss, table, w)
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"tied table", "linear weight"} {
		if _, ok := b.RowSparse(grads[i]); ok {
			t.Errorf("RowSparse accepted the %s's gradient", name)
		}
	}
}
