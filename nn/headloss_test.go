package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn/nntest"
)

// headTargets has ignored positions, repeats and the vocabulary's ends
// (headV = 23).
var headTargets = []int{2, IgnoreIndex, 22, 0, 8, IgnoreIndex, 5, 1, 22, 3, 7}

// LMHeadLoss's gradients against float64 central differences, over several
// blocks of tokens (the last one short), with the gradients computed in the
// forward pass (seeded) and in the backward pass (as G.Grad asks).
func TestLMHeadLossGradients(t *testing.T) {
	for _, tc := range []struct {
		name      string
		chunk     int
		trainW    bool
		seeded    bool
		targets   []int
		allIgnore bool
	}{
		{name: "trainable head, blocks of 3, recomputed", chunk: 3, trainW: true},
		{name: "trainable head, blocks of 3, seeded", chunk: 3, trainW: true, seeded: true},
		{name: "frozen head, blocks of 4, seeded", chunk: 4, seeded: true},
		{name: "one block, seeded", chunk: 0, trainW: true, seeded: true},
		{name: "every target ignored", chunk: 4, trainW: true, seeded: true, allIgnore: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 11))
			b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 3}, tensor.Float64)
			targets := []int{2, IgnoreIndex, 8, 0, 8, IgnoreIndex, 5} // vocabulary 9
			if tc.allIgnore {
				targets = []int{IgnoreIndex, IgnoreIndex, IgnoreIndex, IgnoreIndex, IgnoreIndex, IgnoreIndex, IgnoreIndex}
			}
			x := randParam(b, rng, "x", 2, len(targets), 4)
			w := randParam(b, rng, "w", 1, 9, 4)
			if !tc.trainW {
				data := make([]float32, 36)
				for i := range data {
					data[i] = rng.Float32()*2 - 1
				}
				w = b.Param("frozen w", []int{9, 4}, data, false)
			}
			params := []*G.Node{x}
			if tc.trainW {
				params = append(params, w)
			}
			tg := intInput(b, "targets", targets)
			var worst float64
			if tc.seeded {
				seed := G.NewScalar(b.G, tensor.Float64, G.WithName("seed"), G.WithValue(0.7))
				loss := b.LMHeadLoss(x, w, tg, seed, tc.chunk)
				worst = nntest.GradCheckSeeded(t, b.G, loss, seed, params, checkTol)
				if tc.allIgnore && scalarOf(loss.Value()) != 0 {
					t.Fatalf("loss %v with every target ignored, want 0", loss.Value())
				}
			} else {
				worst = nntest.GradCheck(t, b.G, b.LMHeadLoss(x, w, tg, nil, tc.chunk), params, checkTol)
			}
			t.Logf("worst relative error %.2g", worst)
		})
	}
}

// countingBLAS counts a backend's float32 products.
type countingBLAS struct {
	blas.Backend
	calls atomic.Int64
}

func (c *countingBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, cc []float32, ldc int) {
	c.calls.Add(1)
	c.Backend.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc)
}

// headCase is one way of computing the head and loss for
// TestLMHeadLossMatchesUnfused.
type headCase struct {
	format  amp.Format
	weight  string // "trainable", "frozen", or "bf16 bits" (a frozen 16-bit W)
	fused   bool
	seeded  bool
	chunk   int
	workers int
	v       int             // vocabulary; 0: headV
	bf16    blas.BF16Gemmer // the engine's bf16 GEMM; nil: none (products emulated)
	// packFrozen sets Builder.PackFrozenWeights
	packFrozen bool
}

// headRun is what one headCase computed.
type headRun struct {
	loss             float32
	dxp, dw          []float32 // gradients of the norm's input and of W
	dx               []float32 // the gradient of the norm's output, the head's input
	dl, xl           []float32 // the unfused pair's logits gradient and lowered x
	xp, norm, w      []float32 // the inputs: the norm's input and weight, and W's values
	rounded, under   int64
	gemms            int64
	logitsLikeShapes int        // nodes of shape [N, V]
	wCopies          int        // nodes other than W of W's shape [V, D]: its lowered copy, and its gradient where trained
	logitsFm         amp.Format // the fused op's logits format
}

