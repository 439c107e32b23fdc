package vkengine

import (
	"fmt"
	"math"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
)

// ckptRun is one run of a fully trained model on the device: the loss,
// each weight's gradient and the bytes the program's buffers held.
type ckptRun struct {
	loss  float32
	grads map[string][]float32
	bytes uint64
}

// runCheckpointed builds m's training graph (fused head, every weight
// trained) with or without checkpointed layers, in format f, compiles it
// for e (planned, with poisoned buffers, when plan is set), runs it twice
// and reads the second run.
func runCheckpointed(t *testing.T, e *Engine, m *model.Model, f amp.Format, ckpt, plan bool) ckptRun {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	if f != amp.FP32 {
		p := amp.DefaultPolicy(f)
		b.Policy = &p
	}
	g, grads := trainingGraph(t, b, m, ckpt, 0.37)
	specs := model.Specs(m.Config)
	layers := 0
	for _, n := range b.G.AllNodes() {
		if s, err := nn.Spec(n); err == nil && s.Kind == "layer" {
			layers++
		}
	}
	if want := map[bool]int{true: m.Config.NumHiddenLayers}[ckpt]; layers != want {
		t.Fatalf("%d checkpointed layers in the graph, want %d", layers, want)
	}
	outs := append(G.Nodes{g.Loss}, grads...)
	var opts []CompileOption
	if plan {
		opts = []CompileOption{PlanMemory(outs...), PoisonMemory()}
	}
	vals, held := runGraphHeld(t, b, e, nn.Pass{Noise: 7}, 2, outs, opts...)
	r := ckptRun{loss: float32(vals[0][0]), grads: map[string][]float32{}, bytes: held}
	for i, s := range specs {
		v := make([]float32, len(vals[1+i]))
		for j, x := range vals[1+i] {
			v[j] = float32(x)
		}
		r.grads[s.Name] = v
	}
	return r
}

// trainingGraph builds m's training graph on b (fused head, every weight
// trained in model.Specs's order, checkpointed layers with ckpt) on fixed
// ids, targets and positions, the loss's gradient seed, and its backward
// pass; it returns the graph and the weights' gradients.
func trainingGraph(t *testing.T, b *nn.Builder, m *model.Model, ckpt bool, seed float32) (*model.Graph, G.Nodes) {
	t.Helper()
	sn := G.NewScalar(b.G, tensor.Float32, G.WithName("loss_grad"))
	const batch, seq = 2, 6
	pos := make([]int, batch*seq)
	for i := range pos {
		pos[i] = i % seq
	}
	g, err := m.Build(b, model.GraphConfig{Batch: batch, SeqLen: seq, Positions: pos, Trainable: func(string) bool { return true },
		FusedHead: true, LossGrad: sn, CheckpointLayers: ckpt})
	if err != nil {
		t.Fatal(err)
	}
	ids := []int{3, 7, 1, 9, 4, 4, 0, 2, 8, 5, 6, 10}
	targets := []int{7, 1, 9, nn.IgnoreIndex, 4, 2, 2, 8, 5, 6, 10, 3}
	for _, in := range []struct {
		n *G.Node
		v []int
	}{{g.IDs, ids}, {g.Targets, targets}} {
		if err := G.Let(in.n, tensor.New(tensor.WithShape(len(in.v)), tensor.WithBacking(in.v))); err != nil {
			t.Fatal(err)
		}
	}
	if err := G.Let(sn, seed); err != nil {
		t.Fatal(err)
	}
	var wrt G.Nodes
	for _, s := range model.Specs(m.Config) {
		wrt = append(wrt, b.Leaf(g.Params[s.Name]))
	}
	grads, err := G.Backpropagate(G.Nodes{g.Loss}, G.Nodes{sn}, wrt)
	if err != nil {
		t.Fatal(err)
	}
	return g, grads
}

// testModels are two random models of layers layers, width 16: one
// Llama-style with grouped-query attention, one with q/k norms, biases
// and a sliding window of 3.
func testModels(t *testing.T, layers int) map[string]*model.Model {
	t.Helper()
	c := model.Config{VocabSize: 11, HiddenSize: 16, IntermediateSize: 24, NumHiddenLayers: layers,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 16, RMSNormEps: 1e-5, RopeTheta: 10000,
		BOSTokenID: 0, EOSTokenID: 1, PadTokenID: 2, InitializerRange: 0.5}
	qwen := c
	qwen.QKNorm, qwen.AttentionBias, qwen.SlidingWindow = true, true, 3
	ms := map[string]*model.Model{}
	for name, c := range map[string]model.Config{"llama": c, "qknorm-bias-window": qwen} {
		m, err := model.New(c, 3)
		if err != nil {
			t.Fatal(err)
		}
		ms[name] = m
	}
	return ms
}

