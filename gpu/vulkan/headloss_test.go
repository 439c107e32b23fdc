package vulkan

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestCrossEntropyRows checks the cross-entropy kernels against float64
// on given fp32 logits: rows at an offset into longer target and loss
// buffers, vocabularies below, at and well above the 256-wide workgroup,
// ignored targets, logits spread widely and shifted far from zero. The
// bounds are shaders/headloss_rows.comp's, for any correct
// implementation: each probability within εp·p (exp's 3+2|x| ulp at x =
// l − max, the sum's γ_{⌈V/256⌉+8}, 1/S's 2.5 ulp and the product), a
// gradient within εp + 4.5u more (the scale's division and product, the
// target's subtraction: u of |scale|), and a row's loss within 2u·loss +
// 2^-21 + 3u·log S + the sum's error and exp's, (3 + 2R)u, R the row's
// range.
func TestCrossEntropyRows(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	rng := rand.New(rand.NewPCG(17, 18))
	const u = 0x1p-24
	for _, c := range []struct {
		rows, v, first int
		sd, shift      float64
	}{{3, 1, 0, 1, 0}, {4, 7, 2, 1, 0}, {5, 256, 1, 3, 0}, {6, 1000, 3, 10, 0}, {3, 5000, 0, 2, 1e4}, {2, 70000, 1, 1, -50}} {
		t.Run(fmt.Sprintf("%dx%d_sd%g_shift%g", c.rows, c.v, c.sd, c.shift), func(t *testing.T) {
			logits := make([]float32, c.rows*c.v)
			for i := range logits {
				logits[i] = float32(c.shift + c.sd*rng.NormFloat64())
			}
			n := c.first + c.rows + 2 // the buffers' rows around the block
			targets := make([]int32, n)
			count := 0
			for i := range targets {
				targets[i] = int32(rng.IntN(c.v))
				if i%3 == 1 {
					targets[i] = -100
				} else if i >= c.first && i < c.first+c.rows {
					count++
				}
			}
			tb := make([]byte, 4*n)
			for i, x := range targets {
				for k := range 4 {
					tb[4*i+k] = byte(uint32(x) >> (8 * k))
				}
			}
			T, err := d.NewBuffer(len(tb))
			must(t, err)
			defer T.Free()
			must(t, T.Write(0, tb))
			const seed = 0.7
			L := floatBuffer(t, d, logits)
			P := floatBuffer(t, d, make([]float32, len(logits)))
			G := floatBuffer(t, d, make([]float32, len(logits)))
			G2 := floatBuffer(t, d, make([]float32, len(logits)))
			loss := make([]float32, n)
			for i := range loss {
				loss[i] = -1
			}
			RL := floatBuffer(t, d, loss)
			RL2 := floatBuffer(t, d, loss)
			S := floatBuffer(t, d, []float32{seed})
			r, err := d.NewRecorder()
			must(t, err)
			defer r.Close()
			a := CrossEntropyArgs{Rows: c.rows, V: c.v, First: c.first, Src: L, Dst: P, Targets: T, RowLoss: RL}
			must(t, ks.CrossEntropyForward(r, a))
			must(t, ks.CrossEntropyBackward(r, CrossEntropyArgs{Rows: c.rows, V: c.v, First: c.first, Src: P, Dst: G,
				Targets: T, Seed: S, Count: count}))
			must(t, ks.Scale(r, L, G2, len(logits), 1, NoRounding)) // the fused head's form: in place
			must(t, ks.CrossEntropyForward(r, CrossEntropyArgs{Rows: c.rows, V: c.v, First: c.first, Src: G2, Dst: G2,
				Targets: T, RowLoss: RL2, Seed: S, Count: count}))
			must(t, r.Submit())
			probs, grad, fused := make([]float32, len(logits)), make([]float32, len(logits)), make([]float32, len(logits))
			gotLoss, gotLoss2 := make([]float32, n), make([]float32, n)
			must(t, P.ReadFloat32(0, probs))
			must(t, G.ReadFloat32(0, grad))
			must(t, G2.ReadFloat32(0, fused))
			must(t, RL.ReadFloat32(0, gotLoss))
			must(t, RL2.ReadFloat32(0, gotLoss2))
			for i := range n {
				if (i < c.first || i >= c.first+c.rows) && (gotLoss[i] != -1 || gotLoss2[i] != -1) {
					t.Fatalf("row loss %d outside the block written: %g, %g", i, gotLoss[i], gotLoss2[i])
				}
			}
			scale := float64(float32(seed)) / float64(count)
			worstP, worstL := 0.0, 0.0
			for r := range c.rows {
				row := logits[r*c.v : (r+1)*c.v]
				tg := targets[c.first+r]
				m, lo := math.Inf(-1), math.Inf(1)
				for _, l := range row {
					m, lo = max(m, float64(l)), min(lo, float64(l))
				}
				var s float64
				for _, l := range row {
					s += math.Exp(float64(l) - m)
				}
				sumErr := gamma((c.v+255)/256 + 8)
				wantLoss := 0.0
				if tg >= 0 {
					wantLoss = m + math.Log(s) - float64(row[tg])
				}
				lossBound := 2*u*wantLoss + 0x1p-21 + 3*u*math.Log(s) + sumErr + (3+2*(m-lo))*u
				for _, got := range []float32{gotLoss[c.first+r], gotLoss2[c.first+r]} {
					if diff := math.Abs(float64(got) - wantLoss); !(diff <= lossBound) {
						t.Fatalf("row %d: loss %g, float64 %g: off by %.3g, bound %.3g", r, got, wantLoss, diff, lossBound)
					}
					worstL = max(worstL, math.Abs(float64(got)-wantLoss)/lossBound)
				}
				for j, l := range row {
					p := math.Exp(float64(l)-m) / s
					eps := (3+2*(m-float64(l)))*u + sumErr + 4*u
					if diff := math.Abs(float64(probs[r*c.v+j]) - p); !(diff <= eps*p) {
						t.Fatalf("row %d: p[%d] = %g, float64 %g: off by %.3g, bound %.3g", r, j, probs[r*c.v+j], p, diff, eps*p)
					}
					worstP = max(worstP, math.Abs(float64(probs[r*c.v+j])-p)/(eps*p))
					want := 0.0
					if tg >= 0 {
						want = scale * p
						if j == int(tg) {
							want -= scale
						}
					}
					gBound := (eps+2*u)*scale*p + 4.5*u*scale // the probabilities' error, then the scale's
					for name, got := range map[string]float32{"gradient": grad[r*c.v+j], "fused gradient": fused[r*c.v+j]} {
						if diff := math.Abs(float64(got) - want); !(diff <= gBound) {
							t.Fatalf("row %d: %s[%d] = %g, float64 %g: off by %.3g, bound %.3g", r, name, j, got, want, diff, gBound)
						}
					}
				}
			}
			t.Logf("worst error / bound: probabilities %.3g, losses %.3g", worstP, worstL)
		})
	}
}
