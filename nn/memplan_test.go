package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// planStack builds a two-block transformer-like stack in bf16 (x read by
// several ops, so gorgonia adds its gradients with its own +), plans it
// with opts (none: unplanned), runs it and returns every weight's
// gradient and the plan. With bits, its products run on a bf16 GEMM (the
// Go model of VDPBF16PS) and its linear layers read their inputs as bf16
// bits (Builder.HoldBF16Operands), planned among the float32 values.
func planStack(t *testing.T, plan, bits bool, opts ...PlanOption) ([][]float32, MemoryPlan) {
	t.Helper()
	var g blas.BF16Gemmer
	if bits {
		g = blas.NewNativeBF16Go(2)
	}
	grads, mp, _ := planStackOn(t, plan, g, bits, opts...)
	return grads, mp
}

// planStackOn is planStack whose products run on the bf16 GEMM g (nil:
// none), reading the activations as bits with operands. It also returns
// how many activations' bits their producers wrote, and how many a
// conversion op did.
func planStackOn(t *testing.T, plan bool, g blas.BF16Gemmer, operands bool, opts ...PlanOption) ([][]float32, MemoryPlan, [2]int) {
	t.Helper()
	e := &Engine{BLAS: blas.Native{Workers: 2}, Workers: 2, BF16: g}
	b := NewBuilder(e, tensor.Float32)
	b.RoundInProducts, b.HoldBF16Operands = g != nil, operands
	p := amp.DefaultPolicy(amp.BF16)
	b.Policy = &p
	rng := rand.New(rand.NewPCG(5, 7))
	s := AttentionShape{Batch: 2, SeqLen: 6, Heads: 4, KVHeads: 2, HeadDim: 4}
	n := s.Batch * s.SeqLen
	x := randParam(b, rng, "x", 1, n, 16)
	var ws G.Nodes
	for range 2 {
		norm := randParam(b, rng, "norm", 1, 16)
		wq, wk, wv := randParam(b, rng, "wq", 0.5, 16, 16), randParam(b, rng, "wk", 0.5, 8, 16), randParam(b, rng, "wv", 0.5, 8, 16)
		wo, wg, wu, wd := randParam(b, rng, "wo", 0.5, 16, 16), randParam(b, rng, "wg", 0.5, 24, 16), randParam(b, rng, "wu", 0.5, 24, 16), randParam(b, rng, "wd", 0.5, 16, 24)
		h := b.RMSNorm(x, norm, 1e-5)
		q := b.Rope(b.Linear(h, wq), 4, 4, 6, 10000)
		k := b.Rope(b.Linear(h, wk), 2, 4, 6, 10000)
		x = b.Add(x, b.Linear(b.Attention(q, k, b.Linear(h, wv), s), wo))
		x = b.Add(x, b.Linear(b.SwiGLU(b.Linear(x, wg), b.Linear(x, wu)), wd))
		ws = append(ws, norm, wq, wk, wv, wo, wg, wu, wd)
	}
	grads, err := G.Grad(G.Must(G.Sum(x)), ws...)
	if err != nil {
		t.Fatal(err)
	}
	var mp MemoryPlan
	if plan {
		if mp, err = b.PlanMemory(grads, opts...); err != nil {
			t.Fatal(err)
		}
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	for range 2 { // the second run finds the blocks the first left behind
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		vm.Reset()
	}
	out := make([][]float32, len(grads))
	for i, g := range grads {
		out[i] = append([]float32(nil), f32(g)...)
	}
	var made [2]int
	for _, n := range b.G.AllNodes() {
		if o, ok := n.Op().(*bf16OperandOp); ok {
			made[btoi(!o.byProducer)]++
		}
	}
	return out, mp, made
}

func TestPlanMemorySharesAndKeepsBits(t *testing.T) {
	for _, bits := range []bool{false, true} {
		ref, _ := planStack(t, false, bits)
		got, mp := planStack(t, true, bits, PoisonBlocks())
		if mp.Planned == 0 || mp.BlockBytes >= mp.PlannedBytes {
			t.Fatalf("bf16 operands %v: nothing shared: %v", bits, mp)
		}
		t.Logf("bf16 operands %v: %v", bits, mp)
		for i := range ref {
			for j := range ref[i] {
				if math.Float32bits(ref[i][j]) != math.Float32bits(got[i][j]) {
					t.Fatalf("bf16 operands %v: gradient %d[%d]: %v planned, %v unplanned", bits, i, j, got[i][j], ref[i][j])
				}
			}
		}
	}
}

// A plan that frees each value one op before its last reader is wrong, and
// the poisoned blocks make that visible: the check above can fail.
func TestWrongPlanIsCaught(t *testing.T) {
	for _, bits := range []bool{false, true} {
		ref, _ := planStack(t, false, bits)
		got, _ := planStack(t, true, bits, PoisonBlocks(), planFreeEarly(1))
		if !sameGrads(ref, got) {
			continue
		}
		t.Fatalf("bf16 operands %v: a plan that frees values early computed the same gradients", bits)
	}
}

func sameGrads(a, b [][]float32) bool {
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return true
}

// TestBF16OperandsHalveSavedInputs: holding the linear layers' inputs as
// bf16 bits computes the same gradients, bit for bit, as reading the
// float32 activations (the conversion rounds as the GEMM's packing or
// conversion does), on every bf16 GEMM that runs here, and the plan's
// blocks shrink: the backward pass keeps the bits, 2 bytes an element,
// where it kept the float32 activations.
func TestBF16OperandsHalveSavedInputs(t *testing.T) {
	for _, g := range realBF16Gemmers(t, 2) {
		t.Run(g.Name(), func(t *testing.T) {
			ref, refPlan, _ := planStackOn(t, true, g, false, PoisonBlocks())
			got, gotPlan, made := planStackOn(t, true, g, true, PoisonBlocks())
			// per block: the norm's output, and q and k after the rotation
			// (the producers write them), v and attention's output (linear
			// and attention ops: converted after), the MLP's input and its
			// activation (the producers)
			if want := [2]int{2 * 5, 2 * 2}; made != want {
				t.Errorf("bits written by producers and by conversions: %v, want %v", made, want)
			}
			t.Logf("float32 inputs: %v, %d bytes; bf16 operands: %v, %d bytes", refPlan, refPlan.BlockBytes, gotPlan, gotPlan.BlockBytes)
			if !sameGrads(ref, got) {
				t.Fatal("the gradients changed with the inputs held as bf16 bits")
			}
			if gotPlan.BlockBytes >= refPlan.BlockBytes {
				t.Fatalf("the plan's blocks hold %d bytes with bf16 operands, %d without: want fewer", gotPlan.BlockBytes, refPlan.BlockBytes)
			}
		})
	}
}

// TestPickBlockTakesTheHottest: of the free blocks that fit, the smallest,
// and of those the one freed last (its lines the likeliest in cache);
// else the largest free block grows.
func TestPickBlockTakesTheHottest(t *testing.T) {
	type blk struct {
		size, freed int
		free        bool
	}
	cases := []struct {
		name   string
		blocks []blk
		need   int
		want   int // index, -1: none
		size   int // the block's size afterwards
	}{
		{"freed last of one size", []blk{{16, 3, true}, {16, 9, true}, {16, 5, true}}, 16, 1, 16},
		{"freed last, not first", []blk{{16, 9, true}, {16, 3, true}}, 12, 0, 16},
		{"smallest before hottest", []blk{{32, 9, true}, {16, 1, true}}, 16, 1, 16},
		{"busy blocks skipped", []blk{{16, 9, false}, {16, 2, true}}, 16, 1, 16},
		{"largest grows", []blk{{8, 9, true}, {12, 1, true}}, 16, 1, 16},
		{"none free", []blk{{16, 9, false}}, 16, -1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			blocks := make([]*block, len(c.blocks))
			for i, b := range c.blocks {
				blocks[i] = &block{size: b.size, freed: b.freed, free: b.free}
			}
			got := pickBlock(blocks, c.need)
			if c.want < 0 {
				if got != nil {
					t.Fatalf("picked a block of %d, want none", got.size)
				}
				return
			}
			if got != blocks[c.want] {
				t.Fatalf("picked %+v, want block %d (%+v)", *got, c.want, c.blocks[c.want])
			}
			if got.size != c.size {
				t.Errorf("block size %d after the pick, want %d", got.size, c.size)
			}
		})
	}
}

