package vkengine

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
)

// bf16Tol bounds a case computed under amp.DefaultPolicy(amp.BF16)
// against float64 with no rounding at all: values are rounded to bf16
// (relative 2^-9) at the linear layers' outputs and gradients, and two
// engines whose fp32 sums differ in the last bit can round to
// neighbouring bf16 values: a few bf16 ulps of the largest value.
const bf16Tol = 4 * 0x1p-8

// TestRMSNorm compares RMSNorm's forward, dx and dw on the Vulkan engine
// with the float64 graph, for plain rows, Qwen3's per-head variant, rows
// wider than a workgroup (300 > 256), and enough rows (70) that dw sums
// several chunks; and with only dx or only dw wanted.
//
// The bound (fp32): with k = ⌈d/256⌉ and u = 2^-24, rstd is within
// δ = ½γ_{k+10} + 4u of exact (shaders/rmsnorm.comp), y within δ + 3u.
// dx = rstd·(h − x·c), h = g⊙w, c = (Σ h·x)·rstd²/d: the sum is within
// γ_{k+10}·Σ|h·x|, so c is off by (γ_{k+13} + 2δ)·rstd²·Σ|h·x|/d ≤
// (γ_{k+13} + 2δ)·rstd·max|h| (mean |x̂| ≤ 1), and |Δdx_j| ≤ (δ+2u)·|dx_j|
// + rstd·max|h|·(u + γ_2·|x̂_j|·|c|/rstd + |x̂_j|·(γ_{k+13} + 2δ)). With
// k ≤ 2, |x̂_j| ≤ 4 and rstd·max|h| ≤ 2·max|dx| for these normal inputs
// that is under 300u = 1.8e-5 of max|dx|. dw_j = Σ_r g·x̂ over ≤ 70 rows
// in sequential chunk sums of depth ≤ 26 (gpu/vulkan's rmsDWChunks): within
// (γ_26 + δ + 2u)·Σ_r|g·x̂| ≤ 40u·Σ|g·x̂|, and Σ|g·x̂| stays under 4× max|dw|
// here. 2e-5 of each tensor's largest value holds for any correct fp32
// implementation.
func TestRMSNorm(t *testing.T) {
	e := openEngine(t)
	rms := func(n, heads, d int, wantX, wantW bool) func(b *nn.Builder) (*G.Node, G.Nodes) {
		return func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, wantX, n, heads*d)
			w := param(b, "w", 2, 1, wantW, d)
			var wrt G.Nodes
			if wantX {
				wrt = append(wrt, x)
			}
			if wantW {
				wrt = append(wrt, w)
			}
			return b.RMSNormHeads(x, w, heads, 1e-6), wrt
		}
	}
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, c := range []opCase{
		{name: "rows", build: rms(6, 1, 40, true, true), tol: 2e-5},
		{name: "heads", build: rms(5, 4, 16, true, true), tol: 2e-5},
		{name: "wide rows", build: rms(3, 1, 300, true, true), tol: 2e-5},
		{name: "many rows", build: rms(70, 1, 24, true, true), tol: 2e-5},
		{name: "heads many rows", build: rms(9, 8, 8, true, true), tol: 2e-5},
		{name: "dx only", build: rms(6, 2, 12, true, false), tol: 2e-5},
		{name: "dw only", build: rms(6, 2, 12, false, true), tol: 2e-5},
		// A bf16 linear feeds the norm: rmsnorm computes in fp32 and its
		// dx is rounded to the linear output's bf16.
		{name: "after bf16 linear", policy: &bf16, tol: bf16Tol, build: func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, true, 6, 32)
			wl := param(b, "wl", 3, 0.2, true, 4*16, 32)
			w := param(b, "w", 2, 1, true, 16)
			return b.RMSNormHeads(b.Linear(x, wl), w, 4, 1e-6), G.Nodes{x, wl, w}
		}},
	} {
		t.Run(c.name, func(t *testing.T) { checkCase(t, e, c) })
	}
}

