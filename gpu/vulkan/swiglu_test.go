package vulkan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/nn"
)

// TestSwiGLUKernels checks the SwiGLU kernels over gates from −110 to 100
// (both σ branches, expf's clamps at −103.97 and 88.72 and its subnormal
// path below −87.34) against float64, within the bounds shaders/swiglu.comp
// and vkengine's TestSwiGLU derive (u = 2^-24): y and du within 14u of
// each value, da within 18u·|g·u|·σ(a)·(1 + |a|), each plus 2^-126 times
// the value's factors where σ or 1 − σ is subnormal (a device may flush
// it to zero). It also measures the distance to nn.SwiGLUInto, the CPU's
// kernel (σ within 8u there), in ulps of the larger value.
func TestSwiGLUKernels(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const u = 0x1p-24
	rng := rand.New(rand.NewPCG(13, 14))
	var a []float32
	for x := -110.0; x <= 100; x += 0.0625 {
		a = append(a, float32(x))
	}
	a = append(a, 0, 0x1p-100, -0x1p-100) // (subnormal gates are left out: a device may flush them)
	for _, edge := range []float32{-103.97208, -87.33654, 88.72284} {
		b := math.Float32bits(edge)
		for k := range uint32(64) {
			a = append(a, math.Float32frombits(b+k), math.Float32frombits(b-k))
		}
	}
	for range 4096 {
		a = append(a, float32(3*rng.NormFloat64()))
	}
	n := len(a)
	up, g := make([]float32, n), make([]float32, n)
	for i := range n {
		up[i], g[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	bufs := make([]*Buffer, 6) // a, u, g, y, da, du
	for i := range bufs {
		b, err := d.NewBuffer(4 * n)
		must(t, err)
		defer b.Free()
		bufs[i] = b
	}
	must(t, bufs[0].WriteFloat32(0, a))
	must(t, bufs[1].WriteFloat32(0, up))
	must(t, bufs[2].WriteFloat32(0, g))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	must(t, ks.SwiGLU(r, bufs[0], bufs[1], bufs[3], n))
	must(t, ks.SwiGLUBackward(r, bufs[0], bufs[1], bufs[2], bufs[4], bufs[5], n))
	must(t, r.Submit())
	y, da, du := make([]float32, n), make([]float32, n), make([]float32, n)
	must(t, bufs[3].ReadFloat32(0, y))
	must(t, bufs[4].ReadFloat32(0, da))
	must(t, bufs[5].ReadFloat32(0, du))
	cpu := make([]float32, n)
	nn.SwiGLUInto(cpu, a, up)

	const tiny = 0x1p-126
	worst, ulps := [3]float64{}, 0.0
	for i := range n {
		x, uu, gg := float64(a[i]), float64(up[i]), float64(g[i])
		s := 1 / (1 + math.Exp(-x))
		want := [3]float64{x * s * uu, gg * uu * s * (1 + x*(1-s)), gg * x * s}
		bound := [3]float64{
			14*u*math.Abs(want[0]) + 2*tiny*math.Abs(x*uu),
			18*u*math.Abs(gg*uu)*s*(1+math.Abs(x)) + 2*tiny*math.Abs(gg*uu)*(1+math.Abs(x)),
			14*u*math.Abs(want[2]) + 2*tiny*math.Abs(gg*x),
		}
		for k, got := range []float32{y[i], da[i], du[i]} {
			diff := math.Abs(float64(got) - want[k])
			if !(diff <= bound[k]) {
				t.Fatalf("a = %v (u %v, g %v): %s = %v, want %v ± %.3g", a[i], up[i], g[i], []string{"y", "da", "du"}[k], got, want[k], bound[k])
			}
			if bound[k] > 0 {
				worst[k] = max(worst[k], diff/bound[k])
			}
		}
		if big := max(math.Abs(float64(y[i])), math.Abs(float64(cpu[i]))); big >= 0x1p-100 {
			ulp := math.Exp2(math.Floor(math.Log2(big)) - 23)
			ulps = max(ulps, math.Abs(float64(y[i])-float64(cpu[i]))/ulp)
		}
	}
	t.Logf("%d values; worst error / bound: y %.3f, da %.3f, du %.3f; y off nn.SwiGLUInto by up to %.0f ulp", n, worst[0], worst[1], worst[2], ulps)
}
