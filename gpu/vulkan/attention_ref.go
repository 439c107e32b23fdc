package vulkan

import (
	"math"

	"github.com/mixtune/mixtune/amp"
)

// attnRefCase is one attention forward and backward for attnReference:
// the shape (its roundings, window and, in pos, its positions), the
// values the kernels read, and the roundings of the outputs.
type attnRefCase struct {
	s                        AttentionShape
	pos                      []int32 // nil: one document a row
	q, k, v, dO              []float32
	out, dq, dk, dv          Rounding
	roundHeadsK, roundHeadsV bool
	// unrounded runs the backward with AttentionGrads.Unrounded and
	// rounds dQ, dK and dV after it (runAttention)
	unrounded bool
}

// attnBounded are a tensor's float64 reference values and, per value, a
// bound on how far a correct kernel's may be from them.
type attnBounded struct{ want, bound []float64 }

// attnRefResult are attnReference's tensors: O, the stats (m and 1/l
// interleaved, as the kernels save them), dQ, dK and dV.
type attnRefResult struct{ o, stats, dq, dk, dv attnBounded }

func newBounded(n int) attnBounded { return attnBounded{make([]float64, n), make([]float64, n)} }

// Unit roundoffs of the bound: uSum for the products' fp32 sums (2^-23:
// tensor cores may truncate their sums), uOp for the kernels' scalar fp32
// operations, ulp the unit in the last place (relative) Vulkan's
// precision of exp (3 + 2|x| ulps) and division (2.5 ulps) is stated in.
const (
	attnUSum = 0x1p-23
	attnUOp  = 0x1p-24
	attnULP  = 0x1p-23
)

func gammaN(n int, u float64) float64 { return float64(n) * u / (1 - float64(n)*u) }

// roundedWithin is round(f, x) for the float64 value x that a kernel
// holds in fp32 within ±d, and the bound on the distance between it and
// what the kernel's rounding of its value can be: rounding is monotone,
// so that lies between the roundings of x−d and x+d (each widened by an
// fp32 ulp). Where no rounding boundary lies within ±d the two roundings
// are the same value and the bound is 0.
func roundedWithin(f Rounding, x, d float64) (float64, float64) {
	if f == NoRounding {
		return x, d
	}
	fm := amp.BF16
	if f == RoundFP16 {
		fm = amp.FP16
	}
	r := float64(fm.Round(float32(x)))
	lo := float64(fm.Round(math.Nextafter32(float32(x-d), float32(math.Inf(-1)))))
	hi := float64(fm.Round(math.Nextafter32(float32(x+d), float32(math.Inf(1)))))
	return r, max(hi-r, r-lo)
}

