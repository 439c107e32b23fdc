package vkengine

import (
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

// The head's shapes: 11 tokens of width 24, a vocabulary of 300 (more
// than one 256-wide workgroup's stride, not a multiple of it), blocks of
// 4 tokens (the last one short), targets with ignored positions and both
// ends of the vocabulary.
const (
	headN, headD, headV, headChunk = 11, 24, 300, 4
)

var headTargets = []int{5, nn.IgnoreIndex, 299, 0, 17, nn.IgnoreIndex, 123, 256, 299, 42, 7}

// headInputs adds x [N, D] (sd 1), W [V, D] (sd 0.2: logits of sd about
// 1) and the targets. A 16-bit W (w16) is frozen, its values bf16: a
// Param16 in a float32 graph, a float64 weight of the same values in a
// float64 one.
func headInputs(b *nn.Builder, trainW, w16 bool, targets []int) (x, w, tg *G.Node) {
	x = param(b, "x", 21, 1, true, len(targets), headD)
	switch {
	case w16 && b.Dtype == tensor.Float32:
		vals := headW(true)
		bits := make([]uint16, len(vals))
		for i, v := range vals {
			bits[i] = amp.BF16.Bits16(v)
		}
		w = b.Param16("w", []int{headV, headD}, bits, amp.BF16)
	default:
		w = b.Param("w", []int{headV, headD}, headW(w16), trainW && !w16)
	}
	tg = b.IntInput("targets", len(targets))
	if err := G.Let(tg, tensor.New(tensor.WithShape(len(targets)), tensor.WithBacking(append([]int(nil), targets...)))); err != nil {
		panic(err)
	}
	return x, w, tg
}

// headW are W's values, rounded to bf16 for a 16-bit W.
func headW(w16 bool) []float32 {
	w := randoms(22, headV*headD, 0.2)
	if w16 {
		amp.BF16.RoundSlice(w)
	}
	return w
}

// headForm is how the loss is built.
type headForm int

const (
	unfused    headForm = iota // CrossEntropy(Linear(x, W))
	recomputed                 // LMHeadLoss without its gradient input: the backward op computes the blocks again
	seeded                     // LMHeadLoss with it, as train/build.go builds it: the forward op computes the gradients
	sequences                  // SequenceLogProbsHead over headSeqRows sequences, differentiated with headSeqSeeds
)

// The sequences' case: the targets split into headSeqRows sequences
// (headSeqTargets: 3 of 4 tokens, one with every target ignored), each
// with its own gradient.
const headSeqRows = 3

var (
	headSeqTargets = []int{5, nn.IgnoreIndex, 299, 0, nn.IgnoreIndex, nn.IgnoreIndex, nn.IgnoreIndex, nn.IgnoreIndex, 123, 256, 299, 42}
	headSeqSeeds   = []float32{0.7, -1.25, 3}
)

// headCase is a loss over x and W, differentiated with the loss's
// gradient 0.7 (a graph input, the loss's own when seeded).
type headCase struct {
	name    string
	policy  *amp.Policy
	form    headForm
	trainW  bool
	w16     bool // W is a frozen 16-bit weight (bf16 values)
	chunk   int
	targets []int
}

const headSeed = float32(0.7)

// build builds the case on b and backpropagates it; it returns the
// loss, then the gradients, and the nodes they are gradients of.
func (c headCase) build(t *testing.T, b *nn.Builder) (G.Nodes, G.Nodes) {
	t.Helper()
	lossGrad := G.NewScalar(b.G, b.Dtype, G.WithName("loss_grad"))
	var seed any = headSeed
	if b.Dtype == tensor.Float64 {
		seed = float64(headSeed)
	}
	if err := G.Let(lossGrad, seed); err != nil {
		t.Fatal(err)
	}
	x, w, tg := headInputs(b, c.trainW, c.w16, c.targets)
	wrt := G.Nodes{x}
	if c.trainW {
		wrt = append(wrt, w)
	}
	var loss *G.Node
	switch c.form {
	case unfused:
		loss = b.CrossEntropy(b.Linear(x, w), tg)
	case recomputed:
		loss = b.LMHeadLoss(x, w, tg, nil, c.chunk)
	case seeded:
		loss = b.LMHeadLoss(x, w, tg, lossGrad, c.chunk)
	case sequences:
		loss = b.SequenceLogProbsHead(x, w, tg, headSeqRows, c.chunk)
		lossGrad = b.Input("seq_grads", headSeqRows)
		if err := G.Let(lossGrad, tensorOf(b.Dtype, []int{headSeqRows}, headSeqSeeds)); err != nil {
			t.Fatal(err)
		}
	}
	grads, err := G.Backpropagate(G.Nodes{loss}, G.Nodes{lossGrad}, wrt)
	if err != nil {
		t.Fatal(err)
	}
	return append(G.Nodes{loss}, grads...), wrt
}

// run runs the case on the CPU in dt, or on e when e is not nil
// (float32), and returns the loss and the gradients.
func (c headCase) run(t *testing.T, dt tensor.Dtype, e *Engine) ran {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, dt)
	if dt == tensor.Float32 {
		b.Policy = c.policy
	}
	outs, wrt := c.build(t, b)
	if e != nil && c.form != unfused {
		if a := headAttrs(t, b.G); a.GradsInForward != (c.form == seeded) || a.W16 != c.w16 || (a.SeqRows > 0) != (c.form == sequences) {
			t.Fatalf("the head's attributes %+v do not fit the case %+v", a, c)
		}
	}
	res := ran{vals: runGraph(t, b, e, nn.Pass{Noise: 7}, 1, outs)}
	for i := range outs {
		res.names = append(res.names, name(i, wrt))
	}
	return res
}

