package nn

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

func lowBuilder(f amp.Format) *Builder {
	b := NewBuilder(&Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float32)
	p := amp.DefaultPolicy(f)
	b.Policy = &p
	return b
}

func f32(n *G.Node) []float32 { return n.Value().Data().([]float32) }

// representable reports whether every value is exactly a value of format f.
func representable(t *testing.T, name string, f amp.Format, xs []float32) {
	t.Helper()
	for i, x := range xs {
		if r := f.Round(x); r != x && !(x != x && r != r) {
			t.Fatalf("%s[%d] = %v is not a %v value (nearest %v)", name, i, x, f, r)
		}
	}
}

// ulp is the spacing of format f's values at x.
func ulp(f amp.Format, x float64) float64 {
	e := math.Floor(math.Log2(math.Max(math.Abs(x), 1e-30)))
	bits := 7.0
	if f == amp.FP16 {
		bits = 10
		e = math.Max(e, -14)
	}
	return math.Ldexp(1, int(e)-int(bits))
}

func TestLowPrecisionLinear(t *testing.T) {
	for _, f := range []amp.Format{amp.BF16, amp.FP16} {
		t.Run(f.String(), func(t *testing.T) {
			b := lowBuilder(f)
			rng := rand.New(rand.NewPCG(1, 2))
			x := randParam(b, rng, "x", 3, 6, 10)
			w := randParam(b, rng, "w", 1, 4, 10)
			y := b.Linear(x, w)
			if b.Format(y) != f {
				t.Fatalf("linear output format %v, want %v", b.Format(y), f)
			}
			cost := G.Must(G.Sum(y))
			grads, err := G.Grad(cost, x, w)
			if err != nil {
				t.Fatal(err)
			}
			runGraph(t, b)
			out, xv, wv := f32(y), f32(x), f32(w)
			representable(t, "y", f, out)
			for i := 0; i < 6; i++ {
				for o := 0; o < 4; o++ {
					var ref float64 // products of rounded inputs, summed exactly
					for k := 0; k < 10; k++ {
						ref += float64(f.Round(xv[i*10+k])) * float64(f.Round(wv[o*10+k]))
					}
					if d := math.Abs(float64(out[i*4+o]) - ref); d > ulp(f, ref) {
						t.Fatalf("y[%d,%d] = %v, reference %v: more than one %v ulp apart", i, o, out[i*4+o], ref, f)
					}
				}
			}
			// the gradients of the low-precision copies are in the low
			// format, and the fp32 masters receive them exactly
			representable(t, "dx", f, f32(grads[0]))
			representable(t, "dW", f, f32(grads[1]))
		})
	}
}

func TestFP16OverflowsLikeAGPU(t *testing.T) {
	b := lowBuilder(amp.FP16)
	x := b.Param("x", []int{1, 2}, []float32{300, 300}, false)
	w := b.Param("w", []int{2, 2}, []float32{200, 200, 1e-4, 1e-4}, false)
	y := b.Linear(x, w)
	runGraph(t, b)
	out := f32(y)
	// 300·200·2 = 120000 > 65504: +Inf in fp16. 300·1e-4·2: 1e-4 rounds to
	// 1.0002e-4 in fp16, the product accumulates in fp32, the sum rounds.
	if !math.IsInf(float64(out[0]), 1) {
		t.Errorf("y[0] = %v, want +Inf", out[0])
	}
	want := amp.FP16.Round(2 * 300 * amp.FP16.Round(1e-4))
	if out[1] != want {
		t.Errorf("y[1] = %v, want %v", out[1], want)
	}
}

