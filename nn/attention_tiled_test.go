package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn/nntest"
)

// packed returns Positions for batch rows packed with documents of the
// given lengths, the same documents in every row (each row's lengths must
// add up to seq).
func packed(batch int, docs ...int) []int {
	var row []int
	for _, n := range docs {
		for p := 0; p < n; p++ {
			row = append(row, p)
		}
	}
	var pos []int
	for range batch {
		pos = append(pos, row...)
	}
	return pos
}

// tiledCases cover what the tiled kernel must keep of the full one: GQA
// and MQA, packed documents whose boundaries fall inside and across
// blocks, sliding windows short enough that later blocks skip keys, and
// lengths that are not a multiple of attnTile (64).
var tiledCases = []struct {
	name string
	s    AttentionShape
}{
	{"mha one partial block", AttentionShape{Batch: 2, SeqLen: 9, Heads: 2, KVHeads: 2, HeadDim: 3}},
	{"gqa two blocks", AttentionShape{Batch: 1, SeqLen: 70, Heads: 4, KVHeads: 2, HeadDim: 2}},
	{"mqa packed documents", AttentionShape{Batch: 1, SeqLen: 100, Heads: 3, KVHeads: 1, HeadDim: 2, Positions: packed(1, 40, 35, 25)}},
	{"gqa window", AttentionShape{Batch: 1, SeqLen: 100, Heads: 2, KVHeads: 1, HeadDim: 3, Window: 20}},
	{"gqa packed documents and window", AttentionShape{Batch: 2, SeqLen: 100, Heads: 2, KVHeads: 1, HeadDim: 2,
		Positions: packed(2, 3, 70, 27), Window: 33}},
}

// longCases are compared with the full kernel but too long for a
// gradient check: past the native backend's k-blocking (256), where the
// two kernels' sums over keys take different orders.
var longCases = []struct {
	name string
	s    AttentionShape
}{
	{"gqa long", AttentionShape{Batch: 1, SeqLen: 300, Heads: 4, KVHeads: 2, HeadDim: 16}},
	{"gqa long packed documents and window", AttentionShape{Batch: 2, SeqLen: 600, Heads: 2, KVHeads: 1, HeadDim: 16,
		Positions: packed(2, 100, 450, 50), Window: 400}},
}

// The tiled kernel's gradients against float64 central differences.
func TestTiledAttentionGradients(t *testing.T) {
	for _, tc := range tiledCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 3}, tensor.Float64)
			s := tc.s
			s.Kernel = AttentionTiled
			q, k, v := attnInputs(b, rng, s)
			out := b.Attention(q, k, v, s)
			if _, ok := out.Op().(*attentionTiledOp[float64]); !ok {
				t.Fatalf("Kernel: AttentionTiled built %T", out.Op())
			}
			worst := nntest.GradCheck(t, b.G, weightedSum(t, b, out, rng), []*G.Node{q, k, v}, checkTol)
			t.Logf("worst relative error %.2g", worst)
		})
	}
}

// attnInputs draws attention's inputs q, k and v of shape s, in [-1, 1),
// from rng, as parameters that need gradients.
func attnInputs(b *Builder, rng *rand.Rand, s AttentionShape) (q, k, v *G.Node) {
	n := s.Batch * s.SeqLen
	q = randParam(b, rng, "q", 1, n, s.Heads*s.HeadDim)
	k = randParam(b, rng, "k", 1, n, s.KVHeads*s.HeadDim)
	v = randParam(b, rng, "v", 1, n, s.KVHeads*s.HeadDim)
	return q, k, v
}

// attnResult is one run's output and input gradients, and its inputs:
// q, k, v and the weighting r of the output whose gradients are taken.
type attnResult struct{ out, dq, dk, dv, q, k, v, r []float64 }

// runAttention builds attention with kernel kind on seeded random inputs,
// takes the gradients of a fixed random weighting of its output and
// returns them with the output. f != FP32 runs the default low-precision
// policy of f.
func runAttention(t *testing.T, s AttentionShape, kind AttentionKernel, dt tensor.Dtype, f amp.Format, eng *Engine) attnResult {
	t.Helper()
	var p *amp.Policy
	if f != amp.FP32 {
		dp := amp.DefaultPolicy(f)
		p = &dp
	}
	return runAttentionPolicy(t, s, kind, dt, p, eng)
}