// TestRope compares RoPE's forward and backward (the inverse rotation)
// with the float64 graph: rows at r mod T, packed rows whose positions
// restart at each document, scaled frequencies, and a bf16 linear
// feeding it.
//
// The bound (fp32): both engines read the same fp32 cos and sin
// (nn.NewRopeTableFreqs, computed on the host), so only the rotation's
// arithmetic differs: y1 = a·c − b·s rounds two products and a
// difference, within γ_2·(|a·c| + |b·s|) ≤ γ_2·√(a²+b²)·√(c²+s²), and
// √(a²+b²) = √(y1²+y2²) (a rotation keeps the pair's norm; c²+s² is 1
// within 2u) ≤ √2·max|y|: 2√2·u(1+3u) < 3u of the largest value.
func TestRope(t *testing.T) {
	e := openEngine(t)
	const heads, headDim, seqLen = 3, 8, 5
	rope := func(positions []int, invFreq []float32) func(b *nn.Builder) (*G.Node, G.Nodes) {
		return func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, true, 2*seqLen, heads*headDim)
			if invFreq == nil {
				invFreq = nn.RopeInvFreq(headDim, 10000)
			}
			return b.RopeFreqs(x, heads, seqLen, invFreq, positions), G.Nodes{x}
		}
	}
	scaled := nn.RopeInvFreq(headDim, 1e6)
	for i := range scaled {
		scaled[i] /= 8 // a linear scaling, as RopeScaling "linear" makes
	}
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, c := range []opCase{
		{name: "row mod T", build: rope(nil, nil), tol: 3 * u},
		{name: "packed positions", build: rope([]int{0, 1, 2, 0, 1, 0, 1, 2, 3, 4}, nil), tol: 3 * u},
		{name: "scaled frequencies", build: rope([]int{4, 3, 2, 1, 0, 0, 0, 1, 1, 2}, scaled), tol: 3 * u},
		// rope computes in fp32 under the policy; its dx is rounded to
		// the bf16 linear output's format.
		{name: "after bf16 linear", policy: &bf16, tol: bf16Tol, build: func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, true, 2*seqLen, 16)
			w := param(b, "w", 3, 0.3, true, heads*headDim, 16)
			return b.Rope(b.Linear(x, w), heads, headDim, seqLen, 10000), G.Nodes{x, w}
		}},
	} {
		t.Run(c.name, func(t *testing.T) { checkCase(t, e, c) })
	}
}

// TestRopePositionsRefilled: the graph's owner refills the positions
// between runs (packed micro-batches); each Vulkan run must rotate by the
// new ones (HostInts re-uploads them), agreeing with the CPU engine's run
// of the same graph within TestRope's 3u, and a position outside the
// table is an error, not an out-of-range read.
func TestRopePositionsRefilled(t *testing.T) {
	e := openEngine(t)
	const heads, headDim, seqLen, rows = 2, 8, 6, 6
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 1}, Workers: 1}, tensor.Float32)
	positions := make([]int, rows)
	x := input(b, "x", 1, rows, heads*headDim)
	y := b.RopeAt(x, heads, headDim, seqLen, 10000, positions)
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	for _, pos := range [][]int{{0, 1, 2, 3, 4, 5}, {0, 1, 0, 1, 2, 0}, {5, 4, 3, 2, 1, 0}} {
		copy(positions, pos)
		if err := b.Eng.Run(vm, nn.Pass{}); err != nil {
			t.Fatal(err)
		}
		vm.Reset()
		if err := p.Run(nn.Pass{}); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, rows*heads*headDim)
		if err := p.Read(y, got); err != nil {
			t.Fatal(err)
		}
		want := y.Value().Data().([]float32)
		scale := 0.0
		for _, v := range want {
			scale = max(scale, math.Abs(float64(v)))
		}
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); !(d <= 3*u*scale) {
				t.Fatalf("positions %v: y[%d] = %g on Vulkan, %g on the CPU", pos, i, got[i], want[i])
			}
		}
	}
	positions[3] = seqLen
	if err := p.Run(nn.Pass{}); err == nil || !strings.Contains(err.Error(), "position") {
		t.Fatalf("a position outside the table ran (error %v)", err)
	}
}

// embeddingIDs look up rows 3 and 1 several times (their gradients are
// sums, added in position order) and leave rows 2, 4, 5, 6 and 8 of a
// 10-row table unread (their gradients are 0).
var embeddingIDs = []int{3, 1, 3, 7, 0, 3, 1, 9}

