package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/nn"
)

// TestRMSNorm checks the RMSNorm kernel against a float64 reference
// within (½γ_{⌈d/256⌉+10} + 7u)·|y| (shaders/rmsnorm.comp derives it: the
// fp32 sum of squares, the mean, eps, inversesqrt's 2 ulp, two products),
// and against nn.RMSNormRows (float64 statistics: within 4u more).
func TestRMSNorm(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	rng := rand.New(rand.NewPCG(11, 12))
	const u = 0x1p-24
	for _, c := range []struct {
		rows, d int
		eps     float64
	}{{1, 1, 1e-6}, {3, 7, 1e-5}, {5, 256, 1e-6}, {4, 300, 1e-6}, {9, 1000, 1e-5}, {2, 4096, 1e-6}} {
		t.Run(fmt.Sprintf("%dx%d", c.rows, c.d), func(t *testing.T) {
			x, w := make([]float32, c.rows*c.d), make([]float32, c.d)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * math.Exp2(float64(i/c.d%5*3-6))) // rows of different scales
			}
			for j := range c.d {
				x[j] = 0 // the first row is zero: y = 0 (rstd = 1/sqrt(eps))
			}
			if c.rows == 1 {
				x[0] = 3
			}
			for i := range w {
				w[i] = float32(1 + 0.1*rng.NormFloat64())
			}
			X, err := d.NewBuffer(4 * len(x))
			must(t, err)
			defer X.Free()
			W, err := d.NewBuffer(4 * len(w))
			must(t, err)
			defer W.Free()
			Y, err := d.NewBuffer(4 * len(x))
			must(t, err)
			defer Y.Free()
			must(t, X.WriteFloat32(0, x))
			must(t, W.WriteFloat32(0, w))
			r, err := d.NewRecorder()
			must(t, err)
			defer r.Close()
			must(t, ks.RMSNorm(r, X, W, Y, c.rows, c.d, c.eps))
			must(t, r.Submit())
			got := make([]float32, len(x))
			must(t, Y.ReadFloat32(0, got))
			cpu := make([]float32, len(x))
			nn.RMSNormRows(cpu, x, w, c.d, c.eps)

			g := 0.5*gamma((c.d+255)/256+10) + 7*u
			worst := 0.0
			for row := range c.rows {
				xr := x[row*c.d : (row+1)*c.d]
				var ss float64
				for _, v := range xr {
					ss += float64(v) * float64(v)
				}
				rstd := 1 / math.Sqrt(ss/float64(c.d)+float64(float32(c.eps)))
				for j, v := range xr {
					i := row*c.d + j
					want := float64(w[j]) * float64(v) * rstd
					bound := g * math.Abs(want)
					if diff := math.Abs(float64(got[i]) - want); !(diff <= bound) {
						t.Fatalf("y[%d,%d] = %g, want %g ± %.3g", row, j, got[i], want, bound)
					} else if bound > 0 {
						worst = max(worst, diff/bound)
					}
					if diff := math.Abs(float64(got[i]) - float64(cpu[i])); !(diff <= bound+4*u*math.Abs(want)) {
						t.Fatalf("y[%d,%d] = %g, nn.RMSNormRows %g: differ by %.3g", row, j, got[i], cpu[i], diff)
					}
				}
			}
			t.Logf("worst error %.3f of the bound", worst)
		})
	}
}