// runAttentionPolicy is runAttention under precision policy p (nil: fp32).
func runAttentionPolicy(t *testing.T, s AttentionShape, kind AttentionKernel, dt tensor.Dtype, p *amp.Policy, eng *Engine) attnResult {
	t.Helper()
	b := NewBuilder(eng, dt)
	b.Policy = p
	rng := rand.New(rand.NewPCG(3, 5))
	s.Kernel = kind
	q, k, v := attnInputs(b, rng, s)
	out := b.Attention(q, k, v, s)
	r := randParam(b, rng, "r", 1, s.Batch*s.SeqLen, s.Heads*s.HeadDim)
	grads, err := G.Grad(G.Must(G.Sum(G.Must(G.HadamardProd(out, r)))), q, k, v)
	if err != nil {
		t.Fatal(err)
	}
	runGraph(t, b)
	get := func(n *G.Node) []float64 {
		switch d := n.Value().Data().(type) {
		case []float64:
			return append([]float64(nil), d...)
		case []float32:
			r := make([]float64, len(d))
			for i, x := range d {
				r[i] = float64(x)
			}
			return r
		}
		t.Fatalf("%s holds %T", n.Name(), n.Value().Data())
		return nil
	}
	return attnResult{get(out), get(grads[0]), get(grads[1]), get(grads[2]), get(q), get(k), get(v), get(r)}
}

// relDiff is max|a−b| / max|b|: the difference relative to the tensor's scale.
func relDiff(a, b []float64) float64 {
	var d, m float64
	for i := range b {
		d = max(d, math.Abs(a[i]-b[i]))
		m = max(m, math.Abs(b[i]))
	}
	if m == 0 {
		return d
	}
	return d / m
}

// ulpDiff is the largest |a−b| in units of format f's spacing at
// max(|a|, |b|), and how many elements differ at all.
func ulpDiff(f amp.Format, a, b []float64) (worst float64, differ int) {
	for i := range b {
		if a[i] != b[i] {
			differ++
			worst = max(worst, math.Abs(a[i]-b[i])/ulp(f, max(math.Abs(a[i]), math.Abs(b[i]))))
		}
	}
	return worst, differ
}

// groupUlpDiff is the largest |a−b| in units of group ulps of format f at
// the largest |b|: the bound for a sum of group values each rounded to f.
func groupUlpDiff(f amp.Format, a, b []float64, group int) float64 {
	var d, scale float64
	for i := range b {
		d = max(d, math.Abs(a[i]-b[i]))
		scale = max(scale, math.Abs(b[i]))
	}
	return d / (float64(group) * ulp(f, scale))
}