// The engine counts the gradient values that fp16 rounding sends to zero.
// The cost c·sum(y) with c = 2^-24 (fp16's smallest subnormal) gives y,
// an fp16 tensor, the gradient c, rounded to fp16 (2 values, exact); then
// dW = c·x = {2^-30, 2^-24} per row (2^-30 underflows, 2^-24 stays) and
// dx = c·(2^-3 + 2^-3) = 2^-26 (underflows): 8 values rounded, 4 to zero.
func TestGradUnderflowCount(t *testing.T) {
	b := lowBuilder(amp.FP16)
	x := b.Param("x", []int{1, 2}, []float32{0x1p-6, 1}, true)
	w := b.Param("w", []int{2, 2}, []float32{0x1p-3, 0x1p-3, 0x1p-3, 0x1p-3}, true)
	y := b.Linear(x, w)
	cost := G.Must(G.Mul(G.Must(G.Sum(y)), G.NewConstant(float32(0x1p-24))))
	grads, err := G.Grad(cost, x, w)
	if err != nil {
		t.Fatal(err)
	}
	runGraph(t, b)
	rounded, under := b.Eng.Grads.Take()
	if rounded != 8 || under != 4 {
		t.Fatalf("counted %d rounded, %d underflowed; want 8 and 4 (dx %v, dW %v)", rounded, under, f32(grads[0]), f32(grads[1]))
	}
	if dw := f32(grads[1]); dw[0] != 0 || dw[1] != 0x1p-24 {
		t.Fatalf("dW = %v, want [0 2^-24 0 2^-24]", dw)
	}
	if r, u := b.Eng.Grads.Take(); r != 0 || u != 0 {
		t.Fatalf("Take did not reset: %d, %d", r, u)
	}
}

func TestCastCacheFollowsWeightsChanged(t *testing.T) {
	b := lowBuilder(amp.BF16)
	x := b.Param("x", []int{1, 1}, []float32{1}, false)
	wData, frozenData := []float32{1}, []float32{1}
	w := b.Param("w", []int{1, 1}, wData, true)
	fz := b.Param("frozen", []int{1, 1}, frozenData, false)
	y := b.Add(b.Linear(x, w), b.Linear(x, fz))
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	run := func() float32 {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		return f32(y)[0]
	}
	if got := run(); got != 2 {
		t.Fatalf("y = %v, want 2", got)
	}
	wData[0], frozenData[0] = 3, 5
	if got := run(); got != 2 {
		t.Fatalf("within a step the cast copy is reused: y = %v, want 2", got)
	}
	b.Eng.WeightsChanged()
	if got := run(); got != 4 {
		t.Fatalf("after an optimizer step the trainable weight is cast again, the frozen one never: y = %v, want 3+1", got)
	}
}

// A whole layer stack in bf16: every low-precision tensor holds bf16
// values, the loss stays close to fp32's, and a float32 policy off changes
// nothing.
func TestAttentionAndStackInLowPrecision(t *testing.T) {
	for _, f := range []amp.Format{amp.BF16, amp.FP16} {
		b := lowBuilder(f)
		rng := rand.New(rand.NewPCG(4, 4))
		s := AttentionShape{Batch: 2, SeqLen: 6, Heads: 4, KVHeads: 2, HeadDim: 4}
		n := s.Batch * s.SeqLen
		x := randParam(b, rng, "x", 1, n, 16)
		wq, wk, wv := randParam(b, rng, "wq", 0.5, 16, 16), randParam(b, rng, "wk", 0.5, 8, 16), randParam(b, rng, "wv", 0.5, 8, 16)
		q := b.Rope(b.Linear(x, wq), 4, 4, 6, 10000)
		k := b.Rope(b.Linear(x, wk), 2, 4, 6, 10000)
		att := b.Attention(q, k, b.Linear(x, wv), s)
		if b.Format(q) != amp.FP32 || b.Format(att) != f {
			t.Fatalf("%v: rope output %v (want fp32), attention output %v (want %v)", f, b.Format(q), b.Format(att), f)
		}
		grads, err := G.Grad(G.Must(G.Sum(att)), wq, wk, wv)
		if err != nil {
			t.Fatal(err)
		}
		runGraph(t, b)
		representable(t, f.String()+" attention", f, f32(att))
		for i, g := range grads {
			representable(t, f.String()+" weight gradient", f, f32(g))
			if i == 0 && allZero(f32(g)) {
				t.Fatalf("%v: the query weight got no gradient", f)
			}
		}
	}
}

