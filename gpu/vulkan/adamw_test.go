package vulkan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/optim"
)

// TestAdamW runs AdamW steps on the device and with optim.AdamW on the CPU
// from the same state. Each step starts from the CPU's parameters and
// moments, so errors do not compound; the bounds are Vulkan's precision
// rules: fma may be unfused (one more rounding: 2u on the moments), and
// sqrt (≤ 3 ulp through inversesqrt) and division (2.5 ulp) move the
// update by at most 8u relative, so |Δx| ≤ 2u·|x| + 8u·|update|.
func TestAdamW(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const n = 3001
	cfg := optim.AdamWConfig{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	const lr = 1e-3
	rng := rand.New(rand.NewPCG(9, 10))
	x, g := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	o, err := optim.NewAdamW(cfg)
	must(t, err)
	p := &optim.Param{Name: "w", Shape: []int{n}, Value: x, Grad: g}
	bufs := make([]*Buffer, 4)
	for i := range bufs {
		bufs[i], err = d.NewBuffer(4 * n)
		must(t, err)
		defer bufs[i].Free()
	}
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	m, v := make([]float32, n), make([]float32, n)
	const u = 0x1p-24
	same, total := 0, 0
	for step := 1; step <= 4; step++ {
		for i := range g {
			g[i] = float32(rng.NormFloat64() * 0.1)
			if i%97 == 0 {
				g[i] = 0
			}
		}
		x0, m0, v0 := append([]float32(nil), x...), append([]float32(nil), m...), append([]float32(nil), v...)
		for i, s := range [][]float32{x0, g, m0, v0} {
			must(t, bufs[i].WriteFloat32(0, s))
		}
		must(t, ks.AdamW(r, AdamWStep{
			LR: lr, Beta1: cfg.Beta1, Beta2: cfg.Beta2, Eps: cfg.Eps, WeightDecay: cfg.WeightDecay,
			BiasCorrection1: 1 - math.Pow(cfg.Beta1, float64(step)), BiasCorrection2: 1 - math.Pow(cfg.Beta2, float64(step)),
		}, bufs[0], bufs[1], bufs[2], bufs[3], n))
		must(t, r.Submit())
		must(t, o.Step([]*optim.Param{p}, lr))
		st := o.State()
		m, v = st.Tensors["w.exp_avg"], st.Tensors["w.exp_avg_sq"]
		gx, gm, gv := make([]float32, n), make([]float32, n), make([]float32, n)
		must(t, bufs[0].ReadFloat32(0, gx))
		must(t, bufs[2].ReadFloat32(0, gm))
		must(t, bufs[3].ReadFloat32(0, gv))
		for i := range n {
			b1, b2 := float32(cfg.Beta1), float32(cfg.Beta2)
			a1, a2 := 1-b1, 1-b2
			mBound := 2 * u * (math.Abs(float64(m0[i]*b1)) + math.Abs(float64(g[i]*a1)))
			vBound := 3 * u * (math.Abs(float64(v0[i]*b2)) + math.Abs(float64(a2*g[i]*g[i])))
			upd := float64(x[i]) - float64(x0[i])*(1-lr*cfg.WeightDecay)
			xBound := 2*u*math.Abs(float64(x[i])) + 8*u*math.Abs(upd)
			for _, c := range []struct {
				name      string
				got, want float32
				bound     float64
			}{{"m", gm[i], m[i], mBound}, {"v", gv[i], v[i], vBound}, {"x", gx[i], x[i], xBound}} {
				if diff := math.Abs(float64(c.got) - float64(c.want)); !(diff <= c.bound) {
					t.Fatalf("step %d: %s[%d] = %g, CPU %g: differ by %.3g, bound %.3g", step, c.name, i, c.got, c.want, diff, c.bound)
				}
				if c.got == c.want {
					same++
				}
				total++
			}
		}
	}
	t.Logf("%d of %d values bit-identical to optim.AdamW, the rest within the bounds", same, total)
}