// TestProducerBitsLiveFromTheProducer: bits that the op producing an
// activation writes (bitsProducer) are planned as written when that op
// runs, not when the op handing them on does, so that no value the tape
// runs in between can be given their block.
func TestProducerBitsLiveFromTheProducer(t *testing.T) {
	b := NewBuilder(&Engine{BLAS: blas.Native{Workers: 2}, BF16: blas.NewNativeBF16Go(2), Workers: 2}, tensor.Float32)
	p := amp.DefaultPolicy(amp.BF16)
	b.Policy = &p
	b.RoundInProducts, b.HoldBF16Operands = true, true
	rng := rand.New(rand.NewPCG(9, 11))
	x := randParam(b, rng, "x", 1, 8, 16)
	h := b.RMSNorm(x, randParam(b, rng, "norm", 1, 16), 1e-5)
	y := b.Linear(h, randParam(b, rng, "w", 0.5, 16, 16))
	order, err := G.Sort(b.G)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[*G.Node]int{}
	for i, n := range order {
		pos[n] = len(order) - 1 - i
	}
	bits := b.bits[h]
	if bits == nil || !bits.Op().(*bf16OperandOp).byProducer {
		t.Fatalf("the norm's output is not held as bits its producer writes (bits node %v)", bits)
	}
	pos[bits] = pos[y] // wherever the tape runs the op handing them on
	if _, def := ownBuffer(bits.Op(), bits, pos); def != pos[h] {
		t.Fatalf("bits planned as written at %d, their producer runs at %d", def, pos[h])
	}
}
