package peft_test

import (
	"math"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// base64 is the float64 forward of the model with weights w.
func base64(t *testing.T, m *model.Model, w map[string]*model.Tensor) []float64 {
	t.Helper()
	saved := m.Weights
	m.Weights = w
	defer func() { m.Weights = saved }()
	return logits64(t, build(t, m, nil, tensor.Float64))
}

func logits64(t *testing.T, bt built) []float64 {
	t.Helper()
	vm := G.NewTapeMachine(bt.b.G)
	defer vm.Close()
	if err := bt.run(vm); err != nil {
		t.Fatal(err)
	}
	return slices.Clone(bt.g.Logits.Value().Data().([]float64))
}

func maxAbsDiff64(a, b []float64) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

func maxAbs(a []float32) float64 {
	var m float64
	for _, v := range a {
		m = max(m, math.Abs(float64(v)))
	}
	return m
}

// ulp32 is the spacing of float32 values at x.
func ulp32(x float64) float64 {
	return float64(math.Nextafter32(float32(x), float32(math.Inf(1))) - float32(x))
}

func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// cloneWeights copies a model's weights, so a test can compare against
// them after something rewrote the model.
func cloneWeights(m *model.Model) map[string]*model.Tensor {
	out := map[string]*model.Tensor{}
	for n, t := range m.Weights {
		out[n] = &model.Tensor{Shape: t.Shape, Data: slices.Clone(t.Data), Bits: slices.Clone(t.Bits), Format: t.Format}
	}
	return out
}

// Right after initialization every kind of adapter computes the base
// model: B = 0 for LoRA, g = 1 exactly for DoRA, W_res + s·B·A = W up to
// rounding for PiSSA. The base logits come from the untouched model.
func TestInitGivesTheBaseModelOutputs(t *testing.T) {
	for _, c := range []peft.Config{
		{R: 4, Alpha: 8},
		{R: 4, Alpha: 8, Init: peft.InitGaussian},
		{R: 4, Alpha: 8, UseDoRA: true},
		{R: 4, Alpha: 8, UseDoRA: true, Dropout: 0.2},
		{R: 4, Alpha: 8, Init: peft.InitPiSSA},
		{R: 4, Alpha: 8, Init: peft.InitPiSSA, UseDoRA: true, UseRSLoRA: true},
	} {
		c.TargetModules = allModules
		m := tinyModel(t)
		base := logits(t, build(t, m, nil, tensor.Float32))
		orig := cloneWeights(m)
		ts, _ := peft.Targets(linearTargets(m), allModules)
		l, err := peft.New(c, ts, 3, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		bt := build(t, m, l, tensor.Float32)
		bt.pass = nn.Pass{Noise: 99} // training mode: dropout on
		d := maxAbsDiff(base, logits(t, bt))
		if c.Init != peft.InitPiSSA {
			t.Logf("%s: max |logit − base logit| = %.2g", c, d)
			if d != 0 {
				t.Errorf("%s: outputs should equal the base model's exactly, differ by %.2g", c, d)
			}
			continue
		}
		// PiSSA computes W_res·x + s·B·(A·x) where the base computes W·x:
		// the same fp32 values, summed along other paths. A float64 forward
		// of both isolates the split's own error (the residual's rounding
		// to fp32); the fp32 forward adds a few ulps of matmul rounding.
		mb := base64(t, m, orig)
		d64 := maxAbsDiff64(mb, logits64(t, build(t, m, l, tensor.Float64)))
		floor := 0.0 // the base model's own fp32 rounding
		for i := range mb {
			floor = max(floor, math.Abs(float64(base[i])-mb[i]))
		}
		t.Logf("%s: max |logit − base logit| = %.2g in a float64 forward, %.2g in fp32 (max |logit| %.3g; the fp32 base is %.2g from the float64 one)", c, d64, d, maxAbs(base), floor)
		if d64 > 1e-6 || d > 8*ulp32(maxAbs(base)) {
			t.Errorf("%s: outputs move by %.2g (float64 forward), %.2g (fp32) at initialization", c, d64, d)
		}
	}
}

// DoRA on a base kept in bf16 or fp16: the magnitude is the fp32 norm of
// the dequantized weights exactly, and the model runs on the CPU (in fp32
// and under a bf16 policy) computing the base model's outputs.
func TestDoRAInitOn16BitBase(t *testing.T) {
	for _, f := range []amp.Format{amp.BF16, amp.FP16} {
		m := tinyModel(t)
		m.Compact(f, func(string) bool { return true })
		ts, _ := peft.Targets(linearTargets(m), allModules)
		l, err := peft.New(peft.Config{R: 4, Alpha: 8, UseDoRA: true, TargetModules: allModules}, ts, 3, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		for _, mod := range l.Modules {
			w := m.Weights[mod.Path+".weight"]
			if w.Bits == nil {
				t.Fatalf("%s is not 16-bit", mod.Path)
			}
			for o := 0; o < mod.Out; o++ {
				var acc float64
				for _, b := range w.Bits[o*mod.In : (o+1)*mod.In] {
					v := float64(f.FromBits16(b))
					acc += v * v
				}
				if want := float32(math.Sqrt(acc)); mod.M[o] != want {
					t.Fatalf("%v %s: m[%d] = %v, want the norm %v", f, mod.Path, o, mod.M[o], want)
				}
			}
		}
		for _, low := range []amp.Format{amp.FP32, amp.BF16} {
			p := amp.DefaultPolicy(low)
			base := logits(t, buildPolicy(t, m, nil, &p))
			if d := maxAbsDiff(base, logits(t, buildPolicy(t, m, l, &p))); d != 0 {
				t.Errorf("%v base, %v compute: DoRA at init moves the logits by %.2g", f, low, d)
			}
		}
	}
}

// PiSSA's factors are the top singular triplets of W: A·Aᵀ and Bᵀ·B are
// both diag(S_r/s), and W_res + s·B·A gives W back to fp32 rounding. On a
// bf16 base the residual is stored in bf16.
func TestPiSSAFactors(t *testing.T) {
	for _, f := range []amp.Format{amp.FP32, amp.BF16} {
		m := tinyModel(t)
		orig := cloneWeights(m)
		if f != amp.FP32 {
			m.Compact(f, func(string) bool { return true })
		}
		ts, _ := peft.Targets(linearTargets(m), []string{"q_proj", "down_proj"})
		c := peft.Config{R: 3, Alpha: 6, Init: peft.InitPiSSA, TargetModules: []string{"q_proj", "down_proj"}}
		l, err := peft.New(c, ts, 3, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		for _, mod := range l.Modules {
			r, in, out := c.R, mod.In, mod.Out
			for i := 0; i < r; i++ {
				for j := 0; j < r; j++ {
					var aa, bb float64
					for k := 0; k < in; k++ {
						aa += float64(mod.A[i*in+k]) * float64(mod.A[j*in+k])
					}
					for o := 0; o < out; o++ {
						bb += float64(mod.B[o*r+i]) * float64(mod.B[o*r+j])
					}
					if i != j && (math.Abs(aa) > 1e-5 || math.Abs(bb) > 1e-5) {
						t.Fatalf("%s: A rows or B columns %d and %d are not orthogonal: %g, %g", mod.Path, i, j, aa, bb)
					}
					if i == j && math.Abs(aa-bb) > 1e-5*aa {
						t.Fatalf("%s: ‖A_%d‖² = %g but ‖B_%d‖² = %g", mod.Path, i, aa, i, bb)
					}
				}
			}
			d, _ := l.Delta(mod.Path)
			res := m.Weights[mod.Path+".weight"]
			if f != amp.FP32 && res.Bits == nil {
				t.Fatalf("%s: the residual left 16-bit storage", mod.Path)
			}
			// W as PiSSA saw it: the fp32 weight, or its bf16 value
			rv, ov := res.Float32(), orig[mod.Path+".weight"].Data
			for i, v := range ov {
				w := float64(f.Round(v))
				// one rounding of the residual to its format, plus fp32 noise
				tol := math.Abs(float64(rv[i]))*math.Ldexp(1, -24) + 1e-7
				if f != amp.FP32 {
					tol = math.Abs(float64(rv[i]))*math.Ldexp(1, -8) + 1e-7
				}
				if e := math.Abs(float64(rv[i]) + float64(d[i]) - w); e > tol {
					t.Fatalf("%v %s: W_res + s·B·A is %.2g from W at %d, more than %.2g", f, mod.Path, e, i, tol)
				}
			}
		}
	}
}

// Dropout acts on the adapter branch only: with B = 0 it changes nothing,
// with B ≠ 0 it changes the training outputs but not the evaluation ones.
func TestDropoutOnTheAdapterBranchOnly(t *testing.T) {
	m := tinyModel(t)
	base := logits(t, build(t, m, nil, tensor.Float32))
	ts, _ := peft.Targets(linearTargets(m), allModules)
	l, _ := peft.New(peft.Config{R: 4, Alpha: 8, Dropout: 0.5, TargetModules: allModules}, ts, 3, nil)
	bt := build(t, m, l, tensor.Float32)
	bt.pass = nn.Pass{Noise: 7}
	if d := maxAbsDiff(base, logits(t, bt)); d != 0 {
		t.Fatalf("with B = 0 dropout moved the outputs by %g: it reached the base path", d)
	}
	perturb(l)
	train := build(t, m, l, tensor.Float32)
	train.pass = nn.Pass{Noise: 7}
	eval := build(t, m, l, tensor.Float32)
	noDrop, _ := peft.New(peft.Config{R: 4, Alpha: 8, TargetModules: allModules}, ts, 3, nil)
	for i := range noDrop.Modules {
		copy(noDrop.Modules[i].A, l.Modules[i].A)
		copy(noDrop.Modules[i].B, l.Modules[i].B)
	}
	ref := logits(t, build(t, m, noDrop, tensor.Float32))
	if d := maxAbsDiff(ref, logits(t, eval)); d != 0 {
		t.Fatalf("evaluation (noise key 0) differs from the adapter without dropout by %g", d)
	}
	if d := maxAbsDiff(ref, logits(t, train)); d == 0 {
		t.Fatal("training-mode outputs are unaffected by dropout 0.5")
	}
}

// A base weight with rows of zeros (Llama-3.1-8B's o_proj has hundreds;
// PEFT gives NaN on them): DoRA initializes without error, the model's
// outputs at initialization are the base model's exactly in every
// precision, zero rows output zero, and training keeps everything finite
// and moves the rows away from zero.
func TestDoRAZeroNormRows(t *testing.T) {
	for _, base := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
		for _, low := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
			m := tinyModel(t)
			for _, name := range []string{"model.layers.1.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"} {
				w := m.Weights[name].Data
				clear(w[2*8 : 3*8]) // rows 2 and 5 of [8, 8]
				clear(w[5*8 : 6*8])
			}
			if base != amp.FP32 {
				m.Compact(base, func(string) bool { return true })
			}
			ts, _ := peft.Targets(linearTargets(m), []string{"q_proj", "o_proj"})
			l, err := peft.New(peft.Config{R: 2, Alpha: 2, UseDoRA: true, TargetModules: []string{"q_proj", "o_proj"}}, ts, 1, m.Weights)
			if err != nil {
				t.Fatalf("%v base: %v", base, err)
			}
			q := l.Module("model.layers.1.self_attn.q_proj")
			if q.M[2] != nn.DoRANormFloor || q.M[5] != nn.DoRANormFloor || q.M[0] <= nn.DoRANormFloor {
				t.Fatalf("%v base: magnitudes %v", base, q.M)
			}
			p := amp.DefaultPolicy(low)
			ref := logits(t, buildPolicy(t, m, nil, &p))
			bt := buildPolicy(t, m, l, &p)
			if d := maxAbsDiff(ref, logits(t, bt)); d != 0 {
				t.Errorf("%v base, %v compute: DoRA with zero rows moves the logits at init by %.2g", base, low, d)
			}
			merged, err := l.Merged(q.Path, m.Weights[q.Path+".weight"].Float32())
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range append(merged[2*8:3*8], merged[5*8:6*8]...) {
				if v != 0 {
					t.Fatalf("%v base: a zero row merges to %v", base, merged[2*8:3*8])
				}
			}
		}
	}
}

func TestDoRAWithoutBaseWeights(t *testing.T) {
	m := tinyModel(t)
	ts, _ := peft.Targets(linearTargets(m), []string{"q_proj"})
	if _, err := peft.New(peft.Config{R: 2, Alpha: 2, UseDoRA: true, TargetModules: []string{"q_proj"}}, ts, 1, nil); err == nil ||
		err.Error() != "model.layers.0.self_attn.q_proj: no base weight model.layers.0.self_attn.q_proj.weight to initialize dora from" {
		t.Fatalf("DoRA without base weights: %v", err)
	}
}

// gaussian draws A from N(0, (1/r)²), PEFT's std=1/r, with B = 0.
func TestGaussianInit(t *testing.T) {
	tg := peft.Target{Path: "p", Out: 8, In: 2000}
	l, err := peft.New(peft.Config{R: 4, Alpha: 4, Init: peft.InitGaussian, TargetModules: []string{"p"}}, []peft.Target{tg}, 7, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := l.Modules[0].A
	var sum, sq float64
	for _, v := range a {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	n := float64(len(a))
	mean, sd := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	// 8000 draws: the mean's sd is 0.0028, the sd's relative sd 0.8%
	if math.Abs(mean) > 0.015 || math.Abs(sd-0.25) > 0.0125 {
		t.Errorf("A: mean %.4f, sd %.4f; want 0 and 1/r = 0.25", mean, sd)
	}
	if slices.ContainsFunc(l.Modules[0].B, func(v float32) bool { return v != 0 }) {
		t.Error("B is not zero")
	}
}
