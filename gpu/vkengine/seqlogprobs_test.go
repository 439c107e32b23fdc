package vkengine

import (
	"math"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/nn"
)

// The preference head's shapes: 4 sequences of 5 tokens over a
// vocabulary of 300 (more than one 256-wide stride), logits of sd 2.
// The third sequence has every target ignored (its log-probability and
// gradient are 0); the others mix kept and ignored targets.
const seqRows, seqPer, seqV = 4, 5, 300

var seqTargets = []int{
	nn.IgnoreIndex, 3, 299, 0, 17,
	nn.IgnoreIndex, nn.IgnoreIndex, 256, 42, 7,
	nn.IgnoreIndex, nn.IgnoreIndex, nn.IgnoreIndex, nn.IgnoreIndex, nn.IgnoreIndex,
	5, 123, 255, 1, 298,
}

// quadLoss is f(x) = Σ cᵢxᵢ + q/2·(Σ xᵢ)², with ∂f/∂xᵢ = cᵢ + q·Σ x: a
// host loss whose gradient moves by at most q·Σ|δx| when x moves by δx.
type quadLoss struct {
	c []float64
	q float64
}

func (f quadLoss) Loss(x, grad []float64) (float64, error) {
	var s, y float64
	for i, v := range x {
		s += v
		y += f.c[i] * v
	}
	for i := range grad {
		grad[i] = f.c[i] + f.q*s
	}
	return y + f.q/2*s*s, nil
}

var seqQuad = quadLoss{c: []float64{0.5, -1.5, 2, 0.25}, q: 0.01}

// seqCase builds logits [N, V] (a trained input), their sequences'
// log-probabilities and, with host, quadLoss over them, differentiated
// with the output's gradient: 0.7 for the loss, fixed values per
// sequence for the log-probabilities.
type seqCase struct {
	name string
	host bool
}

var seqSeeds = []float32{0.7, -1.25, 3, 0.5}

const seqLossSeed = float32(0.7)

func (c seqCase) run(t *testing.T, dt tensor.Dtype, e *Engine) ran {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, dt)
	n := seqRows * seqPer
	logits := param(b, "logits", 31, 2, true, n, seqV)
	tg := b.IntInput("targets", n)
	if err := G.Let(tg, tensor.New(tensor.WithShape(n), tensor.WithBacking(append([]int(nil), seqTargets...)))); err != nil {
		t.Fatal(err)
	}
	out := b.SequenceLogProbs(logits, tg, seqRows)
	outs := G.Nodes{out}
	var dy *G.Node
	if c.host {
		out = b.HostLoss(out, seqQuad)
		outs = G.Nodes{out}
		dy = G.NewScalar(b.G, dt, G.WithName("loss_grad"))
		var v any = seqLossSeed
		if dt == tensor.Float64 {
			v = float64(seqLossSeed)
		}
		if err := G.Let(dy, v); err != nil {
			t.Fatal(err)
		}
	} else {
		dy = b.Input("dy", seqRows)
		if err := G.Let(dy, tensorOf(dt, []int{seqRows}, seqSeeds)); err != nil {
			t.Fatal(err)
		}
	}
	grads, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, G.Nodes{logits})
	if err != nil {
		t.Fatal(err)
	}
	// on the device a second run computes the same: nothing is left over from the first
	return ran{names: []string{"output", "dlogits"}, vals: runGraph(t, b, e, nn.Pass{}, 2, append(outs, grads...))}
}

