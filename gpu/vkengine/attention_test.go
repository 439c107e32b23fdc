package vkengine

import (
	"errors"
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// documents returns AttentionShape.Positions for rows packed with
// documents of the given lengths, one list per batch row (each adding up
// to the row's length).
func documents(rows ...[]int) []int {
	var pos []int
	for _, docs := range rows {
		for _, n := range docs {
			for p := range n {
				pos = append(pos, p)
			}
		}
	}
	return pos
}

// attentionCases cover grouped-query attention (2 and 4 query heads per
// key/value head, and none), a sliding window, packed documents (also
// with a window), a head dimension not a multiple of 16, the largest head
// dimension, and both CPU kernels (the same spec). The shaders walk 64×64
// tiles of scores and are compiled for head dimensions up to 64, 128 and
// 256: the last three cases take several tiles, the last one partial
// (online softmax sums rescaled across tiles, tiles of keys starting
// where the rows' first key is), a window reaching across tiles,
// documents starting mid-tile, and each head-dimension class (64, 80 and
// 128 with one partial 32-column chunk and the next class's first one).
var attentionCases = []struct {
	name string
	s    nn.AttentionShape
}{
	{"gqa", nn.AttentionShape{Batch: 2, SeqLen: 37, Heads: 4, KVHeads: 2, HeadDim: 16}},
	{"gqa tiled", nn.AttentionShape{Batch: 2, SeqLen: 37, Heads: 4, KVHeads: 2, HeadDim: 16, Kernel: nn.AttentionTiled}},
	{"window", nn.AttentionShape{Batch: 2, SeqLen: 40, Heads: 4, KVHeads: 1, HeadDim: 8, Window: 9}},
	{"packed", nn.AttentionShape{Batch: 2, SeqLen: 36, Heads: 4, KVHeads: 2, HeadDim: 16,
		Positions: documents([]int{15, 21}, []int{30, 6})}},
	{"packed window tiled", nn.AttentionShape{Batch: 2, SeqLen: 36, Heads: 2, KVHeads: 2, HeadDim: 8, Window: 7,
		Positions: documents([]int{5, 20, 11}, []int{36}), Kernel: nn.AttentionTiled}},
	{"mqa head dim 72", nn.AttentionShape{Batch: 1, SeqLen: 20, Heads: 2, KVHeads: 1, HeadDim: 72}},
	{"head dim 256", nn.AttentionShape{Batch: 1, SeqLen: 18, Heads: 2, KVHeads: 1, HeadDim: vulkan.AttentionMaxHeadDim}},
	{"tiles head dim 64", nn.AttentionShape{Batch: 1, SeqLen: 150, Heads: 2, KVHeads: 1, HeadDim: 64}},
	{"window across tiles head dim 80", nn.AttentionShape{Batch: 1, SeqLen: 140, Heads: 2, KVHeads: 2, HeadDim: 80, Window: 70}},
	{"packed mid-tile head dim 128", nn.AttentionShape{Batch: 2, SeqLen: 130, Heads: 2, KVHeads: 1, HeadDim: 128,
		Positions: documents([]int{50, 45, 35}, []int{100, 30})}},
}

// Seeds of the case's values: q, k and v (weights of standard deviation
// 1, so scores have standard deviation about 1), and the output's
// gradient (buildCase's).
const seedQ, seedK, seedV, seedDY = 11, 12, 13, 99

func attentionBuild(s nn.AttentionShape) func(b *nn.Builder) (*G.Node, G.Nodes) {
	return attentionBuildWrt(s, "qkv")
}

// attentionBuildWrt is attentionBuild differentiating only with respect
// to the inputs train names ("q", "kv", ...): the others are frozen, and
// the backward op computes no gradient for them.
func attentionBuildWrt(s nn.AttentionShape, train string) func(b *nn.Builder) (*G.Node, G.Nodes) {
	return func(b *nn.Builder) (*G.Node, G.Nodes) {
		n := s.Batch * s.SeqLen
		var wrt G.Nodes
		in := func(name string, seed uint64, cols int) *G.Node {
			x := param(b, name, seed, 1, strings.Contains(train, name), n, cols)
			if strings.Contains(train, name) {
				wrt = append(wrt, x)
			}
			return x
		}
		q, k, v := in("q", seedQ, s.Heads*s.HeadDim), in("k", seedK, s.KVHeads*s.HeadDim), in("v", seedV, s.KVHeads*s.HeadDim)
		return b.Attention(q, k, v, s), wrt
	}
}

// TestAttention compares the Vulkan engine's attention and its gradients
// with the float64 CPU graph, in fp32 and with bf16 autocast, within
// attentionTolerance's bound for the case's values.
func TestAttention(t *testing.T) {
	e := openEngine(t)
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, c := range attentionCases {
		t.Run(c.name, func(t *testing.T) {
			for _, pol := range []*amp.Policy{nil, &bf16} {
				name := c.name + " fp32"
				if pol != nil {
					name = c.name + " bf16"
				}
				tol := attentionTolerance(t, c.s, pol)
				checkCase(t, e, opCase{name: name, build: attentionBuild(c.s), policy: pol, tol: tol})
			}
		})
	}
	// Gradients for some inputs only: the kernels skip dQ's pass, or the
	// dK/dV dispatch, or part of it. Each gradient computed is the same
	// function as before, so the bound of all three holds.
	s := attentionCases[0].s
	tol := attentionTolerance(t, s, nil)
	for _, train := range []string{"q", "k", "v", "kv"} {
		checkCase(t, e, opCase{name: "gqa fp32, gradient of " + train, build: attentionBuildWrt(s, train), tol: tol})
	}
}

// engineGap bounds the relative difference between the two engines' fp32
// values in these cases (TestAttention's fp32 runs: each is within 5e-7
// of float64, relative to the largest value).
const engineGap = 1e-6

// TestAttentionMatchesCPURoundings compares the Vulkan engine with the CPU
// engine's float32 graph under autocast, which rounds at the same points:
// the default bf16 policy (scores and values bf16, softmax fp32), bf16
// with the softmax moved to bf16 too, and fp16.
//
// The largest difference: both engines round the same fp32
// intermediates, which differ between them by at most engineGap before a
// rounding, so an intermediate rounds differently only when its fp32
// value lies that close to a rounding boundary (probability about
// engineGap/ulp: 3·10⁻⁴ per intermediate in bf16). Such a flip changes
// the intermediate by one ulp of its format, and a value computed from
// it by about as much of its own magnitude (a flipped score moves its
// probability by |s|·2⁻⁸ of itself, |s| ≲ 4 here): 4 ulps of the low
// format, relative to each tensor's largest value, allow a flip per
// value with room.
//
// That alone would pass a rounding point left out (about an ulp too), so
// the test also counts the values that differ at all. This part is a
// detection threshold, not a bound: flips are rare (none in bf16 and at
// most 6 values in 4736 in fp16 on lavapipe, whose exp and sum orders
// differ from the CPU's), while each rounding point left out makes a
// third or more of a gradient's values differ (checked by removing each
// from the shaders). The threshold, 64·engineGap/ulp of the values (1.6%
// in bf16, 13% in fp16), leaves room for far more flips than seen and
// stays far below what a missing rounding point does.
func TestAttentionMatchesCPURoundings(t *testing.T) {
	e := openEngine(t)
	bf16 := amp.DefaultPolicy(amp.BF16)
	bf16Softmax := amp.DefaultPolicy(amp.BF16)
	if err := bf16Softmax.Move("softmax", amp.LowPrecision); err != nil {
		t.Fatal(err)
	}
	fp16 := amp.DefaultPolicy(amp.FP16)
	policies := []struct {
		name string
		p    *amp.Policy
		ulp  float64
	}{{"bf16", &bf16, 0x1p-8}, {"bf16 softmax", &bf16Softmax, 0x1p-8}, {"fp16", &fp16, 0x1p-11}}
	for _, c := range attentionCases {
		for _, pol := range policies {
			t.Run(c.name+" "+pol.name, func(t *testing.T) {
				oc := opCase{name: c.name + " " + pol.name, build: attentionBuild(c.s), policy: pol.p}
				cpu, vk := runCPU(t, oc, tensor.Float32), runVulkan(t, e, oc)
				for i := range cpu.vals {
					worst, scale, same := offBy(vk.vals[i], cpu.vals[i])
					if differ, most := len(cpu.vals[i])-same, 64*engineGap/pol.ulp*float64(len(cpu.vals[i])); float64(differ) > most {
						t.Errorf("%s %s: %d of %d values differ from the CPU's %s graph (at most %.0f expected from rounding flips)",
							c.name, cpu.names[i], differ, len(cpu.vals[i]), pol.name, most)
					}
					if !(worst <= 4*pol.ulp) {
						t.Errorf("%s %s: Vulkan off the CPU's %s graph by %.3g of the largest value %.3g (bound 4 ulps, %.3g)",
							c.name, cpu.names[i], pol.name, worst, scale, 4*pol.ulp)
					}
					t.Logf("%s %s %s: Vulkan off the CPU by %.3g ulps of the largest value; %d of %d values the same bits",
						c.name, pol.name, cpu.names[i], worst/pol.ulp, same, len(cpu.vals[i]))
				}
			})
		}
	}
}

// offBy is how far got is from want relative to want's largest |value|
// (that largest value too), and how many values are the same.
func offBy(got, want []float64) (worst, largest float64, same int) {
	for j, x := range want {
		largest = max(largest, math.Abs(x))
		worst = max(worst, math.Abs(got[j]-x))
		if got[j] == x {
			same++
		}
	}
	return worst / largest, largest, same
}

// TestAttentionPositionsChangeBetweenRuns: a compiled graph's positions
// are the graph owner's slice, refilled per micro-batch; the engine must
// upload them at every run. The second run, after the slice is refilled
// with other documents, must give what a graph built with those gives,
// and a third the second's bits.
func TestAttentionPositionsChangeBetweenRuns(t *testing.T) {
	e := openEngine(t)
	s := nn.AttentionShape{Batch: 2, SeqLen: 36, Heads: 4, KVHeads: 2, HeadDim: 16,
		Positions: documents([]int{15, 21}, []int{30, 6})}
	later := documents([]int{36}, []int{4, 12, 20})
	p, nodes := compileAttention(t, e, s)
	if err := p.Run(nn.Pass{}); err != nil {
		t.Fatal(err)
	}
	copy(s.Positions, later)
	if err := p.Run(nn.Pass{}); err != nil {
		t.Fatal(err)
	}
	want := nn.AttentionShape{Batch: 2, SeqLen: 36, Heads: 4, KVHeads: 2, HeadDim: 16, Positions: later}
	ref := runCPU(t, opCase{build: attentionBuild(want)}, tensor.Float64)
	tol := attentionTolerance(t, want, nil)
	read := func() [][]float32 {
		var vals [][]float32
		for _, n := range nodes {
			v := make([]float32, prod(n.Shape()))
			if err := p.Read(n, v); err != nil {
				t.Fatal(err)
			}
			vals = append(vals, v)
		}
		return vals
	}
	got := read()
	for i, v := range got {
		if worst, _, _ := offBy(float64s(v), ref.vals[i]); !(worst <= tol) {
			t.Errorf("%s after the positions changed: off float64 by %.3g of the largest value (bound %.3g)", ref.names[i], worst, tol)
		}
	}
	// The kernels sum in a fixed order without atomics: a run again gives
	// the same bits.
	if err := p.Run(nn.Pass{}); err != nil {
		t.Fatal(err)
	}
	for i, v := range read() {
		for j, x := range v {
			if math.Float32bits(x) != math.Float32bits(got[i][j]) {
				t.Fatalf("%s[%d]: %v, then %v in the next run of the same inputs", ref.names[i], j, got[i][j], x)
			}
		}
	}
}

// compileAttention compiles, for e, attention over q, k and v of
// attentionBuild's values with the gradient of all three for the output
// gradient buildCase gives; it returns the program and the output and
// gradient nodes. The caller closes the program.
func compileAttention(tb testing.TB, e *Engine, s nn.AttentionShape) (*Program, G.Nodes) {
	tb.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	out, wrt := attentionBuild(s)(b)
	dy := b.Input("dy", out.Shape()...)
	if err := G.Let(dy, tensorOf(tensor.Float32, out.Shape(), randoms(seedDY, prod(out.Shape()), 1))); err != nil {
		tb.Fatal(err)
	}
	grads, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt)
	if err == nil {
		var p *Program
		if p, err = e.Compile(b.G, b.IsParam); err == nil {
			tb.Cleanup(p.Close) // before the engine's cleanup closes the device
			return p, append(G.Nodes{out}, grads...)
		}
	}
	tb.Fatal(err)
	return nil, nil
}

