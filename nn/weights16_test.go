package nn

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// Two graphs on one engine may run at the same time: each 16-bit matmul
// converts its weight into a block of its own, so neither reads the
// other's half-converted values. Each graph's y = x·Wᵀ and dx, run
// concurrently, equal its values run alone.
func TestSixteenBitBlocksAreNotSharedBetweenConcurrentRuns(t *testing.T) {
	const n, in, out = 6, 40, 300 // several row blocks of W per product at this width
	eng := &Engine{BLAS: blas.Gonum{}, Workers: 1}
	type graph struct {
		vm     G.VM
		y, dx  *G.Node
		wy, wd []float32 // the values run alone
	}
	graphs := make([]*graph, 2)
	for k := range graphs {
		rng := rand.New(rand.NewPCG(uint64(k), 9))
		b := NewBuilder(eng, tensor.Float32)
		bits := make([]uint16, out*in)
		for i := range bits {
			bits[i] = amp.BF16.Bits16(rng.Float32()*2 - 1)
		}
		x := randParam(b, rng, "x", 1, n, in)
		y := b.Linear(x, b.Param16("w", []int{out, in}, bits, amp.BF16))
		g, err := G.Grad(G.Must(G.Sum(y)), x)
		if err != nil {
			t.Fatal(err)
		}
		gr := &graph{vm: G.NewTapeMachine(b.G), y: y, dx: g[0]}
		defer gr.vm.Close()
		if err := runVM(gr.vm); err != nil {
			t.Fatal(err)
		}
		gr.wy, gr.wd = slices.Clone(f32(y)), slices.Clone(f32(gr.dx))
		graphs[k] = gr
	}
	var wg sync.WaitGroup
	errs := make([]error, len(graphs))
	for k, gr := range graphs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := runVM(gr.vm); err != nil {
					errs[k] = err
					return
				}
				if !slices.Equal(f32(gr.y), gr.wy) || !slices.Equal(f32(gr.dx), gr.wd) {
					t.Errorf("graph %d: a concurrent run computed other values than a run alone", k)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