// seqBounds are the largest |Vulkan − float64| any correct float32
// implementation can have on the case's output and on each logit's
// gradient, from the case's own values, first order in u = 2^-24:
//
//   - a token's −log p = (m − l_t) + log S (headloss_rows.comp): two
//     roundings on at most R + log V (R the row's range), log within
//     2^-21 + 3 ulp, S's error (exps within 3+2R ulp, their fp32 sum
//     within γ_{⌈V/256⌉+8}) relative on S, absolute on log S: e_tok;
//   - a sequence's sum (row_sum.comp) adds γ_{RowSumDepth(per)}·Σ|terms|
//     to the per·e_tok its terms carry: e_x;
//   - the host loss then moves by Σ|∂f/∂xᵢ|·e_x,i + q/2·(Σ e_x)² and its
//     fp32 rounding; its gradient by q·Σ e_x, and by one rounding when
//     scaled by the seed s;
//   - a logit's gradient −g·(p − onehot): p within ε = (3+2R)u +
//     γ_{⌈V/256⌉+8} + 2.5u (1/S) + u relative, the product by g and the
//     subtraction one rounding each: |g|·((ε+2u)·p + u) + |δg|·|p − onehot|.
func (c seqCase) bounds(ref ran) (out, dl []float64) {
	logits := randoms(31, seqRows*seqPer*seqV, 2)
	n := seqRows * seqPer
	eps := gamma((seqV+255)/256 + 8)
	ex := make([]float64, seqRows)
	probs := make([]float64, n*seqV)
	for r := range seqRows {
		var sumAbs float64
		for k := range seqPer {
			i := r*seqPer + k
			row := logits[i*seqV : (i+1)*seqV]
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, l := range row {
				lo, hi = min(lo, float64(l)), max(hi, float64(l))
			}
			var s float64
			for _, l := range row {
				s += math.Exp(float64(l) - hi)
			}
			for j, l := range row {
				probs[i*seqV+j] = math.Exp(float64(l)-hi) / s
			}
			t := seqTargets[i]
			if t == nn.IgnoreIndex {
				continue
			}
			R := hi - lo
			tok := hi - float64(row[t]) + math.Log(s)
			sumAbs += tok
			ex[r] += 2*u*(R+math.Log(seqV)) + 0x1p-21 + 3*u*math.Log(seqV) + eps + (3+2*R)*u
		}
		ex[r] += gamma(vulkan.RowSumDepth(seqPer)) * sumAbs
	}
	var exSum float64
	for _, e := range ex {
		exSum += e
	}
	g := make([]float64, seqRows)  // the sequences' gradients
	dg := make([]float64, seqRows) // their errors
	if c.host {
		out = []float64{seqQuad.q / 2 * exSum * exSum}
		var lx float64 // Σ x at the float64 log-probabilities: ∂f/∂x there
		for r := range seqRows {
			lx += seqLogProb(logits, r)
		}
		for r := range seqRows {
			d := seqQuad.c[r] + seqQuad.q*lx
			out[0] += math.Abs(d) * ex[r]
			g[r] = float64(seqLossSeed) * d
			dg[r] = float64(seqLossSeed)*seqQuad.q*exSum + u*math.Abs(g[r])
		}
		out[0] += u * math.Abs(ref.vals[0][0])
	} else {
		out = ex
		for r := range seqRows {
			g[r] = float64(seqSeeds[r])
		}
	}
	pe := (3+2*seqRange(logits))*u + eps + 3.5*u
	dl = make([]float64, n*seqV)
	for i := range n {
		t := seqTargets[i]
		if t == nn.IgnoreIndex {
			continue
		}
		r := i / seqPer
		for j := range seqV {
			p := probs[i*seqV+j]
			d := p
			if j == t {
				d = math.Abs(p - 1)
			}
			dl[i*seqV+j] = math.Abs(g[r])*((pe+2*u)*p+u) + dg[r]*d
		}
	}
	return out, dl
}

// seqLogProb is sequence r's summed log-probability in float64.
func seqLogProb(logits []float32, r int) float64 {
	var lp float64
	for k := range seqPer {
		i := r*seqPer + k
		t := seqTargets[i]
		if t == nn.IgnoreIndex {
			continue
		}
		row := logits[i*seqV : (i+1)*seqV]
		m := math.Inf(-1)
		for _, l := range row {
			m = max(m, float64(l))
		}
		var s float64
		for _, l := range row {
			s += math.Exp(float64(l) - m)
		}
		lp += float64(row[t]) - m - math.Log(s)
	}
	return lp
}

// seqRange is the largest range of a row of logits.
func seqRange(logits []float32) float64 {
	var R float64
	for i := 0; i < len(logits); i += seqV {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, l := range logits[i : i+seqV] {
			lo, hi = min(lo, float64(l)), max(hi, float64(l))
		}
		R = max(R, hi-lo)
	}
	return R
}

// TestSequenceLogProbs compares the preference head, each sequence's
// summed target log-probability and a host loss over them, with their
// gradients, against float64 within seqBounds (per value), reporting the
// CPU float32 engine's error beside; the sequence with no kept target
// has log-probability and gradient exactly 0.
func TestSequenceLogProbs(t *testing.T) {
	e := openEngine(t)
	for _, c := range []seqCase{{name: "log-probabilities"}, {name: "host loss", host: true}} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			ref := c.run(t, tensor.Float64, nil)
			cpu := c.run(t, tensor.Float32, nil)
			vk := c.run(t, tensor.Float32, e)
			bo, bd := c.bounds(ref)
			for i, bound := range [][]float64{bo, bd} {
				worst, cpuWorst, at := 0.0, 0.0, 0
				for j, r := range ref.vals[i] {
					d := math.Abs(vk.vals[i][j] - r)
					if !(d <= bound[j]) {
						t.Fatalf("%s[%d]: Vulkan %.9g, float64 %.9g: off by %.3g, bound %.3g (CPU float32 %.9g)", ref.names[i], j, vk.vals[i][j], r, d, bound[j], cpu.vals[i][j])
					}
					if bound[j] > 0 && d/bound[j] > worst {
						worst, at = d/bound[j], j
					}
					cpuWorst = max(cpuWorst, math.Abs(cpu.vals[i][j]-r))
				}
				t.Logf("%s: Vulkan at most %.2g of its bound (at %d); CPU float32 off float64 by at most %.3g", ref.names[i], worst, at, cpuWorst)
			}
			if !c.host {
				if vk.vals[0][2] != 0 {
					t.Errorf("the sequence with every target ignored: log-probability %g, want 0", vk.vals[0][2])
				}
			}
			for j := 2 * seqPer * seqV; j < 3*seqPer*seqV; j++ {
				if vk.vals[1][j] != 0 {
					t.Fatalf("dlogits[%d] = %g in the sequence with every target ignored, want 0", j, vk.vals[1][j])
				}
			}
		})
	}
}
