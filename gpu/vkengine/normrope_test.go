package vkengine

import (
	"errors"
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
// several chunks; and with only dx or only dw wanted. The fp32 bound of
// each case is rmsNormBound's, computed from the case's values.
func TestRMSNorm(t *testing.T) {
	e := openEngine(t)
	rms := func(name string, n, heads, d int, wantX, wantW bool) opCase {
		return opCase{name: name, tol: rmsNormBound(n*heads, d), build: func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, wantX, n, heads*d)
			w := param(b, "w", 2, 1, wantW, d)
			var wrt G.Nodes
			if wantX {
				wrt = append(wrt, x)
			}
			if wantW {
				wrt = append(wrt, w)
			}
			return b.RMSNormHeads(x, w, heads, rmsEps), wrt
		}}
	}
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, c := range []opCase{
		rms("rows", 6, 1, 40, true, true),
		rms("heads", 5, 4, 16, true, true),
		rms("wide rows", 3, 1, 300, true, true),
		rms("many rows", 70, 1, 24, true, true),
		rms("heads many rows", 9, 8, 8, true, true),
		rms("dx only", 6, 2, 12, true, false),
		rms("dw only", 6, 2, 12, false, true),
		// A bf16 linear feeds the norm: rmsnorm computes in fp32 and its
		// dx is rounded to the linear output's bf16.
		{name: "after bf16 linear", policy: &bf16, tol: bf16Tol, build: func(b *nn.Builder) (*G.Node, G.Nodes) {
			x := param(b, "x", 1, 1, true, 6, 32)
			wl := param(b, "wl", 3, 0.2, true, 4*16, 32)
			w := param(b, "w", 2, 1, true, 16)
			return b.RMSNormHeads(b.Linear(x, wl), w, 4, rmsEps), G.Nodes{x, wl, w}
		}},
	} {
		t.Run(c.name, func(t *testing.T) { checkCase(t, e, c) })
	}
}

// rmsEps is TestRMSNorm's eps.
const rmsEps = 1e-6

// gamma is γ_n = n·u/(1 − n·u), the relative error bound of n fp32
// roundings.