// headAttrs are the attributes of g's lm_head_loss op, which say which
// path the engine takes.
func headAttrs(t *testing.T, g *G.ExprGraph) nn.HeadLossAttrs {
	t.Helper()
	for _, n := range g.AllNodes() {
		if n.Op() == nil {
			continue
		}
		if s, err := nn.Spec(n); err == nil && s.Kind == "lm_head_loss" {
			return s.Attrs.(nn.HeadLossAttrs)
		}
	}
	t.Fatal("no lm_head_loss node")
	return nn.HeadLossAttrs{}
}

// gamma is γ_k = k·u/(1 − k·u), the bound of a k-term fp32 sum's
// relative error (in any order) on the sum of the terms' magnitudes.

// headBounds are the largest |Vulkan − float64| any correct float32
// implementation can have on the case's loss, dx and dW (absolute),
// derived from the case's own values, each term named where it is added:
//
//   - a logit is a dot product of D terms: within γ_D·A, A the largest
//     Σ_k |x_rk||w_jk|. In bf16 x and W are rounded first (2^-9 relative
//     each: 2·2^-9·A more) and the logit after (2^-9·|l|).
//   - moving the logits by δ moves the softmax by e^{2δ} − 1 relative;
//     the kernel's own roundings add: exp within 3+2|x| ulp (|x| ≤ the
//     row's range R), the fp32 sum of V exps within γ_{⌈V/256⌉+8}, 1/S
//     (2.5 ulp), the products by it and by the scale, and the scale
//     seed/count (2.5 ulp): εp relative on each gradient of a logit, plus
//     2^-9 when that gradient is rounded to bf16.
//   - the loss moves by at most twice its logits' error (its gradient's
//     row sums |p − onehot| to ≤ 2), plus a row's error ((m − l_t) + log S:
//     2 roundings, log within 2^-21 + 3 ulp, the sum S as above) and the
//     mean's (γ_{ReduceDepth(N)+1}) on at most R + log V.
//   - dx = dl·W (over V) and dW = dlᵀ·x (over N, blocks added in order)
//     are within (εp + γ_K)·Mx of exact, Mx the largest Σ_j |dl_rj||w_jk|
//     (Σ_r |dl_rj||x_rk| for dW); in bf16 W (x) was rounded (2^-9·Mx)
//     and the result is rounded to bf16 (2^-9·(|dx| + the rest)).
func headBounds(c headCase) (loss, dx, dw float64) {
	x := randoms(21, len(c.targets)*headD, 1)
	w := headW(c.w16)
	n := len(c.targets)
	const r16 = 0x1p-9
	bf16 := c.policy != nil
	count := 0
	for _, t := range c.targets {
		if t != nn.IgnoreIndex {
			count++
		}
	}
	if count == 0 {
		return 0, 0, 0
	}
	scaleOf := func(r int) float64 { return float64(headSeed) / float64(count) }
	if c.form == sequences { // −g[seq]: a sequence's log-probability's gradient
		scaleOf = func(r int) float64 { return -float64(headSeqSeeds[r/(n/headSeqRows)]) }
	}
	logits := make([]float64, n*headV)
	var bigA, bigL, bigR float64
	for r := range n {
		lo, hi := math.Inf(1), math.Inf(-1)
		for j := range headV {
			var s, a float64
			for k := range headD {
				s += float64(x[r*headD+k]) * float64(w[j*headD+k])
				a += math.Abs(float64(x[r*headD+k]) * float64(w[j*headD+k]))
			}
			logits[r*headV+j] = s
			bigA, bigL = max(bigA, a), max(bigL, math.Abs(s))
			lo, hi = min(lo, s), max(hi, s)
		}
		bigR = max(bigR, hi-lo)
	}
	dLogit := gamma(headD) * bigA
	if bf16 {
		dLogit += 2*r16*(1+r16)*bigA + r16*(bigL+dLogit)
	}
	eps := math.Expm1(2*dLogit) + (3+2*(bigR+2*dLogit))*u + gamma((headV+255)/256+8) + 9*u
	if bf16 {
		eps += r16 * (1 + eps)
	}
	// dl = scale·(softmax − onehot) in float64, for the sums of magnitudes
	dl := make([]float64, n*headV)
	for r, t := range c.targets {
		if t == nn.IgnoreIndex {
			continue
		}
		row := logits[r*headV : (r+1)*headV]
		m, s := math.Inf(-1), 0.0
		for _, l := range row {
			m = max(m, l)
		}
		for _, l := range row {
			s += math.Exp(l - m)
		}
		scale := scaleOf(r)
		for j, l := range row {
			dl[r*headV+j] = scale * math.Exp(l-m) / s
		}
		dl[r*headV+t] -= scale
	}
	mx, bigDx := productSums(n, headD, headV, func(r, j int) float64 { return dl[r*headV+j] },
		func(j, k int) float64 { return float64(w[j*headD+k]) })
	mw, bigDw := productSums(headV, headD, n, func(j, r int) float64 { return dl[r*headV+j] },
		func(r, k int) float64 { return float64(x[r*headD+k]) })
	rowMax := bigR + math.Log(headV)
	token := 2*dLogit + 2*u*rowMax + 0x1p-21 + 3*u*math.Log(headV) + gamma((headV+255)/256+8) + (3+2*bigR)*u
	loss = token + gamma(vulkan.ReduceDepth(n)+1)*rowMax
	if c.form == sequences { // a sequence's per tokens' errors, and its row sum's on their sum
		per := n / headSeqRows
		loss = float64(per)*token + gamma(vulkan.RowSumDepth(per))*float64(per)*rowMax
	}
	dx = (eps + gamma(headV)) * mx
	dw = (eps + gamma(n)) * mw
	if bf16 {
		dx += r16*mx + r16*(bigDx+dx)
		dw += r16*mw + r16*(bigDw+dw)
	}
	return loss, dx, dw
}