// attnBound is, per value of out, dq, dk and dv, how far two correct
// computations of attention under precision policy f may be apart when
// their BLAS sums in other orders (any library, any kernel, any block
// shape). It propagates, to first order, from float64 intermediates of
// in's inputs (S = scale·QKᵀ, P, dP = G·Vᵀ, D = rowsum(P∘dP), dS =
// P∘(dP − D)), with ε(x) one ulp of f at |x| where the policy rounds x
// to a 16-bit format (a value computed in another order may round to the
// neighbouring 16-bit value), 0 in fp32, and γ_k as in gamma:
//
//	ΔS  = 2γ_hd·scale·Σ|q||k| + ε(S)
//	ΔP  = P·(ΔS + Σ_row P·ΔS) + 2γ_(L+4)·P + ε(P)      (softmax in fp32)
//	Δout = Σ ΔP·|V| + 2γ_L·Σ P·|V| + ε(out)
//	ΔdP = 2γ_hd·Σ|g||v| + 2ε(dP)                       (two roundings)
//	ΔD  = Σ (ΔP·|dP| + P·ΔdP) + 2γ_L·Σ P·|dP|
//	ΔdS = ΔP·|dP − D| + P·(ΔdP + ΔD) + 2γ_4·P·(|dP| + |D|) + ε(dS)
//	Δdq = scale·Σ (ΔdS·|K| + 2γ_L·|dS|·|K|) + ε(dq)
//	Δdk = Σ_heads (scale·Σ (ΔdS·|Q| + 2γ_L·|dS|·|Q|) + ε(dk_head)) + ε(dk)
//	Δdv = Σ_heads (Σ (ΔP·|G| + 2γ_L·P·|G|) + ε(dv_head)) + ε(dv)
//
// with L the sequence length (at least the keys of any row, and the rows
// of any key). Rounding every one of these points, where the default
// policy keeps some in fp32, only loosens the bound. Second-order terms
// are below 2⁻²⁰ of the first-order ones here and are covered by
// doubling the total.
func attnBound(s AttentionShape, f amp.Format, in attnResult) attnResult {
	eps := func(x float64) float64 {
		if f == amp.FP32 {
			return 0
		}
		return ulp(f, math.Abs(x))
	}
	n, hd, group := s.SeqLen, s.HeadDim, s.Heads/s.KVHeads
	qw, kw := s.Heads*hd, s.KVHeads*hd
	scale := 1 / math.Sqrt(float64(hd))
	gL, gHD := 2*gamma(n), 2*gamma(hd)
	b := attnResult{out: make([]float64, len(in.out)), dq: make([]float64, len(in.q)), dk: make([]float64, len(in.k)), dv: make([]float64, len(in.v))}
	start := make([]int, n)
	S, P, dP, dS := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	eS, eP, edP, edS := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	hk, hv := make([]float64, n*hd), make([]float64, n*hd) // one head's Δdk, Δdv
	ak, av := make([]float64, n*hd), make([]float64, n*hd) // and its dk, dv
	for bi := 0; bi < s.Batch; bi++ {
		s.starts(start, bi)
		for h := 0; h < s.Heads; h++ {
			kh := h / group
			qAt := func(i, d int) float64 { return in.q[(bi*n+i)*qw+h*hd+d] }
			gAt := func(i, d int) float64 { return in.r[(bi*n+i)*qw+h*hd+d] }
			kAt := func(j, d int) float64 { return in.k[(bi*n+j)*kw+kh*hd+d] }
			vAt := func(j, d int) float64 { return in.v[(bi*n+j)*kw+kh*hd+d] }
			clear(hk)
			clear(hv)
			clear(ak)
			clear(av)
			for i := 0; i < n; i++ {
				js := start[i]
				keys := i + 1 - js
				m := math.Inf(-1)
				for j := js; j <= i; j++ {
					var dot, abs float64
					for d := 0; d < hd; d++ {
						dot += qAt(i, d) * kAt(j, d)
						abs += math.Abs(qAt(i, d) * kAt(j, d))
					}
					S[j], eS[j] = scale*dot, gHD*scale*abs+eps(scale*dot)
					m = max(m, S[j])
				}
				var z float64
				for j := js; j <= i; j++ {
					P[j] = math.Exp(S[j] - m)
					z += P[j]
				}
				var mixS float64 // Σ_row P·ΔS
				for j := js; j <= i; j++ {
					P[j] /= z
					mixS += P[j] * eS[j]
				}
				var dD, D, absD float64
				for j := js; j <= i; j++ {
					eP[j] = P[j]*(eS[j]+mixS) + 2*gamma(keys+4)*P[j] + eps(P[j])
					var dot, abs float64
					for d := 0; d < hd; d++ {
						dot += gAt(i, d) * vAt(j, d)
						abs += math.Abs(gAt(i, d) * vAt(j, d))
					}
					dP[j], edP[j] = dot, gHD*abs+2*eps(dot)
					D += P[j] * dP[j]
					absD += P[j] * math.Abs(dP[j])
					dD += eP[j]*math.Abs(dP[j]) + P[j]*edP[j]
				}
				dD += gL * absD
				for j := js; j <= i; j++ {
					dS[j] = P[j] * (dP[j] - D)
					edS[j] = eP[j]*math.Abs(dP[j]-D) + P[j]*(edP[j]+dD) + 2*gamma(4)*P[j]*(math.Abs(dP[j])+math.Abs(D)) + eps(dS[j])
				}
				for d := 0; d < hd; d++ {
					var o, eo, dq, edq float64
					for j := js; j <= i; j++ {
						o += P[j] * vAt(j, d)
						eo += eP[j]*math.Abs(vAt(j, d)) + gL*P[j]*math.Abs(vAt(j, d))
						dq += scale * dS[j] * kAt(j, d)
						edq += scale * (edS[j]*math.Abs(kAt(j, d)) + gL*math.Abs(dS[j]*kAt(j, d)))
						hk[j*hd+d] += scale * (edS[j]*math.Abs(qAt(i, d)) + gL*math.Abs(dS[j]*qAt(i, d)))
						ak[j*hd+d] += scale * dS[j] * qAt(i, d)
						hv[j*hd+d] += eP[j]*math.Abs(gAt(i, d)) + gL*P[j]*math.Abs(gAt(i, d))
						av[j*hd+d] += P[j] * gAt(i, d)
					}
					b.out[(bi*n+i)*qw+h*hd+d] = 2 * (eo + eps(o))
					b.dq[(bi*n+i)*qw+h*hd+d] = 2 * (edq + eps(dq))
				}
			}
			for j := 0; j < n; j++ {
				for d := 0; d < hd; d++ {
					at := (bi*n+j)*kw + kh*hd + d
					b.dk[at] += 2 * (hk[j*hd+d] + eps(ak[j*hd+d]))
					b.dv[at] += 2 * (hv[j*hd+d] + eps(av[j*hd+d]))
				}
			}
		}
	}
	// the group's sums, rounded once more
	for i := range b.dk {
		b.dk[i] += 2 * eps(in.dk[i])
		b.dv[i] += 2 * eps(in.dv[i])
	}
	return b
}