// rmsNormBound bounds |Vulkan − exact| of TestRMSNorm's case with rows
// rows of d values, relative to each tensor's largest exact value (the
// largest ratio of y, dx and dw), from the case's values: x and w from
// param's seeds 1 and 2, g from the harness's (buildCase: randoms(99, …)).
//
// rstd is within δ = ½γ_{⌈d/256⌉+10} + 4u of exact (shaders/rmsnorm.comp:
// the fp32 sum of squares, the mean, inversesqrt's 2 ulp), plus ½u for
// eps rounded to fp32; y = w·(x·rstd) is within (δ + 2u)·|y|, 3u to spare.
// dx = rstd·(h − x·c), h = fl(g·w), c = (Σ_j h·x)·rstd²/d: a sum of d terms
// in any order is within γ_{d−1}·Σ|h·x|, h's rounding adds u·Σ|h·x| and
// the three factors of c 2δ + 3u of |c|, so |Δc| ≤ (γ_{d+3} + 2δ)·rstd²·
// Σ|h·x|/d; then |Δdx_j| ≤ (δ + 2u)·|dx_j| + rstd·(u·|h_j| + γ_2·|x_j·c|) +
// rstd·|x_j|·|Δc| (the rounding of h, of x·c, of the difference, and
// rstd's error with the last product). dw_j = Σ_r g·x·rstd over the rows,
// each term within δ + 2u, summed in any order: within (γ_{rows−1} + δ +
// 2u)·Σ_r|g·x·rstd|. A margin of 1% covers the second-order terms.
func rmsNormBound(rows, d int) float64 {
	x, w, g := randoms(1, rows*d, 1), randoms(2, d, 1), randoms(99, rows*d, 1)
	delta := 0.5*gamma((d+255)/256+10) + 4.5*u
	var yErr, yMax, dxErr, dxMax float64
	dw, dwAbs := make([]float64, d), make([]float64, d)
	for r := range rows {
		xr, gr := x[r*d:(r+1)*d], g[r*d:(r+1)*d]
		var ss, dot, dotAbs float64
		for j, v := range xr {
			h := float64(gr[j]) * float64(w[j])
			ss += float64(v) * float64(v)
			dot += h * float64(v)
			dotAbs += math.Abs(h * float64(v))
		}
		rstd := 1 / math.Sqrt(ss/float64(d)+rmsEps)
		c := dot * rstd * rstd / float64(d)
		dc := (gamma(d+3) + 2*delta) * rstd * rstd * dotAbs / float64(d)
		for j, v := range xr {
			xj, h := float64(v), float64(gr[j])*float64(w[j])
			y := float64(w[j]) * xj * rstd
			yErr, yMax = max(yErr, (delta+3*u)*math.Abs(y)), max(yMax, math.Abs(y))
			dx := rstd * (h - xj*c)
			dxErr = max(dxErr, (delta+2*u)*math.Abs(dx)+rstd*(u*math.Abs(h)+gamma(2)*math.Abs(xj*c))+rstd*math.Abs(xj)*dc)
			dxMax = max(dxMax, math.Abs(dx))
			t := float64(gr[j]) * xj * rstd
			dw[j] += t
			dwAbs[j] += math.Abs(t)
		}
	}
	var dwErr, dwMax float64
	for j := range dw {
		dwErr = max(dwErr, (gamma(rows-1)+delta+2*u)*dwAbs[j])
		dwMax = max(dwMax, math.Abs(dw[j]))
	}
	return 1.01 * max(yErr/yMax, dxErr/dxMax, dwErr/dwMax)
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

// TestNormRopeRunsRepeat: a model's input path (embedding, q_norm-style
// per-head RMSNorm, RoPE at packed positions) gives the same bits at
// every run: every sum has a fixed order, none depends on scheduling.
func TestNormRopeRunsRepeat(t *testing.T) {
	e := openEngine(t)
	const heads, headDim, seqLen = 2, 8, 4
	c := opCase{name: "input path", build: func(b *nn.Builder) (*G.Node, G.Nodes) {
		table := param(b, "table", 5, 1, true, 10, heads*headDim)
		w := param(b, "w", 2, 1, true, headDim)
		h := b.RMSNormHeads(b.Embedding(intInput(t, b, "ids", embeddingIDs), table), w, heads, rmsEps)
		return b.RopeAt(h, heads, headDim, seqLen, 10000, []int{0, 1, 2, 0, 1, 0, 1, 2}), G.Nodes{table, w}
	}}
	first := runVulkan(t, e, c)
	for run := 1; run < 3; run++ {
		again := runVulkan(t, e, c)
		for i, vals := range again.vals {
			for j, v := range vals {
				if math.Float64bits(v) != math.Float64bits(first.vals[i][j]) {
					t.Fatalf("run %d: %s[%d] = %g, run 0 gave %g", run, again.names[i], j, v, first.vals[i][j])
				}
			}
		}
	}
}

// TestRopeCachedUnsupported: a decoding graph's rope reads positions and
// table from a KVCache the Vulkan engine does not hold; compiling it is
// ErrUnsupported, not a rotation by the wrong angles.
func TestRopeCachedUnsupported(t *testing.T) {
	e := openEngine(t)
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 1}, Workers: 1}, tensor.Float32)
	c := nn.NewKVCache(1, 16, nn.RopeInvFreq(8, 10000))
	b.RopeCached(input(b, "x", 1, 3, 16), 2, c)
	p, err := e.Compile(b.G, b.IsParam)
	if err == nil {
		p.Close()
		t.Fatal("a KV-cache rope compiled")
	}
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "KV cache") {
		t.Fatalf("error %v: want ErrUnsupported naming the KV cache", err)
	}
}