// productSums returns, over the m×n product of a (m×k) and b (k×n), the
// largest Σ_i |a(r, i)·b(i, c)| and the largest |Σ_i a(r, i)·b(i, c)|.
func productSums(m, n, k int, a, b func(int, int) float64) (magnitude, value float64) {
	for r := range m {
		for c := range n {
			var s, v float64
			for i := range k {
				s += math.Abs(a(r, i) * b(i, c))
				v += a(r, i) * b(i, c)
			}
			magnitude, value = max(magnitude, s), max(value, math.Abs(v))
		}
	}
	return magnitude, value
}

// TestHeadLoss compares the unfused cross-entropy over a linear layer's
// logits and LMHeadLoss, without its gradient input (the backward op
// computes every block again) and with it (the training graph's form:
// the forward op computes the gradients), against float64 within
// headBounds, in fp32 and bf16, over blocks of tokens (the last one
// short) with ignored targets, reporting the CPU float32 engine's error
// beside.
func TestHeadLoss(t *testing.T) {
	e := openEngine(t)
	bf16 := amp.DefaultPolicy(amp.BF16)
	for _, c := range []headCase{
		{name: "cross_entropy fp32", form: unfused, trainW: true, targets: headTargets},
		{name: "cross_entropy bf16", policy: &bf16, form: unfused, trainW: true, targets: headTargets},
		{name: "recomputed fp32 blocks of 4", form: recomputed, trainW: true, chunk: headChunk, targets: headTargets},
		{name: "recomputed frozen head bf16 blocks of 4", policy: &bf16, form: recomputed, chunk: headChunk, targets: headTargets},
		{name: "seeded fp32 blocks of 4", form: seeded, trainW: true, chunk: headChunk, targets: headTargets},
		{name: "seeded fp32 one block", form: seeded, trainW: true, chunk: 0, targets: headTargets},
		{name: "seeded frozen head fp32 blocks of 3", form: seeded, chunk: 3, targets: headTargets},
		{name: "seeded bf16 blocks of 4", policy: &bf16, form: seeded, trainW: true, chunk: headChunk, targets: headTargets},
		{name: "seeded bf16 blocks of 5", policy: &bf16, form: seeded, trainW: true, chunk: 5, targets: headTargets},
		{name: "seeded 16-bit head fp32 blocks of 4", form: seeded, w16: true, chunk: headChunk, targets: headTargets},
		{name: "recomputed 16-bit head fp32 blocks of 4", form: recomputed, w16: true, chunk: headChunk, targets: headTargets},
		{name: "seeded 16-bit head bf16 blocks of 4", policy: &bf16, form: seeded, w16: true, chunk: headChunk, targets: headTargets},
		{name: "sequences fp32 blocks of 5", form: sequences, trainW: true, chunk: 5, targets: headSeqTargets},
		{name: "sequences fp32 one block", form: sequences, trainW: true, chunk: 0, targets: headSeqTargets},
		{name: "sequences bf16 blocks of 4", policy: &bf16, form: sequences, trainW: true, chunk: headChunk, targets: headSeqTargets},
		{name: "sequences 16-bit head bf16 blocks of 5", policy: &bf16, form: sequences, w16: true, chunk: 5, targets: headSeqTargets},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			ref := c.run(t, tensor.Float64, nil)
			cpu := c.run(t, tensor.Float32, nil)
			vk := c.run(t, tensor.Float32, e)
			bl, bx, bw := headBounds(c)
			for i := range ref.vals {
				bound := []float64{bl, bx, bw}[i]
				worst, cpuWorst := 0.0, 0.0
				for j, r := range ref.vals[i] {
					worst = max(worst, math.Abs(vk.vals[i][j]-r))
					cpuWorst = max(cpuWorst, math.Abs(cpu.vals[i][j]-r))
				}
				if !(worst <= bound) {
					t.Errorf("%s: Vulkan off float64 by %.3g, bound %.3g (CPU float32 %.3g)", ref.names[i], worst, bound, cpuWorst)
				}
				t.Logf("%s: Vulkan %.3g, CPU %.3g off float64 (bound %.3g)", ref.names[i], worst, cpuWorst, bound)
			}
		})
	}
	t.Run("every_target_ignored", func(t *testing.T) {
		allIgnored := make([]int, headN)
		for i := range allIgnored {
			allIgnored[i] = nn.IgnoreIndex
		}
		for _, form := range []headForm{unfused, recomputed, seeded} {
			vk := headCase{form: form, trainW: true, chunk: headChunk, targets: allIgnored}.run(t, tensor.Float32, e)
			for i, vs := range vk.vals {
				for j, v := range vs {
					if v != 0 {
						t.Fatalf("form %d: %s[%d] = %g with every target ignored, want 0", form, vk.names[i], j, v)
					}
				}
			}
		}
	})
}