// withinBound reports the first value of got farther from want than
// bound allows, and the largest |got − want| / bound.
func withinBound(got, want, bound []float64) (first int, worst float64) {
	first = -1
	for i := range want {
		d := math.Abs(got[i] - want[i])
		if d > bound[i] && first < 0 {
			first = i
		}
		if d > 0 {
			worst = max(worst, d/bound[i])
		}
	}
	return first, worst
}

// The tiled kernel against the full one, which it replaces from
// tiledAttentionMinSeqLen tokens on. What may differ is the order of the
// sums over keys (P·V, dS·K), which the tiled kernel takes one block at a
// time, and over query rows (dK, dV); on a library other than native, the
// kernel it picks by the shape of each product, and with it the order of
// the scores' sums too. The bounds:
//
//   - float64: within 1e-13 of each tensor's largest value (measured: 0,
//     as gonum's Dgemm blocks k by 64, like the tile);
//   - float32, and bf16 and fp16 policies on any backend but native:
//     within attnBound, which holds for any correct BLAS;
//   - bf16 and fp16 policies on native, whose scores GEMM sums over the
//     head dimension in one order for any block of rows and keys, so that
//     the probabilities are the same bits in both kernels by design: at
//     most 1% of the values differ, each by at most one ulp of its format
//     at its magnitude (a different fp32 sum may round to the
//     neighbouring 16-bit value; measured: up to 17 of 38400 values, by
//     1 ulp). With grouped-query attention each head's dK and dV are
//     rounded before the group's sum, which can cancel, so there the
//     bound is one ulp per head in the group at the magnitude of the
//     tensor's largest value (measured: 0.016 of it).
func TestTiledAttentionMatchesFull(t *testing.T) {
	backends := []blas.Backend{blas.Gonum{}, blas.Native{Workers: 1}}
	if ob, err := blas.OpenOpenBLAS(1); err == nil {
		backends = append(backends, ob)
	} else {
		t.Logf("OpenBLAS not checked: %v", err)
	}
	if d, err := blas.OpenOneDNN(1); err == nil {
		backends = append(backends, d)
	} else {
		t.Logf("oneDNN not checked: %v", err)
	}
	for _, tc := range append(tiledCases[:len(tiledCases):len(tiledCases)], longCases...) {
		for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
			var bound *attnResult // from the first float32 run's inputs, the same in every run
			for _, be := range backends {
				_, native := be.(blas.Native)
				dts := []tensor.Dtype{tensor.Float32}
				if f == amp.FP32 {
					dts = append(dts, tensor.Float64)
				}
				for _, dt := range dts {
					name := fmt.Sprintf("%s/%s/%v/%v", tc.name, be.Name(), dt, f)
					t.Run(name, func(t *testing.T) {
						eng := func() *Engine { return &Engine{BLAS: be, Workers: 2} }
						full := runAttention(t, tc.s, AttentionFull, dt, f, eng())
						tiled := runAttention(t, tc.s, AttentionTiled, dt, f, eng())
						if bound == nil && dt == tensor.Float32 {
							b := attnBound(tc.s, f, full)
							bound = &b
						}
						check := func(what string, got, want, within []float64, group int) {
							t.Helper()
							switch {
							case dt == tensor.Float64:
								if d := relDiff(got, want); d > 1e-13 {
									t.Errorf("%s: tiled differs from full by %.3g of the largest value", what, d)
								} else {
									t.Logf("%s: %.3g", what, d)
								}
							case f == amp.FP32 || !native:
								if i, worst := withinBound(got, want, within); i >= 0 {
									t.Errorf("%s[%d]: tiled %v, full %v: more than %.3g apart (attnBound)", what, i, got[i], want[i], within[i])
								} else {
									t.Logf("%s: within %.3g of attnBound", what, worst)
								}
							default:
								worst, differ := ulpDiff(f, got, want)
								if group > 1 {
									worst = groupUlpDiff(f, got, want, group)
								}
								if worst > 1 || differ > len(want)/100 {
									t.Errorf("%s: %d of %d values differ, by up to %.3g ulps (bound 1 ulp, 1%% of the values)", what, differ, len(want), worst)
								} else {
									t.Logf("%s: %d of %d differ, worst %.3g ulps", what, differ, len(want), worst)
								}
							}
						}
						group := tc.s.Heads / tc.s.KVHeads
						var b attnResult
						if bound != nil {
							b = *bound
						}
						check("out", tiled.out, full.out, b.out, 1)
						check("dq", tiled.dq, full.dq, b.dq, 1)
						check("dk", tiled.dk, full.dk, b.dk, group)
						check("dv", tiled.dv, full.dv, b.dv, group)
					})
				}
			}
		}
	}
}