const headN, headD, headV = 11, 8, 23

func runHead(t *testing.T, be blas.Backend, c headCase) headRun {
	t.Helper()
	v := c.v
	if v == 0 {
		v = headV
	}
	cb := &countingBLAS{Backend: be}
	b := NewBuilder(&Engine{BLAS: cb, BF16: c.bf16, Workers: c.workers}, tensor.Float32)
	b.PackFrozenWeights = c.packFrozen
	if c.format != amp.FP32 {
		p := amp.DefaultPolicy(c.format)
		b.Policy = &p
	}
	rng := rand.New(rand.NewPCG(3, 5))
	xp := randParam(b, rng, "xp", 3, headN, headD)
	norm := make([]float32, headD)
	for i := range norm {
		norm[i] = 1 + rng.Float32()
	}
	// the model's head reads the final RMSNorm's output, an fp32 activation
	x := b.RMSNorm(xp, b.Param("norm", []int{headD}, norm, false), 1e-5)
	wData := make([]float32, v*headD)
	for i := range wData {
		wData[i] = (rng.Float32()*2 - 1) * 2
	}
	var w *G.Node
	switch c.weight {
	case "trainable":
		w = b.Param("w", []int{v, headD}, wData, true)
	case "frozen":
		w = b.Param("w", []int{v, headD}, wData, false)
	case "bf16 bits":
		bits := make([]uint16, len(wData))
		for i, v := range wData {
			bits[i] = amp.BF16.Bits16(v)
		}
		w = b.Param16("w", []int{v, headD}, bits, amp.BF16)
	}
	tg := intInput(b, "targets", headTargets)
	seed := G.NewScalar(b.G, tensor.Float32, G.WithName("seed"))
	var loss, logits *G.Node
	if c.fused {
		var lg *G.Node
		if c.seeded {
			lg = seed
		}
		loss = b.LMHeadLoss(x, w, tg, lg, c.chunk)
	} else {
		logits = b.Linear(x, w)
		loss = b.CrossEntropy(logits, tg)
	}
	wrt := G.Nodes{xp, x}
	if c.weight == "trainable" {
		wrt = append(wrt, w)
	}
	if logits != nil {
		wrt = append(wrt, logits)
	}
	grads, err := G.Backpropagate(G.Nodes{loss}, G.Nodes{seed}, wrt)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	// Two runs, as a training loop reuses every buffer: the second's
	// results, with a seed that is not a power of two (so that the
	// gradient's roundings see it), must not depend on the first's.
	var calls int64
	for _, s := range []float32{5, 0.37} {
		if err := G.Let(seed, s); err != nil {
			t.Fatal(err)
		}
		b.Eng.Grads.Take()
		calls = cb.calls.Load()
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
	}
	r := headRun{loss: loss.Value().Data().(float32), dxp: clone32(grads[0]), dx: clone32(grads[1]), gemms: cb.calls.Load() - calls,
		xp: clone32(xp), norm: norm, w: wData}
	if c.weight == "bf16 bits" {
		r.w = make([]float32, len(wData))
		for i, x := range wData {
			r.w[i] = amp.BF16.Round(x)
		}
	}
	r.rounded, r.under = b.Eng.Grads.Take()
	if c.weight == "trainable" {
		r.dw = clone32(grads[2])
	}
	if logits != nil {
		r.dl = clone32(grads[len(grads)-1])
		r.xl = clone32(x)
		c.format.RoundSlice(r.xl)
	}
	for _, n := range b.G.AllNodes() {
		if s := n.Shape(); len(s) == 2 && s[0] == headN && s[1] == v {
			r.logitsLikeShapes++
		}
		if s := n.Shape(); n != w && len(s) == 2 && s[0] == v && s[1] == headD {
			r.wCopies++
		}
		if op, ok := n.Op().(*headLossOp[float32]); ok {
			r.logitsFm = op.logitsFm
		}
	}
	return r
}