func allZero(xs []float32) bool {
	for _, x := range xs {
		if x != 0 {
			return false
		}
	}
	return true
}

// A frozen weight kept as 16-bit values computes what the same values held
// in fp32 compute: the block-by-block conversion (gonum) and the widening
// as the native backend packs W (blas.Widener) are exact.
func TestSixteenBitWeights(t *testing.T) {
	for _, c := range []struct {
		f  amp.Format
		be blas.Backend
	}{{amp.BF16, blas.Gonum{}}, {amp.FP16, blas.Gonum{}}, {amp.BF16, blas.Native{Workers: 2}}, {amp.FP16, blas.Native{Workers: 3}}} {
		f := c.f
		rng := rand.New(rand.NewPCG(9, 9))
		// wide enough that the forward converts W in 10 row blocks (16 rows
		// of 16392) and dx in 10 column slabs (150 rows of 1747), the last
		// ones partial
		const n, in, out, vocab = 5, 16392, 150, 7
		wf := make([]float32, out*in)
		bits := make([]uint16, out*in)
		for i := range wf {
			bits[i] = f.Bits16(rng.Float32()*2 - 1)
			wf[i] = f.FromBits16(bits[i])
		}
		table := make([]float32, vocab*in)
		tbits := make([]uint16, vocab*in)
		for i := range table {
			tbits[i] = f.Bits16(rng.Float32())
			table[i] = f.FromBits16(tbits[i])
		}
		xs := make([]float32, n*in)
		for i := range xs {
			xs[i] = rng.Float32()
		}
		run := func(sixteen bool) (y, dx, emb []float32, loss float32) {
			b := NewBuilder(&Engine{BLAS: c.be, Workers: 2}, tensor.Float32)
			x := b.Param("x", []int{n, in}, append([]float32(nil), xs...), true)
			var w, tb *G.Node
			if sixteen {
				w, tb = b.Param16("w", []int{out, in}, bits, f), b.Param16("t", []int{vocab, in}, tbits, f)
			} else {
				w, tb = b.Param("w", []int{out, in}, wf, false), b.Param("t", []int{vocab, in}, table, false)
			}
			yn := b.Linear(x, w)
			en := b.Embedding(intInput(b, "ids", []int{3, 0, 6}), tb)
			// W as an LM head too (vocabulary out, in blocks of 2 tokens),
			// its forward and dx products done the same two ways
			ln := b.LMHeadLoss(x, w, intInput(b, "targets", []int{7, 149, 0, 64, 3}), nil, 2)
			g, err := G.Grad(G.Must(G.Add(G.Must(G.Sum(yn)), ln)), x)
			if err != nil {
				t.Fatal(err)
			}
			runGraph(t, b)
			return append([]float32(nil), f32(yn)...), append([]float32(nil), f32(g[0])...), append([]float32(nil), f32(en)...), ln.Value().Data().(float32)
		}
		y32, dx32, e32, l32 := run(false)
		y16, dx16, e16, l16 := run(true)
		if math.Float32bits(l16) != math.Float32bits(l32) {
			t.Fatalf("%v: head loss %v with 16-bit storage, %v in fp32", f, l16, l32)
		}
		for i := range y32 {
			if y16[i] != y32[i] {
				t.Fatalf("%v: y[%d] = %v with 16-bit storage, %v in fp32", f, i, y16[i], y32[i])
			}
		}
		for i := range e32 {
			if e16[i] != e32[i] {
				t.Fatalf("%v: embedding[%d] = %v with 16-bit storage, %v in fp32", f, i, e16[i], e32[i])
			}
		}
		for i := range dx32 { // each dx column is one whole GEMM over W's rows, as in fp32 (linear and head)
			if dx16[i] != dx32[i] {
				t.Fatalf("%v: dx[%d] = %v with 16-bit storage, %v in fp32", f, i, dx16[i], dx32[i])
			}
		}
	}
}
