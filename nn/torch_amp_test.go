package nn

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// ampGradFixture is testdata/torch_amp_grads.json, written by
// scripts/gen_amp_grad_fixture.py from PyTorch's autocast (bf16) and
// autograd on inputs chosen so that every fp32 accumulation is exact: the
// only roundings are the rounding points, so rounding where PyTorch rounds
// gives its bits.
type ampGradFixture struct {
	TorchVersion string          `json:"torch_version"`
	Facts        map[string]bool `json:"facts"`
	Layer        struct {
		Batch     int     `json:"batch"`
		SeqLen    int     `json:"seq_len"`
		Hidden    int     `json:"hidden"`
		Heads     int     `json:"heads"`
		KVHeads   int     `json:"kv_heads"`
		HeadDim   int     `json:"head_dim"`
		Rank      int     `json:"rank"`
		Scaling   float64 `json:"scaling"`
		RopeTheta float64 `json:"rope_theta"`
		RopeCos   bitsF32 `json:"rope_cos"`
		RopeSin   bitsF32 `json:"rope_sin"`
		fixtureCase
		R bitsF32 `json:"r"`
		Y bitsF32 `json:"y"`
	} `json:"layer"`
	Fanout struct {
		fixtureCase
		R []bitsF32 `json:"r"`
	} `json:"fanout"`
	SharedWeight struct {
		fixtureCase
		R []bitsF32 `json:"r"`
	} `json:"shared_weight"`
}

type fixtureCase struct {
	Inputs map[string]struct {
		Shape []int   `json:"shape"`
		Bits  bitsF32 `json:"bits"`
	} `json:"inputs"`
	Grads map[string]bitsF32 `json:"grads"`
}

// bitsF32 is a float32 tensor stored as its bit patterns.
type bitsF32 []uint32

func (b bitsF32) f32() []float32 {
	out := make([]float32, len(b))
	for i, u := range b {
		out[i] = math.Float32frombits(u)
	}
	return out
}

func loadAMPGradFixture(t *testing.T) *ampGradFixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/torch_amp_grads.json")
	if err != nil {
		t.Fatal(err)
	}
	var f ampGradFixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return &f
}

// params adds the case's inputs as trainable fp32 params.
func (c fixtureCase) params(b *Builder) map[string]*G.Node {
	ps := map[string]*G.Node{}
	for name, in := range c.Inputs {
		ps[name] = b.Param(name, in.Shape, in.Bits.f32(), true)
	}
	return ps
}

// constant is a fixed fp32 tensor (a loss weight) as a gorgonia constant.
func constant(b *Builder, name string, shape []int, bits bitsF32) *G.Node {
	return G.NewTensor(b.G, tensor.Float32, len(shape), G.WithShape(shape...), G.WithName(name),
		G.WithValue(tensor.New(tensor.WithShape(shape...), tensor.WithBacking(bits.f32()))))
}

// weightedLoss is Σ_i sum(ys[i] ⊙ rs[i]), in gorgonia's own fp32 ops.
func weightedLoss(b *Builder, ys []*G.Node, rs []bitsF32) *G.Node {
	var cost *G.Node
	for i, y := range ys {
		r := constant(b, fmt.Sprintf("r%d", i), shapeOf(y), rs[i])
		term := G.Must(G.Sum(G.Must(G.HadamardProd(y, r))))
		if cost == nil {
			cost = term
		} else {
			cost = G.Must(G.Add(cost, term))
		}
	}
	return cost
}

// compareBits counts the elements of got whose bits differ from want.
func compareBits(t *testing.T, name string, got []float32, want bitsF32) int {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, PyTorch %d", name, len(got), len(want))
	}
	bad := 0
	for i, w := range want {
		if math.Float32bits(got[i]) != w {
			if bad == 0 {
				t.Errorf("%s[%d] = %v (%#08x), PyTorch %v (%#08x)", name, i, got[i], math.Float32bits(got[i]), math.Float32frombits(w), w)
			}
			bad++
		}
	}
	return bad
}

// gradsMatch takes the gradients of cost and compares each with PyTorch's;
// it reports the number of differing values per tensor.
func gradsMatch(t *testing.T, b *Builder, cost *G.Node, ps map[string]*G.Node, want map[string]bitsF32, extra func()) {
	t.Helper()
	names := make([]string, 0, len(ps))
	for n := range ps {
		names = append(names, n)
	}
	sort.Strings(names)
	wrt := make([]*G.Node, len(names))
	for i, n := range names {
		wrt[i] = ps[n]
	}
	grads, err := G.Grad(cost, wrt...)
	if err != nil {
		t.Fatal(err)
	}
	runGraph(t, b)
	if extra != nil {
		extra()
	}
	total, bad := 0, 0
	summary := ""
	for i, n := range names {
		d := compareBits(t, "d"+n, f32(grads[i]), want[n])
		total += len(want[n])
		bad += d
		summary += fmt.Sprintf(" d%s %d/%d", n, d, len(want[n]))
	}
	t.Logf("gradient values differing from PyTorch's:%s (%d of %d)", summary, bad, total)
}