func clone32(n *G.Node) []float32 { return append([]float32(nil), n.Value().Data().([]float32)...) }

func sameBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// headBackends are the backends the head tests run on: gonum, native, and
// OpenBLAS and oneDNN where they load. Only native's sums are the same bits
// however a product is cut into slabs and blocks of tokens, by design (its
// kernel sums k in one fixed order for any m and n, and headSlab keeps
// its blocks of k); another library may pick another kernel, with another
// order, by the shape it is given, so those are held to a bound instead
// (headBound).
func headBackends(t *testing.T) map[string]blas.Backend {
	bes := map[string]blas.Backend{"gonum": blas.Gonum{}, "native": blas.Native{Workers: 2}}
	if ob, err := blas.OpenOpenBLAS(2); err == nil {
		bes["openblas"] = ob
	} else {
		t.Logf("OpenBLAS not checked: %v", err)
	}
	if d, err := blas.OpenOneDNN(2); err == nil {
		bes["onednn"] = d
	} else {
		t.Logf("oneDNN not checked: %v", err)
	}
	return bes
}

// gamma is γ_k = k·u/(1−k·u), u = 2⁻²⁴: a float32 sum of k products, in
// any order, is within γ_k·Σ|products| of the exact sum (Higham, Accuracy
// and Stability of Numerical Algorithms, 3.1), so two such sums of the
// same products are within 2γ_k·Σ|products| of each other.
func gamma(k int) float64 {
	ku := float64(k) * 0x1p-24
	return ku / (1 - ku)
}

// headBound holds, per value, how far a correct BLAS may move the fused
// head's loss and gradients from the unfused pair's: bounds on |Δloss|,
// |Δdx| (the norm's output gradient) and |Δdxp| (its input gradient),
// and on |Δdl| (the logits' gradient, [N, V]), which dW's bound needs.
type headBound struct {
	loss        float64
	dx, dxp, dl []float64
}

