package peft_test

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// TestCPUGraphFusionsSameBits: with nn.Builder.RoundInProducts,
// FuseAdapterAdd and HoldBF16Operands, a LoRA model's bf16 graph on a bf16 GEMM that rounds
// its float32 operands (the native driver, on its Go model of VDPBF16PS
// so that it runs on any CPU) reads the fp32 activations its linear
// layers and attention compute on with no casts, and forms each adapter's
// sum as its product's epilogue, and its linear layers read their inputs
// as bf16 bits converted once, and computes the same loss and adapter
// gradients, bit for bit, as without: the GEMM rounds as the cast does,
// the conversion to bits rounds as the GEMM does,
// the activations' gradients add up in the same order, and the epilogue
// does the add's operations. Every module is adapted, with dropout on the
// adapter branch, and the keys and values are grouped (2 query heads, 1
// key/value head).
func TestCPUGraphFusionsSameBits(t *testing.T) {
	m := tinyModel(t)
	ts, err := peft.Targets(linearTargets(m), allModules)
	if err != nil {
		t.Fatal(err)
	}
	l, err := peft.New(peft.Config{R: 2, Alpha: 3, TargetModules: allModules, Dropout: 0.3}, ts, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	perturb(l)
	p := amp.DefaultPolicy(amp.BF16)
	run := func(round bool) (loss float32, grads [][]float32, casts, operands int) {
		b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, BF16: blas.NewNativeBF16Go(2), Workers: 2}, tensor.Float32)
		b.Policy = &p
		b.PackFrozenWeights = true
		b.RoundInProducts, b.FuseAdapterAdd, b.HoldBF16Operands = round, round, round
		bt := buildOn(t, b, m, l)
		gn, err := G.Grad(bt.g.Loss, adapterNodes(l, bt.nodes)...)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range b.G.AllNodes() {
			if n.Op() != nil && strings.HasPrefix(n.Op().String(), "bf16operand#") {
				operands++
			}
			if n.Op() == nil || !strings.HasPrefix(n.Op().String(), "cast#") {
				continue
			}
			for it := b.G.From(n.ID()); it.Next(); { // the cast's operand
				if !b.IsParam(it.Node().(*G.Node)) {
					casts++
				}
			}
		}
		vm := nn.NewTapeMachine(b.Eng, b.G)
		defer vm.Close()
		if err := b.Eng.Run(vm, nn.Pass{Noise: 4242}); err != nil {
			t.Fatal(err)
		}
		for _, n := range gn {
			grads = append(grads, append([]float32(nil), n.Value().Data().([]float32)...))
		}
		return bt.g.Loss.Value().Data().(float32), grads, casts, operands
	}
	loss0, grads0, casts0, operands0 := run(false)
	loss1, grads1, casts1, operands1 := run(true)
	if operands0 != 0 || operands1 == 0 {
		t.Fatalf("%d activations held as bf16 bits with the fusions, %d without: want some, and none", operands1, operands0)
	}
	// per layer: the two norms' outputs, the SwiGLU output read by
	// down_proj, the dropout outputs read by the adapters' A, q and k after
	// the rotation (v is a linear's bf16 output)
	if casts1 >= casts0 {
		t.Fatalf("%d activation casts with the fusions, %d without: want fewer", casts1, casts0)
	}
	if math.Float32bits(loss0) != math.Float32bits(loss1) {
		t.Fatalf("loss %v with the fusions, %v without", loss1, loss0)
	}
	for i := range grads0 {
		for j := range grads0[i] {
			if math.Float32bits(grads0[i][j]) != math.Float32bits(grads1[i][j]) {
				t.Fatalf("gradient %d[%d] = %v with the fusions, %v without", i, j, grads1[i][j], grads0[i][j])
			}
		}
	}
	t.Logf("loss %v and %d adapter gradients the same bits; %d activation casts without, %d with; %d activations held as bits", loss0, len(grads0), casts0, casts1, operands1)
}