// Up to attnTile tokens the tiled kernel runs one block holding every
// key, so it makes the very GEMM calls and roundings of the full kernel
// and must give its bits, in every precision: this pins down that the
// rounding points are the same ones.
func TestTiledAttentionOneBlockIsBitExact(t *testing.T) {
	shapes := []AttentionShape{
		{Batch: 2, SeqLen: 64, Heads: 4, KVHeads: 2, HeadDim: 8, Positions: packed(2, 20, 44), Window: 30},
		{Batch: 1, SeqLen: 37, Heads: 3, KVHeads: 3, HeadDim: 5},
	}
	for _, s := range shapes {
		for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
			t.Run(fmt.Sprintf("T%d/%v", s.SeqLen, f), func(t *testing.T) {
				eng := func() *Engine { return &Engine{BLAS: blas.Native{Workers: 1}, Workers: 2} }
				full := runAttention(t, s, AttentionFull, tensor.Float32, f, eng())
				tiled := runAttention(t, s, AttentionTiled, tensor.Float32, f, eng())
				for _, c := range []struct {
					name      string
					got, want []float64
				}{{"out", tiled.out, full.out}, {"dq", tiled.dq, full.dq}, {"dk", tiled.dk, full.dk}, {"dv", tiled.dv, full.dv}} {
					for i := range c.want {
						if c.got[i] != c.want[i] {
							t.Fatalf("%s[%d] = %v tiled, %v full", c.name, i, c.got[i], c.want[i])
						}
					}
				}
			})
		}
	}
}