// newHeadBound propagates, to first order, the differences that another
// order of summation may make, from the logits to dxp (ref is the unfused
// run, whose logits gradient dl and lowered x it holds; s is the loss
// gradient's seed over the counted targets):
//
//   - a logit z = x·Wᵀ (k = D): 2γ_D·Σ|x||W|, and one ulp of f where the
//     policy rounds it to a 16-bit format f (a value computed in another
//     order may round to the neighbouring 16-bit value);
//   - the softmax p moves by at most p·2·max|Δz| in its row, so dl =
//     s·(p − onehot) by s·p·2·max|Δz|, and one ulp of f where rounded;
//   - dx = dl·W (k = V): 2γ_V·Σ|dl||W| plus Σ|Δdl||W|, and one ulp of f;
//   - dxp = rstd·(g⊙w − x·c), c = rstd²·Σ(g⊙w)·x / D: its Jacobian in g
//     bounds the propagated part; its own float32 evaluation, the same
//     formula on other inputs, adds 2γ_(D+4) times its terms' sizes;
//   - the loss, the mean over counted rows of logsumexp(z) − z_t: two
//     max|Δz| per row, and 2γ_(V+4) of each row's terms for the sum.
//
// Second-order terms (products of two differences) are below 2⁻⁴⁸ of the
// values here and are covered by doubling the total.
func newHeadBound(f amp.Format, ref headRun, v int, seed float64) headBound {
	ulpf := func(x float64) float64 {
		if f == amp.FP32 {
			return 0
		}
		return ulp(f, x)
	}
	count := 0
	for _, t := range headTargets {
		if t != IgnoreIndex {
			count++
		}
	}
	s := seed / float64(count)
	b := headBound{dx: make([]float64, headN*headD), dxp: make([]float64, headN*headD), dl: make([]float64, headN*v)}
	for n := 0; n < headN; n++ {
		dz, zmax := 0.0, 0.0
		for j := 0; j < v; j++ {
			var abs, z float64
			for d := 0; d < headD; d++ {
				xw := float64(ref.xl[n*headD+d]) * float64(ref.w[j*headD+d])
				abs += math.Abs(xw)
				z += xw
			}
			dz = max(dz, 2*gamma(headD)*abs+ulpf(z))
			zmax = max(zmax, math.Abs(z))
		}
		if headTargets[n] != IgnoreIndex {
			b.loss += (2*dz + 2*gamma(v+4)*(zmax+math.Log(float64(v))+zmax)) / float64(count)
		}
		for d := 0; d < headD; d++ {
			var e float64
			for j := 0; j < v; j++ {
				dl := float64(ref.dl[n*v+j])
				p := 0.0 // s·p, from dl = s·(p − onehot)
				if headTargets[n] != IgnoreIndex {
					p = math.Abs(dl + s*float64(b2f(headTargets[n] == j)))
				}
				w := math.Abs(float64(ref.w[j*headD+d]))
				b.dl[n*v+j] = p*2*dz + ulpf(dl)
				e += (2*gamma(v)*math.Abs(dl) + b.dl[n*v+j]) * w
			}
			b.dx[n*headD+d] = e + ulpf(float64(ref.dx[n*headD+d]))
		}
		// the norm's backward, row n: dxp_i = rstd·(g_i·w_i − x_i·c)
		x, g, dx, e := ref.xp[n*headD:(n+1)*headD], ref.norm, ref.dx[n*headD:(n+1)*headD], b.dx[n*headD:(n+1)*headD]
		var ms float64
		for _, xi := range x {
			ms += float64(xi) * float64(xi)
		}
		rstd := 1 / math.Sqrt(ms/headD+1e-5)
		var dotE, dotAbs float64 // Σ|g_j w_j x_j| with |Δg_j| and with |g_j|
		for j := range x {
			dotE += e[j] * math.Abs(float64(g[j])*float64(x[j]))
			dotAbs += math.Abs(float64(dx[j]) * float64(g[j]) * float64(x[j]))
		}
		for i := range x {
			xi, gi := math.Abs(float64(x[i])), math.Abs(float64(g[i]))
			prop := rstd*gi*e[i] + rstd*rstd*rstd*xi*dotE/headD
			eval := 2 * gamma(headD+4) * (rstd*gi*math.Abs(float64(dx[i])) + rstd*rstd*rstd*xi*dotAbs/headD)
			b.dxp[n*headD+i] = 2 * (prop + eval)
		}
	}
	b.loss *= 2
	for i := range b.dx {
		b.dx[i] *= 2
	}
	return b
}

// ratio is d/bound, 0 where both are 0 (an ignored row's gradient).
func ratio(d, bound float64) float64 {
	if d == 0 {
		return 0
	}
	return d / bound
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// The fused head and loss computes what the unfused linear + cross-entropy
// pair computes, with every rounding of the precision policy: the loss,
// the gradient of x (through the final norm) and, with one block of
// tokens, dW bit for bit; with several blocks, dW sums its blocks'
// products in another order and agrees to that order's fp32 rounding
// (then one ulp of W's format). The gradient rounding tallies agree, the
// seeded op does no matmul in the backward pass (the recomputing one
// does), and no [N, V] tensor exists in the fused graph.
func TestLMHeadLossMatchesUnfused(t *testing.T) {
	for beName, be := range headBackends(t) {
		for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
			for _, weight := range []string{"trainable", "frozen", "bf16 bits"} {
				ref := runHead(t, be, headCase{format: f, weight: weight, workers: 2})
				if ref.logitsLikeShapes == 0 {
					t.Fatal("the unfused graph has no [N, V] node: the shape check below means nothing")
				}
				for _, chunk := range []int{0, 4} {
					for _, seeded := range []bool{true, false} {
						c := headCase{format: f, weight: weight, fused: true, seeded: seeded, chunk: chunk, workers: 2}
						t.Run(fmt.Sprintf("%s/%v/%s/chunk %d/seeded %v", beName, f, weight, chunk, seeded), func(t *testing.T) {
							got := runHead(t, be, c)
							compareHead(t, f, ref, got, chunk, headV, beName == "native")
							blocks := int64(1)
							if chunk > 0 {
								blocks = (headN + int64(chunk) - 1) / int64(chunk)
							}
							if weight != "bf16 bits" { // a 16-bit W multiplies in slabs; count products of a float W only
								perBlock, unfused := int64(2), int64(2) // logits and dx
								if weight == "trainable" {
									perBlock, unfused = 3, 3 // and dW
								}
								want := blocks * perBlock
								if !seeded {
									want += blocks // logits again in the backward pass
								}
								if ref.gemms != unfused || got.gemms != want {
									t.Errorf("%d matmuls (unfused %d), want %d (unfused %d)", got.gemms, ref.gemms, want, unfused)
								}
							}
							if got.logitsLikeShapes != 0 {
								t.Errorf("the fused graph has %d nodes of shape [%d, %d]", got.logitsLikeShapes, headN, headV)
							}
						})
					}
				}
			}
		}
	}
}

