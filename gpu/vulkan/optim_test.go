package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/optim"
)

// floatBuffer is a device buffer holding xs (at least one word).
func floatBuffer(t *testing.T, d *Device, xs []float32) *Buffer {
	t.Helper()
	b, err := d.NewBuffer(4 * max(1, len(xs)))
	must(t, err)
	t.Cleanup(b.Free)
	if len(xs) > 0 {
		must(t, b.WriteFloat32(0, xs))
	}
	return b
}

// TestSumAndSumSquares checks the two-pass sums against float64 sums
// within the bound of shaders/optim_reduce.comp: γ_k·Σ|terms|, k =
// ReduceDepth(n) (+1 for a square's rounding, +1 for the scale), at
// sizes below one workgroup, on its edges, and with the first pass's
// workgroups capped (spans longer than 256). Each result goes to its
// own slot of one output, the others left as they were, and a second
// run gives the same bits. The sum of squares is also checked against
// optim.ClipGlobalNorm's float64 norm: |√got − norm| ≤ ½γ·norm.
func TestSumAndSumSquares(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	rng := rand.New(rand.NewPCG(13, 14))
	sizes := []int{0, 1, 7, 256, 257, 1000, 65539, reduceGroups*256 + 1, 3 << 20}
	if testing.Short() {
		sizes = sizes[:7]
	}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Exp2(float64(i%7-3)))
			}
			X := floatBuffer(t, d, x)
			scratch := floatBuffer(t, d, make([]float32, ReduceScratch(n)))
			out := floatBuffer(t, d, []float32{-1, -1, -1, -1})
			r, err := d.NewRecorder()
			must(t, err)
			defer r.Close()
			const scale = 0.375
			must(t, ks.Sum(r, X, n, scale, scratch, out, 1))
			must(t, ks.SumSquares(r, X, n, scratch, out, 2))
			must(t, r.Submit())
			got := make([]float32, 4)
			must(t, out.ReadFloat32(0, got))
			var sum, abs, sq float64
			for _, v := range x {
				sum += float64(v)
				abs += math.Abs(float64(v))
				sq += float64(v) * float64(v)
			}
			k := ReduceDepth(n)
			sumBound, sqBound := gamma(k+1)*scale*abs, gamma(k+1)*sq
			if got[0] != -1 || got[3] != -1 {
				t.Fatalf("slots 0 and 3 changed: %v", got)
			}
			if diff := math.Abs(float64(got[1]) - scale*sum); !(diff <= sumBound) {
				t.Errorf("Sum = %g, float64 %g: off by %.3g, bound %.3g", got[1], scale*sum, diff, sumBound)
			}
			if diff := math.Abs(float64(got[2]) - sq); !(diff <= sqBound) {
				t.Errorf("SumSquares = %g, float64 %g: off by %.3g, bound %.3g", got[2], sq, diff, sqBound)
			}
			norm := optim.ClipGlobalNorm([]*optim.Param{{Name: "g", Value: make([]float32, n), Grad: x}}, 0)
			if diff := math.Abs(math.Sqrt(float64(got[2])) - norm); !(diff <= 0.5*gamma(k+1)*norm+0x1p-24*norm) {
				t.Errorf("√SumSquares = %g, optim.ClipGlobalNorm %g: off by %.3g", math.Sqrt(float64(got[2])), norm, diff)
			}
			must(t, ks.Sum(r, X, n, scale, scratch, out, 0))
			must(t, ks.SumSquares(r, X, n, scratch, out, 3))
			must(t, r.Submit())
			again := make([]float32, 4)
			must(t, out.ReadFloat32(0, again))
			if math.Float32bits(again[0]) != math.Float32bits(got[1]) || math.Float32bits(again[3]) != math.Float32bits(got[2]) {
				t.Errorf("a second run gave %g and %g, the first %g and %g", again[0], again[3], got[1], got[2])
			}
			t.Logf("n %d (depth %d): Sum off by %.3g (bound %.3g), SumSquares by %.3g (bound %.3g)", n, k,
				math.Abs(float64(got[1])-scale*sum), sumBound, math.Abs(float64(got[2])-sq), sqBound)
		})
	}
}

