package vkengine

import (
	"fmt"
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// gradCountsOf builds m's training graph (fused head, every weight
// trained; checkpointed layers with ckpt) under policy f with the loss's
// gradient seed, runs it once on the CPU engine (e nil) or on e counting
// (CountUnderflows: every gradient the same bits as not counting), and
// returns the gradient values rounded to 16 bits and those sent to zero.
func gradCountsOf(t *testing.T, e *Engine, m *model.Model, f amp.Format, ckpt bool, seed float32) (rounded, under int64) {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	p := amp.DefaultPolicy(f)
	b.Policy = &p
	_, grads := trainingGraph(t, b, m, ckpt, seed)
	pass := nn.Pass{Noise: 7}
	if e == nil {
		vm := G.NewTapeMachine(b.G)
		defer vm.Close()
		if err := b.Eng.Run(vm, pass); err != nil {
			t.Fatal(err)
		}
		return b.Eng.Grads.Take()
	}
	// counting, the gradients are the same bits
	plain := runGraph(t, b, e, pass, 1, grads)
	prog, err := e.Compile(b.G, b.IsParam, CountUnderflows())
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	if err := prog.Run(pass); err != nil {
		t.Fatal(err)
	}
	for i, n := range grads {
		v := make([]float32, len(plain[i]))
		if err := prog.Read(n, v); err != nil {
			t.Fatal(err)
		}
		for j := range v {
			if math.Float32bits(v[j]) != math.Float32bits(float32(plain[i][j])) {
				t.Fatalf("gradient %d, value %d: %v counting, %v not", i, j, v[j], plain[i][j])
			}
		}
	}
	rounded, under, err = prog.TakeGradCounts()
	if err != nil {
		t.Fatal(err)
	}
	return rounded, under
}

// TestGradUnderflowCounts: the device counts the gradient values it
// rounds to 16 bits at the CPU engine's rounding points, every one of
// them (the same total: a site left out or counted twice changes it),
// and the ones the rounding sends to zero, for whole models in fp16 and
// bf16, with checkpointed layers and without, a loss gradient small
// enough that many underflow in fp16. The underflows may differ where a
// value's last bits, which the engines' sums leave different, put it on
// either side of the format's threshold: within 1% of the CPU's count
// (here they are equal).
func TestGradUnderflowCounts(t *testing.T) {
	e := openEngine(t)
	for name, m := range testModels(t, 2) {
		for _, f := range []amp.Format{amp.FP16, amp.BF16} {
			for _, ckpt := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%v/checkpointed=%v", name, f, ckpt), func(t *testing.T) {
					const seed = 2e-6
					cr, cu := gradCountsOf(t, nil, m, f, ckpt, seed)
					gr, gu := gradCountsOf(t, e, m, f, ckpt, seed)
					t.Logf("cpu: %d of %d underflow; device: %d of %d", cu, cr, gu, gr)
					if gr != cr || cr == 0 {
						t.Errorf("the device rounded %d gradient values, the cpu %d", gr, cr)
					}
					if d := gu - cu; d*100 > cu || -d*100 > cu || f == amp.FP16 && cu == 0 {
						t.Errorf("the device counted %d underflows, the cpu %d", gu, cu)
					}
				})
			}
		}
	}
}

// caseCounts runs an op case's graph and its backward pass under its
// policy on the CPU engine and, counting, on e, and returns each engine's
// rounded and underflowed gradient values.
func caseCounts(t *testing.T, e *Engine, c opCase) (cpu, dev [2]int64) {
	t.Helper()
	for _, eng := range []*Engine{nil, e} {
		b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
		b.Policy = c.policy
		out, wrt, dy := buildCase(t, b, c)
		if _, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt); err != nil {
			t.Fatal(err)
		}
		if eng == nil {
			vm := G.NewTapeMachine(b.G)
			if err := b.Eng.Run(vm, c.runPass()); err != nil {
				t.Fatal(err)
			}
			vm.Close()
			cpu[0], cpu[1] = b.Eng.Grads.Take()
			continue
		}
		p, err := eng.Compile(b.G, b.IsParam, CountUnderflows())
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(c.runPass()); err != nil {
			t.Fatal(err)
		}
		r, u, err := p.TakeGradCounts()
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		dev = [2]int64{r, u}

	}
	return cpu, dev
}

// TestGradCountsOfAdapters: LoRA (the scaled branch's sum, dropout) and
// DoRA (its fused backward, whose kernel the counting leaves unrounded
// and rounds after) count the same gradient roundings on the device as
// on the CPU, under the fp16 and bf16 policies.
func TestGradCountsOfAdapters(t *testing.T) {
	e := openEngine(t)
	for _, f := range []amp.Format{amp.FP16, amp.BF16} {
		pol := amp.DefaultPolicy(f)
		for _, kind := range []string{"lora", "dora"} {
			t.Run(fmt.Sprintf("%s/%v", kind, f), func(t *testing.T) {
				wv := doraWeight(doraOut)
				l := doraAdapter(t, wv, amp.FP32)
				l.Config.UseDoRA, l.Config.Dropout = kind == "dora", 0.25
				build := func(b *nn.Builder) (*G.Node, G.Nodes) {
					x := param(b, "x", 1, 1, true, 6, doraIn)
					w := b.Param("proj.weight", []int{doraOut, doraIn}, wv, false)
					nodes := map[string]*G.Node{}
					y := l.Linear(nodes)(b, "proj", x, w, nil)
					wrt := G.Nodes{x, nodes[peft.KeyA("proj")], nodes[peft.KeyB("proj")]}
					if m := nodes[peft.KeyM("proj")]; m != nil {
						wrt = append(wrt, m)
					}
					return y, wrt
				}
				cpu, dev := caseCounts(t, e, opCase{name: kind, policy: &pol, build: build})
				t.Logf("cpu: %d of %d underflow; device: %d of %d", cpu[1], cpu[0], dev[1], dev[0])
				if dev[0] != cpu[0] || cpu[0] == 0 {
					t.Errorf("the device rounded %d gradient values, the cpu %d", dev[0], cpu[0])
				}
				if d := dev[1] - cpu[1]; d*100 > cpu[1] || -d*100 > cpu[1] {
					t.Errorf("the device counted %d underflows, the cpu %d", dev[1], cpu[1])
				}
			})
		}
	}
}