// compareHead checks a fused run against the unfused pair's ref. On the
// native backend (exact) the loss and dxp are the same bits, and so is dW
// with one block of tokens; on any other backend each is held to
// newHeadBound. With several blocks, dW sums its blocks' products in
// another order on every backend (dwWithinBound).
func compareHead(t *testing.T, f amp.Format, ref, got headRun, chunk, v int, exact bool) {
	t.Helper()
	if ref.rounded != got.rounded || ref.under != got.under {
		t.Errorf("rounded %d gradient values, %d underflowed; unfused %d, %d", got.rounded, got.under, ref.rounded, ref.under)
	}
	var ddl []float64 // bounds on |Δdl| where the logits may differ
	if exact {
		if math.Float32bits(ref.loss) != math.Float32bits(got.loss) {
			t.Errorf("loss %v, unfused %v", got.loss, ref.loss)
		}
		if i := sameBits(ref.dxp, got.dxp); i >= 0 {
			t.Errorf("dx[%d] = %v, unfused %v", i, got.dxp[i], ref.dxp[i])
		}
	} else {
		b := newHeadBound(f, ref, v, 0.37)
		ddl = b.dl
		d := math.Abs(float64(got.loss) - float64(ref.loss))
		if d > b.loss {
			t.Errorf("loss %v, unfused %v: more than %.3g apart", got.loss, ref.loss, b.loss)
		}
		worst := ratio(d, b.loss)
		for i := range ref.dxp {
			if d := math.Abs(float64(got.dx[i]) - float64(ref.dx[i])); d > b.dx[i] {
				t.Errorf("norm output gradient [%d] = %v, unfused %v: more than %.3g apart", i, got.dx[i], ref.dx[i], b.dx[i])
			} else {
				worst = max(worst, ratio(d, b.dx[i]))
			}
			if d := math.Abs(float64(got.dxp[i]) - float64(ref.dxp[i])); d > b.dxp[i] {
				t.Errorf("dx[%d] = %v, unfused %v: more than %.3g apart", i, got.dxp[i], ref.dxp[i], b.dxp[i])
			} else {
				worst = max(worst, ratio(d, b.dxp[i]))
			}
		}
		t.Logf("loss, dx and dxp within %.3g of their bounds", worst)
	}
	if ref.dw == nil {
		return
	}
	if exact && (chunk == 0 || chunk >= headN) {
		if i := sameBits(ref.dw, got.dw); i >= 0 {
			t.Errorf("one block: dW[%d] = %v, unfused %v", i, got.dw[i], ref.dw[i])
		}
		return
	}
	dwWithinBound(t, f, ref, got, v, ddl)
}