// The tiled kernel's results are the same bits for any worker count, in
// the BLAS backend and in the engine.
func TestTiledAttentionDeterministic(t *testing.T) {
	s := AttentionShape{Batch: 2, SeqLen: 150, Heads: 6, KVHeads: 3, HeadDim: 8, Positions: packed(2, 70, 80), Window: 100}
	for _, f := range []amp.Format{amp.FP32, amp.BF16} {
		t.Run(f.String(), func(t *testing.T) {
			one := runAttention(t, s, AttentionTiled, tensor.Float32, f, &Engine{BLAS: blas.Native{Workers: 1}, Workers: 1})
			three := runAttention(t, s, AttentionTiled, tensor.Float32, f, &Engine{BLAS: blas.Native{Workers: 3}, Workers: 3})
			sameAttnBits(t, "3 workers against 1", three, one)
		})
	}
}

// The tiled kernel keeps two values per query row from the forward to the
// backward pass, and a training step allocates no [T, T] buffer: at
// T = 1024 a step allocates less than one T·T float32 slice in all. The
// full kernel's first step allocates more than that, its saved
// probabilities (Heads·T(T+1)/2 values here), which shows the measure can
// see one. (Its later steps need not: its [T, T] scratch is pooled.)
// Bytes, not time, are measured.
func TestTiledAttentionMemory(t *testing.T) {
	const seq = 1024
	s := AttentionShape{Batch: 1, SeqLen: seq, Heads: 2, KVHeads: 1, HeadDim: 16}
	step := func(kind AttentionKernel) (first, allocated uint64, saved int) {
		s.Kernel = kind
		b, out, err := attentionStep(&Engine{BLAS: blas.Native{Workers: 1}, Workers: 2}, nil, s, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		vm := G.NewTapeMachine(b.G)
		defer vm.Close()
		measured := func() uint64 {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			vm.Reset()
			if err := vm.RunAll(); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			return after.TotalAlloc - before.TotalAlloc
		}
		first = measured() // the first step allocates outputs and saved state
		allocated = measured()
		switch op := out.Op().(type) {
		case *attentionTiledOp[float32]:
			saved = len(op.stats)
		case *attentionOp[float32]:
			saved = len(op.probs)
		}
		return first, allocated, saved
	}
	tt := uint64(seq * seq * 4) // bytes of one [T, T] float32 slice
	_, tiledBytes, tiledSaved := step(AttentionTiled)
	fullFirst, fullBytes, fullSaved := step(AttentionFull)
	t.Logf("one step allocates %d bytes tiled, %d full (%d the first step); saved values %d tiled, %d full", tiledBytes, fullBytes, fullFirst, tiledSaved, fullSaved)
	if want := s.Batch * s.Heads * seq * 2; tiledSaved != want {
		t.Errorf("the tiled kernel saves %d values, want B·Heads·T·2 = %d", tiledSaved, want)
	}
	if want := s.Batch * s.Heads * seq * (seq + 1) / 2; fullSaved != want {
		t.Errorf("the full kernel saves %d values, want B·Heads·T(T+1)/2 = %d", fullSaved, want)
	}
	if raceEnabled {
		return // the race detector allocates for its own bookkeeping; the saved state was checked
	}
	if tiledBytes >= tt {
		t.Errorf("a tiled step allocated %d bytes, at least a [T, T] float32 slice (%d)", tiledBytes, tt)
	}
	if fullFirst < tt {
		t.Errorf("the full kernel's first step allocated %d bytes, less than its saved probabilities (%d): the measure is broken", fullFirst, tt)
	}
}

// The automatic choice depends on the sequence length alone.
func TestAttentionKernelChoice(t *testing.T) {
	for _, c := range []struct {
		s     AttentionShape
		tiled bool
	}{
		{AttentionShape{SeqLen: tiledAttentionMinSeqLen - 1}, false},
		{AttentionShape{SeqLen: tiledAttentionMinSeqLen}, true},
		{AttentionShape{SeqLen: 4096, Kernel: AttentionFull}, false},
		{AttentionShape{SeqLen: 8, Kernel: AttentionTiled}, true},
	} {
		if got := c.s.tiled(); got != c.tiled {
			t.Errorf("SeqLen %d, kernel %d: tiled %v, want %v", c.s.SeqLen, c.s.Kernel, got, c.tiled)
		}
	}
}