// intInput adds an int input holding vals.
func intInput(t *testing.T, b *nn.Builder, name string, vals []int) *G.Node {
	n := b.IntInput(name, len(vals))
	if err := G.Let(n, tensor.New(tensor.WithShape(len(vals)), tensor.WithBacking(append([]int(nil), vals...)))); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEmbedding compares the lookup and the table's gradient with the
// CPU engine bit for bit and with float64: the lookup is a copy, and each
// gradient value is the sum, in position order from +0, of the output
// gradients of the positions that read its row, the order the CPU adds
// them in. Against float64 a sum of m fp32 terms is within γ_{m−1}·Σ|g|
// (scatterBound computes it from the values). A
// 16-bit table (Builder.Param16, bf16 and fp16) is widened exactly; the
// float64 reference reads the same values widened on the host, and the
// output x + emb, one fp32 addition, is within u of it.
func TestEmbedding(t *testing.T) {
	e := openEngine(t)
	const vocab, dim = 10, 12
	lookup := func(ids []int, vocab, dim int) func(b *nn.Builder) (*G.Node, G.Nodes) {
		return func(b *nn.Builder) (*G.Node, G.Nodes) {
			table := param(b, "table", 5, 1, true, vocab, dim)
			return b.Embedding(intInput(t, b, "ids", ids), table), G.Nodes{table}
		}
	}
	// Many ids, over several workgroups: up to 12 uses of a row.
	rng := rand.New(rand.NewPCG(8, 9))
	many := make([]int, 300)
	for i := range many {
		many[i] = rng.IntN(50)
	}
	cases := []opCase{
		{name: "repeated ids", exact: true, tol: scatterBound(embeddingIDs, vocab, dim), build: lookup(embeddingIDs, vocab, dim)},
		{name: "many ids", exact: true, tol: scatterBound(many, 50, 40), build: lookup(many, 50, 40)},
	}
	for _, f := range []amp.Format{amp.BF16, amp.FP16} {
		cases = append(cases, opCase{name: f.String() + " table", exact: true, tol: u, build: func(b *nn.Builder) (*G.Node, G.Nodes) {
			ids := intInput(t, b, "ids", embeddingIDs)
			vals := randoms(5, vocab*dim, 1)
			bits := make([]uint16, len(vals))
			for i, v := range vals {
				bits[i] = f.Bits16(v)
				vals[i] = f.FromBits16(bits[i])
			}
			var table *G.Node
			if b.Dtype == tensor.Float32 {
				table = b.Param16("table", []int{vocab, dim}, bits, f)
			} else { // float64 graphs take no 16-bit weights: the same values
				table = b.Param("table", []int{vocab, dim}, vals, false)
			}
			x := param(b, "x", 6, 1, true, len(embeddingIDs), dim)
			return b.AddScaled(x, b.Embedding(ids, table), 1), G.Nodes{x}
		}})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { checkCase(t, e, c) })
	}
}

// scatterBound is the bound, relative to the largest exact value, on an
// fp32 embedding gradient: each value sums the m_v output gradients of its
// row's uses, within γ_{m_v−1}·Σ|g| of exact in any order. g is the
// harness's output gradient (buildCase: randoms(99, …)).
func scatterBound(ids []int, vocab, dim int) float64 {
	g := randoms(99, len(ids)*dim, 1)
	exact, abs := make([]float64, vocab*dim), make([]float64, vocab*dim)
	uses := make([]int, vocab)
	for r, id := range ids {
		uses[id]++
		for j := range dim {
			exact[id*dim+j] += float64(g[r*dim+j])
			abs[id*dim+j] += math.Abs(float64(g[r*dim+j]))
		}
	}
	worst, scale := 0.0, 0.0
	for i := range exact {
		m := float64(uses[i/dim])
		worst = max(worst, (m-1)*u/(1-(m-1)*u)*abs[i])
		scale = max(scale, math.Abs(exact[i]))
	}
	return worst / scale
}

// TestEmbeddingRejectsIDs: an id outside the vocabulary is the CPU's
// error, not a read outside the table.
func TestEmbeddingRejectsIDs(t *testing.T) {
	e := openEngine(t)
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 1}, Workers: 1}, tensor.Float32)
	ids := intInput(t, b, "ids", embeddingIDs)
	b.Embedding(ids, param(b, "table", 5, 1, true, 10, 4))
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Run(nn.Pass{}); err != nil {
		t.Fatal(err)
	}
	ids.Value().Data().([]int)[4] = 10
	if err := p.Run(nn.Pass{}); err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("id 10 of a 10-row table ran (error %v)", err)
	}
}