// TestGradientRoundingMatchesPyTorch: bf16 gradients, bit for bit, of
//   - layer: q/k/v projections, rotary, grouped-query attention (each
//     head's dK and dV rounded to bf16, then summed over the group and
//     rounded, as repeat_kv's backward does) and o_proj with a LoRA branch
//     (the attention output's two readers' gradients summed in bf16);
//   - fanout: a bf16 tensor read by three matmuls (bf16(bf16(g2+g1)+g0));
//   - shared_weight: a trainable weight read by three matmuls (its cast is
//     one bf16 tensor, as autocast caches it).
//
// for any worker count and both matmul backends.
func TestGradientRoundingMatchesPyTorch(t *testing.T) {
	f := loadAMPGradFixture(t)
	for fact, ok := range f.Facts {
		if !ok {
			t.Fatalf("fixture records a fact as false: %s", fact)
		}
	}
	for _, eng := range []struct {
		name string
		e    *Engine
	}{{"gonum, 1 worker", &Engine{BLAS: blas.Gonum{}, Workers: 1}}, {"native, 3 workers", &Engine{BLAS: blas.Native{Workers: 3}, Workers: 3}}} {
		newB := func() *Builder {
			b := NewBuilder(eng.e, tensor.Float32)
			p := amp.DefaultPolicy(amp.BF16)
			b.Policy = &p
			return b
		}
		t.Run("layer/"+eng.name, func(t *testing.T) {
			c := f.Layer
			b := newB()
			ps := c.params(b)
			rope := NewRopeTable[float32](c.SeqLen, c.HeadDim, c.RopeTheta)
			compareBits(t, "rope cos", rope.Cos, c.RopeCos)
			compareBits(t, "rope sin", rope.Sin, c.RopeSin)
			s := AttentionShape{Batch: c.Batch, SeqLen: c.SeqLen, Heads: c.Heads, KVHeads: c.KVHeads, HeadDim: c.HeadDim}
			x := ps["x"]
			q := b.Rope(b.Linear(x, ps["wq"]), c.Heads, c.HeadDim, c.SeqLen, c.RopeTheta)
			k := b.Rope(b.Linear(x, ps["wk"]), c.KVHeads, c.HeadDim, c.SeqLen, c.RopeTheta)
			v := b.Linear(x, ps["wv"])
			att := b.Attention(q, k, v, s)
			o := b.AddScaled(b.Linear(att, ps["wo"]), b.Linear(b.Linear(att, ps["lora_a"]), ps["lora_b"]), c.Scaling)
			y := b.Add(x, o)
			if b.Format(att) != amp.BF16 || b.Format(o) != amp.BF16 || b.Format(y) != amp.FP32 {
				t.Fatalf("formats: attention %v, o_proj %v, y %v", b.Format(att), b.Format(o), b.Format(y))
			}
			cost := weightedLoss(b, []*G.Node{y}, []bitsF32{c.R})
			gradsMatch(t, b, cost, ps, c.Grads, func() {
				if d := compareBits(t, "y", f32(y), c.Y); d > 0 {
					t.Errorf("forward: %d of %d values of y differ", d, len(c.Y))
				}
			})
		})
		t.Run("fanout/"+eng.name, func(t *testing.T) {
			c := f.Fanout
			b := newB()
			ps := c.params(b)
			y := b.Linear(ps["x"], ps["w"])
			var zs []*G.Node
			for i := range 3 {
				zs = append(zs, b.Linear(y, ps[fmt.Sprintf("w%d", i)]))
			}
			gradsMatch(t, b, weightedLoss(b, zs, c.R), ps, c.Grads, nil)
		})
		t.Run("shared_weight/"+eng.name, func(t *testing.T) {
			c := f.SharedWeight
			b := newB()
			ps := c.params(b)
			var zs []*G.Node
			for i := range 3 {
				zs = append(zs, b.Linear(ps[fmt.Sprintf("x%d", i)], ps["w"]))
			}
			gradsMatch(t, b, weightedLoss(b, zs, c.R), ps, c.Grads, nil)
		})
	}
}