// dwWithinBound checks dW = dlᵀ·x against the unfused pair's: two fp32
// sums of the same N products, in any orders, differ by at most
// 2γ_N·Σ|products|; rounding both to W's format adds at most one ulp of
// it. Where the logits may differ (ddl not nil: on a backend other than
// native, or on a bf16 GEMM), so may the factor dl, by ddl (newHeadBound):
// that adds Σ|Δdl||x|, which matters where dl is rounded to a 16-bit
// format (one ulp of it can separate two runs' dl). The total is doubled
// for second-order terms.
func dwWithinBound(t *testing.T, f amp.Format, ref, got headRun, v int, ddl []float64) {
	t.Helper()
	differ, worst := 0, 0.0
	for j := 0; j < v; j++ {
		for i := 0; i < headD; i++ {
			var s, e float64
			for n := 0; n < headN; n++ {
				s += math.Abs(float64(ref.dl[n*v+j]) * float64(ref.xl[n*headD+i]))
				if ddl != nil {
					e += ddl[n*v+j] * math.Abs(float64(ref.xl[n*headD+i]))
				}
			}
			a, b := float64(ref.dw[j*headD+i]), float64(got.dw[j*headD+i])
			bound := 2 * (2*gamma(headN)*s + e)
			if f != amp.FP32 {
				bound += ulp(f, max(math.Abs(a), math.Abs(b)))
			}
			if math.Abs(a-b) > bound {
				t.Errorf("dW[%d,%d] = %v, unfused %v: more than %.3g apart", j, i, b, a, bound)
			}
			if a != b {
				differ++
				worst = max(worst, math.Abs(a-b)/bound)
			}
		}
	}
	t.Logf("%d of %d dW values differ from the unfused pair's, worst %.3g of the bound", differ, v*headD, worst)
}

// With a vocabulary of several slabs (headSlab), workers compute the
// logits of one slab each, with the same products: the fused op still
// computes what the pair computes, bit for bit with one block on the
// native backend, within newHeadBound on any other (compareHead).
func TestLMHeadLossSlabsMatchUnfused(t *testing.T) {
	const v = 3*headSlab + 100
	for beName, be := range headBackends(t) {
		for _, f := range []amp.Format{amp.FP32, amp.BF16} {
			ref := runHead(t, be, headCase{format: f, weight: "trainable", workers: 3, v: v})
			for _, chunk := range []int{0, 4} {
				t.Run(fmt.Sprintf("%s/%v/chunk %d", beName, f, chunk), func(t *testing.T) {
					got := runHead(t, be, headCase{format: f, weight: "trainable", fused: true, seeded: true, chunk: chunk, workers: 3, v: v})
					compareHead(t, f, ref, got, chunk, v, beName == "native")
					// 3 slabs of logits, dx and dW per block; 1 block or 3
					blocks := int64(1)
					if chunk > 0 {
						blocks = 3
					}
					if got.gemms != 5*blocks {
						t.Errorf("%d matmuls, want %d", got.gemms, 5*blocks)
					}
				})
			}
		}
	}
}

// The fused op's results do not depend on the thread count: blocks are
// fixed by the vocabulary and dW adds them in order.
func TestLMHeadLossThreadCount(t *testing.T) {
	for _, f := range []amp.Format{amp.FP32, amp.BF16} {
		var runs []headRun
		for _, workers := range []int{1, 3} {
			runs = append(runs, runHead(t, blas.Native{Workers: workers}, headCase{format: f, weight: "trainable", fused: true, seeded: true, chunk: 4, workers: workers}))
		}
		a, b := runs[0], runs[1]
		if math.Float32bits(a.loss) != math.Float32bits(b.loss) || sameBits(a.dxp, b.dxp) >= 0 || sameBits(a.dw, b.dw) >= 0 {
			t.Errorf("%v: 1 and 3 threads differ", f)
		}
	}
}

func TestHeadChunk(t *testing.T) {
	for _, tc := range []struct{ v, want int }{{512, 131072}, {32000, 2097}, {151936, 441}, {1 << 22, 32}} {
		if got := HeadChunk(tc.v); got != tc.want {
			t.Errorf("HeadChunk(%d) = %d, want %d", tc.v, got, tc.want)
		}
		if c := HeadChunk(tc.v); c > 32 && c*tc.v*4 > 256<<20 {
			t.Errorf("HeadChunk(%d) = %d holds %d bytes of logits", tc.v, c, c*tc.v*4)
		}
	}
}