// TestHeadLossBadTarget: a target outside the vocabulary is an error of
// the run, as on the CPU, not a read out of bounds.
func TestHeadLossBadTarget(t *testing.T) {
	e := openEngine(t)
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	bad := append([]int(nil), headTargets...)
	bad[4] = headV
	headCase{form: seeded, trainW: true, chunk: headChunk, targets: bad}.build(t, b)
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	err = p.Run(nn.Pass{})
	if err == nil || !strings.Contains(err.Error(), "outside the vocabulary") {
		t.Fatalf("run with target %d of a vocabulary of %d: error %v, want one naming the target", headV, headV, err)
	}
}

// TestHeadLossRunsAgain: a program run twice gives the same bits (dW's
// blocks restart from zero at each run; every sum has a fixed order).
func TestHeadLossRunsAgain(t *testing.T) {
	e := openEngine(t)
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	outs, _ := headCase{form: seeded, trainW: true, chunk: headChunk, targets: headTargets}.build(t, b)
	p, err := e.Compile(b.G, b.IsParam)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var runs [2][][]float32
	for i := range runs {
		if err := p.Run(nn.Pass{}); err != nil {
			t.Fatal(err)
		}
		for _, n := range outs {
			v := make([]float32, max(1, prod(n.Shape())))
			if err := p.Read(n, v); err != nil {
				t.Fatal(err)
			}
			runs[i] = append(runs[i], v)
		}
	}
	for k, v := range runs[0] {
		for j := range v {
			if math.Float32bits(v[j]) != math.Float32bits(runs[1][k][j]) {
				t.Fatalf("%s[%d]: %g, then %g", outs[k].Name(), j, v[j], runs[1][k][j])
			}
		}
	}
}