// TestAttentionHeadDimTooLarge: a head dimension past the kernels' is
// refused when the graph compiles, as an unsupported op.
func TestAttentionHeadDimTooLarge(t *testing.T) {
	e := openEngine(t)
	s := nn.AttentionShape{Batch: 1, SeqLen: 2, Heads: 1, KVHeads: 1, HeadDim: vulkan.AttentionMaxHeadDim + 8}
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	attentionBuild(s)(b)
	p, err := e.Compile(b.G, b.IsParam)
	if err == nil {
		p.Close()
	}
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "head dimension 264") {
		t.Fatalf("Compile: %v, want ErrUnsupported naming the head dimension", err)
	}
}

// BenchmarkAttention times a run of attention's forward and backward
// passes (and the casts around them) on the test device, at a shape of a
// small model's layer: 8 query heads of 64, 2 key/value heads, 512
// tokens. MIXTUNE_VK_DEVICE picks a GPU.
func BenchmarkAttention(b *testing.B) {
	e := openEngine(b)
	s := nn.AttentionShape{Batch: 1, SeqLen: 512, Heads: 8, KVHeads: 2, HeadDim: 64}
	p, _ := compileAttention(b, e, s)
	defer p.Close()
	// causal: T²/2 query-key pairs per head, each 2·HeadDim flops per
	// product of which the forward does 3 and the backward 9 (scores and
	// dP recomputed, and the softmax row sums in their own pass)
	flops := float64(s.SeqLen*s.SeqLen/2*s.Heads) * 2 * float64(s.HeadDim) * 12
	for b.Loop() {
		if err := p.Run(nn.Pass{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// attentionTolerance bounds, to first order, |computed − exact| of the
// case's output and gradients for any implementation that forms each
// value with fp32 arithmetic, its sums in any order, rounds where the
// policy puts rounding points, and takes exp within Vulkan's 3 + 2|x|
// ulps and a reciprocal within 2.5 ulps. It evaluates the bound value by
// value from the exact (float64) quantities, which it computes itself,
// independently of nn, and checks against nn's float64 graph. It returns
// the largest bound relative to its tensor's largest value, as checkCase
// takes it, with 25% for the second-order terms (relative size ρ ≤ 0.1,
// which it checks).
//
// With u = 2⁻²⁴ (fp32) and e_s, e_p, e_v the unit roundoffs of the
// scores', softmax's and values' formats (0 for fp32, 2⁻⁹ for bf16),
// per query row i with keys j in start..i (n of them), m the row's max:
//   - score s_j = scale·q·k_j, A_j = scale·Σ|q||k_j|: q and k rounded to the
//     scores' format, a d-term fp32 dot product, the scale's product and
//     its own rounding, then the scores' rounding:
//     δs_j ≤ A_j·(2e_s + (d+2)u) + e_s|s_j|.
//   - probability p_j: δp_j ≤ p_j·ρ_j, ρ_j = δs_j + Σ_k p_k δs_k
//   - (3 + 2(m − s_j) + n + 4.5)u + e_p (softmax's first-order
//     sensitivity, exp, the n-term sum, reciprocal and product, rounding).
//   - o = Σ_j round(p_j)·v_j: Σ_j p_j|v_j|·(ρ_j + 2e_v + (n+1)u) + e_v|o|.
//   - dP_j = dO·v_j, B_j = Σ|dO||v_j| (dO rounded to the values' format):
//     δdP_j ≤ B_j·(2e_v + (d+1)u) + (e_v + e_p)|dP_j|.
//   - r = Σ_j p_j·dP_j: δr ≤ Σ_j p_j(ρ_j|dP_j| + δdP_j) + (n+1)u·Σ_j p_j|dP_j|.
//   - dS_j = p_j(dP_j − r): δdS_j ≤ p_j(ρ_j|dP_j − r| + δdP_j + δr)
//   - 2u·p_j(|dP_j| + |r|) + e_s|dS_j|.
//   - dQ = scale·Σ_j dS_j·k_j: scale·Σ_j(δdS_j|k_j| + |dS_j||k_j|(e_s + (n+2)u)) + e_s|dQ|.
//   - dK_j = scale·Σ_heads Σ_i dS_ij·q_i over at most N = group·T terms:
//     scale·Σ(δdS|q| + |dS||q|(e_s + (N+2)u)), plus e_s·Σ_heads|dK_head|
//     where each head's share is rounded (GQA, 16-bit), plus e_s|dK|.
//   - dV_j = Σ_heads Σ_i round(p_ij)·dO_i: Σ p(ρ + e_v)|dO| + p|dO|(e_v + (N+1)u),
//     plus the per-head and final roundings as for dK.
func attentionTolerance(t *testing.T, s nn.AttentionShape, pol *amp.Policy) float64 {
	t.Helper()
	eps := func(op string) float64 {
		if pol == nil {
			return 0
		}
		switch f := pol.Format(op); f {
		case amp.FP32:
			return 0
		case amp.BF16:
			return 0x1p-9
		default:
			t.Fatalf("attentionTolerance: %s in %v (the bound takes fp32 and bf16, whose range needs no underflow term)", op, f)
			return 0
		}
	}
	eS, eP, eV := eps("attention_scores"), eps("softmax"), eps("attention_values")
	n, d, T := s.Batch*s.SeqLen, s.HeadDim, s.SeqLen
	qw, kw, group := s.Heads*d, s.KVHeads*d, s.Heads/s.KVHeads
	scale := 1 / math.Sqrt(float64(d))
	q, k, v := float64s(randoms(seedQ, n*qw, 1)), float64s(randoms(seedK, n*kw, 1)), float64s(randoms(seedV, n*kw, 1))
	g := float64s(randoms(seedDY, n*qw, 1))
	o, dq, dk, dv := make([]float64, n*qw), make([]float64, n*qw), make([]float64, n*kw), make([]float64, n*kw)
	oB, dqB, dkB, dvB := make([]float64, n*qw), make([]float64, n*qw), make([]float64, n*kw), make([]float64, n*kw)
	dkH, dvH := make([]float64, T*d), make([]float64, T*d) // one head's dK and dV at its key/value head
	roundHeadsK, roundHeadsV := group > 1 && eS > 0, group > 1 && eV > 0
	N := float64(group * T)
	worstRho := 0.0
	sc, p, rho, dp, ddp, ds, dds := make([]float64, T), make([]float64, T), make([]float64, T), make([]float64, T), make([]float64, T), make([]float64, T), make([]float64, T)
	for b := range s.Batch {
		for kh := range s.KVHeads {
			kOff := b*T*kw + kh*d
			for h := kh * group; h < (kh+1)*group; h++ {
				clear(dkH)
				clear(dvH)
				qOff := b*T*qw + h*d
				for i := range T {
					st := 0
					if s.Positions != nil {
						st = i - s.Positions[b*T+i]
					}
					if s.Window > 0 {
						st = max(st, i-s.Window+1)
					}
					js := i - st + 1
					nf := float64(js)
					qi, gi := q[qOff+i*qw:][:d], g[qOff+i*qw:][:d]
					m := math.Inf(-1)
					for j := st; j <= i; j++ {
						kj := k[kOff+j*kw:][:d]
						var dot, abs float64
						for x := range d {
							dot += qi[x] * kj[x]
							abs += math.Abs(qi[x] * kj[x])
						}
						sc[j], rho[j] = scale*dot, scale*abs*(2*eS+float64(d+2)*u)+eS*math.Abs(scale*dot) // rho holds δs for now
						m = max(m, sc[j])
					}
					var sum, avg float64
					for j := st; j <= i; j++ {
						p[j] = math.Exp(sc[j] - m)
						sum += p[j]
					}
					for j := st; j <= i; j++ {
						p[j] /= sum
						avg += p[j] * rho[j]
					}
					for j := st; j <= i; j++ {
						rho[j] += avg + (3+2*(m-sc[j])+nf+4.5)*u + eP
						worstRho = max(worstRho, rho[j])
					}
					var r, dr, pdp float64
					for j := st; j <= i; j++ {
						vj := v[kOff+j*kw:][:d]
						var dot, abs float64
						for x := range d {
							o[qOff+i*qw+x] += p[j] * vj[x]
							oB[qOff+i*qw+x] += p[j] * math.Abs(vj[x]) * (rho[j] + 2*eV + (nf+1)*u)
							dot += gi[x] * vj[x]
							abs += math.Abs(gi[x] * vj[x])
						}
						dp[j], ddp[j] = dot, abs*(2*eV+float64(d+1)*u)+(eV+eP)*math.Abs(dot)
						r += p[j] * dp[j]
						dr += p[j] * (rho[j]*math.Abs(dp[j]) + ddp[j])
						pdp += p[j] * math.Abs(dp[j])
					}
					dr += (nf + 1) * u * pdp
					for j := st; j <= i; j++ {
						ds[j] = p[j] * (dp[j] - r)
						dds[j] = p[j]*(rho[j]*math.Abs(dp[j]-r)+ddp[j]+dr) + 2*u*p[j]*(math.Abs(dp[j])+math.Abs(r)) + eS*math.Abs(ds[j])
						kj := k[kOff+j*kw:][:d]
						for x := range d {
							dq[qOff+i*qw+x] += scale * ds[j] * kj[x]
							dqB[qOff+i*qw+x] += scale * (dds[j]*math.Abs(kj[x]) + math.Abs(ds[j]*kj[x])*(eS+(nf+2)*u))
							dkH[j*d+x] += scale * ds[j] * qi[x]
							dkB[kOff+j*kw+x] += scale * (dds[j]*math.Abs(qi[x]) + math.Abs(ds[j]*qi[x])*(eS+(N+2)*u))
							dvH[j*d+x] += p[j] * gi[x]
							dvB[kOff+j*kw+x] += p[j]*math.Abs(gi[x])*(rho[j]+eV) + p[j]*math.Abs(gi[x])*(eV+(N+1)*u)
						}
					}
				}
				for j := range T {
					for x := range d {
						at := kOff + j*kw + x
						dk[at] += dkH[j*d+x]
						dv[at] += dvH[j*d+x]
						if roundHeadsK {
							dkB[at] += eS * math.Abs(dkH[j*d+x])
						}
						if roundHeadsV {
							dvB[at] += eV * math.Abs(dvH[j*d+x])
						}
					}
				}
			}
		}
	}
	final := func(vals, bound []float64, e float64) {
		for i, x := range vals {
			bound[i] += e * math.Abs(x)
		}
	}
	final(o, oB, eV)
	final(dq, dqB, eS)
	final(dk, dkB, eS)
	final(dv, dvB, eV)
	if worstRho > 0.1 {
		t.Fatalf("attentionTolerance: relative probability error bound %.3g: the first-order bound needs it ≤ 0.1", worstRho)
	}
	// This reference and nn's float64 graph are two float64 evaluations of
	// the same function: they agree to about 1e-15 of each tensor's
	// largest value, far inside the bound's slack.
	ref := runCPU(t, opCase{build: attentionBuild(s)}, tensor.Float64)
	tol := 0.0
	for i, mine := range [][]float64{o, dq, dk, dv} {
		bound := [][]float64{oB, dqB, dkB, dvB}[i]
		largest, worstBound, off := 0.0, 0.0, 0.0
		for j, x := range ref.vals[i] {
			largest = max(largest, math.Abs(x))
			worstBound = max(worstBound, bound[j])
			off = max(off, math.Abs(mine[j]-x))
		}
		if !(off <= 1e-12*largest) {
			t.Fatalf("attentionTolerance: its float64 %s is off nn's by %.3g of the largest value %.3g", ref.names[i], off/largest, largest)
		}
		tol = max(tol, 1.25*worstBound/largest)
	}
	return tol
}

// TestAttentionTensorCoreOperands: the engine marks attention's operands
// as 16-bit values (vulkan.AttentionShape.Operands, which lets the
// products run on tensor cores) exactly where they are: under the bf16
// and fp16 policies, with the softmax in fp32 or bf16, q, k and v arrive
// in the scores' and values' format and dO (the backward's fourth input)
// rounded to the output's, the values' format; in fp32 nothing is marked.
func TestAttentionTensorCoreOperands(t *testing.T) {
	e := openEngine(t)
	bf16, fp16 := amp.DefaultPolicy(amp.BF16), amp.DefaultPolicy(amp.FP16)
	bf16Softmax := amp.DefaultPolicy(amp.BF16)
	if err := bf16Softmax.Move("softmax", amp.LowPrecision); err != nil {
		t.Fatal(err)
	}
	s := attentionCases[0].s
	for _, c := range []struct {
		name string
		pol  *amp.Policy
		want vulkan.Rounding
	}{{"fp32", nil, vulkan.NoRounding}, {"bf16", &bf16, vulkan.RoundBF16}, {"bf16 softmax", &bf16Softmax, vulkan.RoundBF16}, {"fp16", &fp16, vulkan.RoundFP16}} {
		b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
		b.Policy = c.pol
		out, wrt, dy := buildCase(t, b, opCase{name: c.name, build: attentionBuild(s), policy: c.pol})
		if _, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt); err != nil {
			t.Fatal(err)
		}
		p, err := e.Compile(b.G, b.IsParam)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, nd := range p.nodes {
			spec := nd.spec
			switch spec.Kind {
			case "attention":
			case "attention.backward":
				spec = *nd.spec.Forward
				if g := p.nodes[nd.inN[3]]; c.want != vulkan.NoRounding && (g == nil || g.spec.Out != spec.Out) {
					t.Errorf("%s: dO does not come from an op rounding it to the output's format %v", c.name, spec.Out)
				}
			default:
				continue
			}
			seen++
			sh, err := attentionShape(p, spec)
			if err != nil {
				t.Fatal(err)
			}
			if sh.Operands != c.want {
				t.Errorf("%s %s: operands marked %v, want %v", c.name, nd.spec.Kind, sh.Operands, c.want)
			}
		}
		p.Close()
		if seen != 2 {
			t.Errorf("%s: %d attention ops, want the forward and its backward", c.name, seen)
		}
	}
}