// TestSGD runs SGD steps on the device and with optim.SGD on the CPU from
// the same state, for each configuration's first steps (the momentum
// buffer starts as the gradient). Each step starts from the CPU's
// parameters and buffer, so errors do not compound. The bound: Vulkan
// may leave fma unfused, which moves fma(a, b, c) by at most 3u·(|a·b| +
// |c|) from the CPU's correctly rounded one; b·mom + g is the same
// operations on both (δb = δg where g moved, plus an ulp of b); and the
// update moves x by lr·δd + 3u·(|d·lr| + |x|).
func TestSGD(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const n, lr, u = 2049, 0.05, 0x1p-24
	for _, cfg := range []optim.SGDConfig{
		{}, {WeightDecay: 0.01}, {Momentum: 0.9}, {Momentum: 0.9, WeightDecay: 1e-4, Nesterov: true}, {Momentum: 0.5, WeightDecay: 0.1},
	} {
		t.Run(fmt.Sprintf("%+v", cfg), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(15, 16))
			x, g := make([]float32, n), make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			o, err := optim.NewSGD(cfg)
			must(t, err)
			p := &optim.Param{Name: "w", Shape: []int{n}, Value: x, Grad: g}
			X, G, B := floatBuffer(t, d, x), floatBuffer(t, d, g), floatBuffer(t, d, make([]float32, n))
			var mom *Buffer
			if cfg.Momentum != 0 {
				mom = B
			}
			r, err := d.NewRecorder()
			must(t, err)
			defer r.Close()
			b := make([]float32, n)
			same, total := 0, 0
			wd, mu := float64(float32(cfg.WeightDecay)), float64(float32(cfg.Momentum))
			for step := 1; step <= 3; step++ {
				for i := range g {
					g[i] = float32(rng.NormFloat64() * 0.1)
				}
				x0, b0 := append([]float32(nil), x...), append([]float32(nil), b...)
				must(t, X.WriteFloat32(0, x0))
				must(t, G.WriteFloat32(0, g))
				must(t, B.WriteFloat32(0, b0))
				must(t, ks.SGD(r, SGDStep{LR: lr, Momentum: cfg.Momentum, WeightDecay: cfg.WeightDecay,
					Nesterov: cfg.Nesterov, First: step == 1}, X, G, mom, n))
				must(t, r.Submit())
				must(t, o.Step([]*optim.Param{p}, lr))
				if cfg.Momentum != 0 {
					b = o.State().Tensors["w.momentum_buffer"]
				}
				gx, gb := make([]float32, n), make([]float32, n)
				must(t, X.ReadFloat32(0, gx))
				must(t, B.ReadFloat32(0, gb))
				for i := range n {
					xi, gi, bi := math.Abs(float64(x0[i])), math.Abs(float64(g[i])), math.Abs(float64(b[i]))
					dg := 0.0
					if wd != 0 {
						dg = 3 * u * (xi*wd + gi)
					}
					dd, db := dg, 0.0
					if cfg.Momentum != 0 {
						if dg > 0 {
							db = dg + 2*u*bi
						}
						dd = db
						if cfg.Nesterov {
							dd = 3*u*(bi*mu+gi+dg) + db*mu + dg
						}
					}
					dNow := math.Abs(float64(x[i])-float64(x0[i])) / lr // |d|, to within rounding
					xBound := lr*dd + 3*u*(dNow*lr+xi)
					if diff := math.Abs(float64(gx[i]) - float64(x[i])); !(diff <= xBound) {
						t.Fatalf("step %d: x[%d] = %g, CPU %g: off by %.3g, bound %.3g", step, i, gx[i], x[i], diff, xBound)
					}
					if cfg.Momentum != 0 {
						if diff := math.Abs(float64(gb[i]) - float64(b[i])); !(diff <= db) {
							t.Fatalf("step %d: momentum[%d] = %g, CPU %g: off by %.3g, bound %.3g", step, i, gb[i], b[i], diff, db)
						}
						if gb[i] == b[i] {
							same++
						}
						total++
					}
					if gx[i] == x[i] {
						same++
					}
					total++
				}
			}
			t.Logf("%d of %d values bit-identical to optim.SGD, the rest within the bounds", same, total)
		})
	}
}

// TestOptimKernelErrors: arguments the kernels refuse, each with an error
// naming the kernel.
func TestOptimKernelErrors(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	small := floatBuffer(t, d, make([]float32, 4))
	big := floatBuffer(t, d, make([]float32, 1024))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for _, c := range []struct {
		name string
		err  error
	}{
		{"Sum: x too small", ks.Sum(r, small, 5, 1, big, big, 0)},
		{"Sum: scratch is x", ks.Sum(r, big, 300, 1, big, small, 0)},
		{"SumSquares: scratch too small", ks.SumSquares(r, big, 1024, floatBuffer(t, d, nil), small, 0)},
		{"SumSquares: out index past the end", ks.SumSquares(r, big, 10, small, big, 1024)},
		{"SGD: momentum without a buffer", ks.SGD(r, SGDStep{LR: 1, Momentum: 0.9}, big, small, nil, 4)},
		{"SGD: a buffer without momentum", ks.SGD(r, SGDStep{LR: 1}, big, small, floatBuffer(t, d, make([]float32, 4)), 4)},
		{"SGD: nesterov without momentum", ks.SGD(r, SGDStep{LR: 1, Nesterov: true}, big, small, nil, 4)},
		{"SGD: grad is param", ks.SGD(r, SGDStep{LR: 1}, big, big, nil, 4)},
		{"CrossEntropyBackward without a seed", ks.CrossEntropyBackward(r, CrossEntropyArgs{Rows: 1, V: 4, Src: small, Dst: big, Targets: small})},
		{"CrossEntropyForward: targets too short", ks.CrossEntropyForward(r, CrossEntropyArgs{Rows: 2, V: 4, First: 3, Src: big, Dst: big, Targets: small, RowLoss: big})},
	} {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		} else {
			t.Logf("%s: %v", c.name, c.err)
		}
	}
}