// attnReference computes attention's forward and backward in float64 on
// the case's values, with the rounding points where the kernels have
// them, and per value a bound on a correct kernel's distance from it,
// whatever its summation orders: each fp32 sum of products within
// γ_n·Σ|a||b| (u = 2^-23: tensor cores may truncate), each scalar fp32
// operation within u = 2^-24, exp within (3 + 2|x|) ulps and division
// within 2.5 (Vulkan's precision), every error carried through the later
// operations (through exp and products as relative factors, exp(Σ ρ) − 1;
// the products of two errors kept where they can be large, as a flipped
// probability times a flipped dP), and each rounding point as
// roundedWithin: exact where no boundary of the format lies within the
// value's error, else the step to the farthest value reachable. The
// softmax's sum counts its tiles' rescalings (64 keys a tile,
// attention.comp's online sum). It is the bound the kernels are tested
// and self-checked against: the scalar kernel meets it too
// and a kernel without one of the rounding points does not
// (TestAttentionCoopEmulated).
func attnReference(c attnRefCase) attnRefResult {
	s := c.s
	B, T, H, KVH, D := s.Batch, s.SeqLen, s.Heads, s.KVHeads, s.HeadDim
	group := H / KVH
	qw, kw := H*D, KVH*D
	scale := float64(float32(1 / math.Sqrt(float64(D))))
	res := attnRefResult{o: newBounded(B * T * qw), stats: newBounded(2 * B * H * T), dq: newBounded(B * T * qw),
		dk: newBounded(B * T * kw), dv: newBounded(B * T * kw)}
	// per head: the share of dK and dV of each key (after the per-head
	// rounding), summed over the group below
	shareK, shareV := make([]attnShare, group), make([]attnShare, group)
	for h := range shareK {
		shareK[h] = attnShare{make([]float64, T*D), make([]float64, T*D), make([]float64, T*D)}
		shareV[h] = attnShare{make([]float64, T*D), make([]float64, T*D), make([]float64, T*D)}
	}
	S, dS := make([]float64, T), make([]float64, T)
	P, dP := make([]float64, T), make([]float64, T) // P: the probabilities as fV holds them
	pr := make([]float64, T)                        // the probabilities in fP
	dSb, Pb, prb, Sb, dPb := make([]float64, T), make([]float64, T), make([]float64, T), make([]float64, T), make([]float64, T)
	starts := make([]int, T)
	for b := range B {
		for i := range T {
			st := 0
			if c.pos != nil {
				st = i - int(c.pos[b*T+i])
			}
			if s.Window > 0 {
				st = max(st, i-s.Window+1)
			}
			starts[i] = min(max(st, 0), i)
		}
		for kh := range KVH {
			kBase := b*T*kw + kh*D
			for g := range group {
				h := kh*group + g
				qBase := b*T*qw + h*D
				sk, sv := shareK[g], shareV[g]
				for _, x := range [][]float64{sk.want, sk.bound, sk.abs, sv.want, sv.bound, sv.abs} {
					clear(x)
				}
				for i := range T {
					st := starts[i]
					n := i - st + 1
					// the kernel's tiles of keys start at its 64-row block's
					// first start (≥ 0): at most i/64 + 2 reach row i
					tiles := i/64 + 2
					m, dm, lo := math.Inf(-1), 0.0, math.Inf(1)
					for j := st; j <= i; j++ {
						dot, abs := rowDot(c.q[qBase+i*qw:][:D], c.k[kBase+j*kw:][:D])
						x := scale * dot
						S[j], Sb[j] = roundedWithin(s.Scores, x, scale*gammaN(D+1, attnUSum)*abs)
						m = max(m, S[j])
						lo = min(lo, S[j])
						dm = max(dm, Sb[j])
					}
					R := m - lo + 2*dm
					tau := func(t float64) float64 { return (3+2*math.Abs(t))*attnULP + math.Abs(t)*attnUOp }
					var l, dl float64
					for j := st; j <= i; j++ {
						e := math.Exp(S[j] - m)
						l += e
						dl += e * math.Expm1(Sb[j]+dm)
					}
					dl += l * math.Expm1(gammaN(n+1, attnUOp)+float64(tiles)*(tau(R)+attnUOp)+tau(R))
					rl := dl / l
					inv := 1 / l
					rInv := rl/(1-rl) + 2.5*attnULP
					sIdx := 2 * ((b*H+h)*T + i)
					res.stats.want[sIdx], res.stats.bound[sIdx] = m, dm
					res.stats.want[sIdx+1], res.stats.bound[sIdx+1] = inv, inv*rInv
					for j := st; j <= i; j++ {
						t := S[j] - m
						x := math.Exp(t) * inv
						dx := x * math.Expm1(Sb[j]+dm+tau(t)+attnUOp+math.Log1p(rInv))
						pr[j], prb[j] = roundedWithin(s.Softmax, x, dx)
						P[j], Pb[j] = roundedWithin(s.Values, pr[j], prb[j])
					}
					// O
					for d := range D {
						sum, abs, del := keysWeighted(P[st:i+1], Pb[st:i+1], c.v, kBase+st*kw+d, kw)
						at := qBase + i*qw + d
						res.o.want[at], res.o.bound[at] = roundedWithin(c.out, sum, del+gammaN(n, attnUSum)*abs)
					}
					// dP, the row sum, dS
					var r, dr, rAbs float64
					for j := st; j <= i; j++ {
						y, abs := rowDot(c.dO[qBase+i*qw:][:D], c.v[kBase+j*kw:][:D])
						yv, yb := roundedWithin(s.Values, y, gammaN(D, attnUSum)*abs)
						dP[j], dPb[j] = roundedWithin(s.Softmax, yv, yb)
						r += pr[j] * dP[j]
						rAbs += math.Abs(pr[j] * dP[j])
						dr += prb[j]*math.Abs(dP[j]) + pr[j]*dPb[j] + prb[j]*dPb[j]
					}
					dr += gammaN(n+1, attnUOp) * rAbs
					for j := st; j <= i; j++ {
						z := pr[j] * (dP[j] - r)
						dz := (prb[j]*(math.Abs(dP[j]-r)+dPb[j]+dr) + pr[j]*(dPb[j]+dr)) + attnUOp*pr[j]*(math.Abs(dP[j])+math.Abs(r)) + attnUOp*math.Abs(z)
						dS[j], dSb[j] = roundedWithin(s.Scores, z, dz)
					}
					// dQ
					for d := range D {
						sum, abs, del := keysWeighted(dS[st:i+1], dSb[st:i+1], c.k, kBase+st*kw+d, kw)
						x := scale * sum
						at := qBase + i*qw + d
						res.dq.want[at], res.dq.bound[at] = roundedWithin(c.dq, x, scale*(del+gammaN(n, attnUSum)*abs)+attnUOp*math.Abs(x))
					}
					// this query row's terms of each key's dK and dV share
					// (their sums' γ is applied below, with the key's count)
					for j := st; j <= i; j++ {
						for d := range D {
							qv, gv := float64(c.q[qBase+i*qw+d]), float64(c.dO[qBase+i*qw+d])
							sk.want[j*D+d] += dS[j] * qv
							sk.bound[j*D+d] += dSb[j] * math.Abs(qv)
							sk.abs[j*D+d] += math.Abs(dS[j] * qv)
							sv.want[j*D+d] += P[j] * gv
							sv.bound[j*D+d] += Pb[j] * math.Abs(gv)
							sv.abs[j*D+d] += math.Abs(P[j] * gv)
						}
					}
				}
				// each key's share: γ over the queries that see it, the
				// scale (dK's), the per-head rounding
				for j := range T {
					seen := 0
					for i := j; i < T; i++ {
						if starts[i] <= j {
							seen++
						}
					}
					for d := range D {
						at := j*D + d
						x := scale * sk.want[at]
						dx := scale*(sk.bound[at]+gammaN(seen, attnUSum)*sk.abs[at]) + attnUOp*math.Abs(x)
						if c.roundHeadsK {
							x, dx = roundedWithin(c.dk, x, dx)
						}
						sk.want[at], sk.bound[at] = x, dx
						x, dx = sv.want[at], sv.bound[at]+gammaN(seen, attnUSum)*sv.abs[at]
						if c.roundHeadsV {
							x, dx = roundedWithin(c.dv, x, dx)
						}
						sv.want[at], sv.bound[at] = x, dx
					}
				}
			}
			// the group's shares added in head order in fp32, rounded
			for j := range T {
				for d := range D {
					at, out := j*D+d, kBase+j*kw+d
					for _, gr := range []struct {
						shares []attnShare
						f      Rounding
						dst    attnBounded
					}{{shareK, c.dk, res.dk}, {shareV, c.dv, res.dv}} {
						var sum, abs, del float64
						for _, sh := range gr.shares {
							sum += sh.want[at]
							abs += math.Abs(sh.want[at])
							del += sh.bound[at]
						}
						gr.dst.want[out], gr.dst.bound[out] = roundedWithin(gr.f, sum, del+gammaN(group-1, attnUOp)*abs)
					}
				}
			}
		}
	}
	return res
}

// rowDot is the float64 dot product of a query row's head and a key's
// (as q·k or dO·v), with Σ|a_d·b_d| for the sum's γ.
func rowDot(a, b []float32) (dot, abs float64) {
	for d := range a {
		x := float64(a[d]) * float64(b[d])
		dot += x
		abs += math.Abs(x)
	}
	return dot, abs
}

// keysWeighted is the float64 sum Σ_j w_j·x_j over the keys a query row
// sees (w_j its weight, as P or dS; x_j one column of V or K, the j-th at
// at + j·stride), with Σ|w_j·x_j| for the sum's γ and Σ wb_j·|x_j|, the
// weights' errors (bounds wb) carried through the products.
func keysWeighted(w, wb []float64, x []float32, at, stride int) (sum, abs, del float64) {
	for j := range w {
		xv := float64(x[at+j*stride])
		sum += w[j] * xv
		abs += math.Abs(w[j] * xv)
		del += wb[j] * math.Abs(xv)
	}
	return sum, abs, del
}

// attnShare is one query head's share of dK or dV: its terms' sum, their
// propagated errors and absolute values, per key and column.
type attnShare struct{ want, bound, abs []float64 }