// TestCheckpointedLayers: a model whose layers are checkpointed (each
// recomputed in the backward pass by programs sharing one pool of
// buffers), and the whole graph with its memory planned (values sharing
// buffers, each filled with NaNs before its op writes it), compute the
// unplanned whole graph's loss and every weight's gradient bit for bit on
// the device, in fp32, bf16 and fp16, for layers with grouped-query
// attention, q/k norms, biases and a sliding window; each holds fewer
// bytes of device buffers than the whole graph (at this size the weights
// and their gradients outweigh the activations: TestVulkanMemory in
// train measures a LoRA run).
func TestCheckpointedLayers(t *testing.T) {
	e := openEngine(t)
	for name, m := range testModels(t, 3) {
		for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
			t.Run(fmt.Sprintf("%s/%v", name, f), func(t *testing.T) {
				whole := runCheckpointed(t, e, m, f, false, false)
				runs := []struct {
					name string
					ckptRun
				}{
					{"checkpointed", runCheckpointed(t, e, m, f, true, false)},
					{"planned", runCheckpointed(t, e, m, f, false, true)},
					{"checkpointed and planned", runCheckpointed(t, e, m, f, true, true)},
				}
				for _, got := range runs {
					if math.Float32bits(got.loss) != math.Float32bits(whole.loss) {
						t.Errorf("%s: loss %v, whole graph %v", got.name, got.loss, whole.loss)
					}
					for name, want := range whole.grads {
						g := got.grads[name]
						for i := range want {
							if math.Float32bits(g[i]) != math.Float32bits(want[i]) {
								t.Errorf("%s: %s[%d] = %v, whole graph %v", got.name, name, i, g[i], want[i])
								break
							}
						}
					}
					if !(got.bytes < whole.bytes) {
						t.Errorf("%s: %d bytes of device buffers, whole graph %d", got.name, got.bytes, whole.bytes)
					}
					t.Logf("%s: the same bits; %d bytes of device buffers, whole graph %d", got.name, got.bytes, whole.bytes)
				}

			})
		}
	}
}

// TestLayerProgramsShareTheirPool: every checkpointed layer's programs,
// planned, give each of the layer graph's values the same buffer of the
// shared pool (the k-th buffer plays one part in all of them), and so do
// two compilations of one graph.
func TestLayerProgramsShareTheirPool(t *testing.T) {
	e := openEngine(t)
	c := model.Config{VocabSize: 11, HiddenSize: 16, IntermediateSize: 24, NumHiddenLayers: 4,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 16, RMSNormEps: 1e-5, RopeTheta: 10000,
		BOSTokenID: 0, EOSTokenID: 1, PadTokenID: 2, InitializerRange: 0.5, QKNorm: true, AttentionBias: true}
	m, err := model.New(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	layout := func() [][]int {
		b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
		p := amp.DefaultPolicy(amp.BF16)
		b.Policy = &p
		seed := G.NewScalar(b.G, tensor.Float32, G.WithName("loss_grad"))
		g, err := m.Build(b, model.GraphConfig{Batch: 2, SeqLen: 6, Positions: make([]int, 12), Trainable: func(string) bool { return true },
			FusedHead: true, LossGrad: seed, CheckpointLayers: true})
		if err != nil {
			t.Fatal(err)
		}
		var wrt G.Nodes
		for _, s := range model.Specs(m.Config) {
			wrt = append(wrt, b.Leaf(g.Params[s.Name]))
		}
		grads, err := G.Backpropagate(G.Nodes{g.Loss}, G.Nodes{seed}, wrt)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := e.Compile(b.G, b.IsParam, PlanMemory(append(G.Nodes{g.Loss}, grads...)...))
		if err != nil {
			t.Fatal(err)
		}
		defer prog.Close()
		var out [][]int // per layer program: each value's place in its pool, in the graph's order
		for _, lp := range prog.layers {
			for _, sp := range []*Program{lp.fwd, lp.full} {
				var places []int
				for _, n := range sp.order {
					if n.Op() == nil {
						continue
					}
					for _, b := range append([]*vulkan.Buffer{sp.bufs[n]}, sp.nodes[n].grads...) {
						places = append(places, slices.Index(sp.pool.bufs, b))
					}
				}
				out = append(out, places)
			}
		}
		if len(out) != 2*c.NumHiddenLayers {
			t.Fatalf("%d layer programs, want %d", len(out), 2*c.NumHiddenLayers)
		}
		return out
	}
	first, again := layout(), layout()
	for i, places := range first {
		if ref := first[i%2]; !slices.Equal(places, ref) {
			t.Errorf("layer program %d takes its pool's buffers as %v; the first layer's as %v", i, places, ref)
		}
		if !slices.Equal(places, again[i]) {
			t.Errorf("layer program %d: %v, compiled again %v", i, places, again[i])
		}
	}
}
