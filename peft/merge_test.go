package peft_test

import (
	"math"
	"slices"
	"testing"

	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

// maxRelDiff is max |a − b| relative to the largest |b|.
func maxRelDiff(a, b []float32) float64 { return maxAbsDiff(a, b) / maxAbs(b) }

// A merged model computes what the adapter computes (PEFT's test: logits
// within 1e-4), and unmerging gives the base weights back to within 1e-6.
func TestMergeThenForwardEqualsAdapterForward(t *testing.T) {
	for _, c := range []peft.Config{
		{R: 4, Alpha: 8},
		{R: 4, Alpha: 8, UseDoRA: true},
		{R: 4, Alpha: 8, UseDoRA: true, UseRSLoRA: true, Dropout: 0.1},
	} {
		c.TargetModules = allModules
		m := tinyModel(t)
		ts, _ := peft.Targets(linearTargets(m), allModules)
		l, err := peft.New(c, ts, 1, m.Weights)
		if err != nil {
			t.Fatal(err)
		}
		perturb(l) // as if trained: B ≠ 0, m ≠ ‖W‖
		adapter := logits(t, build(t, m, l, tensor.Float32))
		orig := cloneWeights(m)
		var stateless [][]float32
		for _, mod := range l.Modules {
			w := m.Weights[mod.Path+".weight"].Data
			sl, err := l.Merged(mod.Path, w)
			if err != nil {
				t.Fatal(err)
			}
			stateless = append(stateless, sl)
			if err := l.Merge(mod.Path, w); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(sl, w) {
				t.Fatalf("%s: Merged and Merge disagree", mod.Path)
			}
		}
		// merged modules compute plainly: the graph is the base model's
		merged := logits(t, build(t, m, l, tensor.Float32))
		rel := maxRelDiff(merged, adapter)
		var worst float64
		for _, mod := range l.Modules {
			w := m.Weights[mod.Path+".weight"].Data
			if err := l.Unmerge(mod.Path, w); err != nil {
				t.Fatal(err)
			}
			worst = max(worst, maxAbsDiff(w, orig[mod.Path+".weight"].Data))
		}
		t.Logf("%s: merged vs adapter logits %.2g relative; unmerge restores W to %.2g", c, rel, worst)
		if rel > 1e-4 {
			t.Errorf("%s: merged logits differ from the adapter's by %.2g relative", c, rel)
		}
		if worst > 1e-6 {
			t.Errorf("%s: unmerge leaves W %.2g away", c, worst)
		}
		if d := maxRelDiff(logits(t, build(t, m, l, tensor.Float32)), adapter); d > 1e-5 {
			t.Errorf("%s: the unmerged adapter computes %.2g (relative) away from before", c, d)
		}
	}
}

// DoRA's merge in closed form for one row: m/‖W + ΔW‖ · (W + ΔW).
func TestDoRAMergeClosedForm(t *testing.T) {
	tg := peft.Target{Path: "p", Out: 2, In: 3}
	w := []float32{3, 0, 4, 1, 1, 1}
	l, err := peft.New(peft.Config{R: 1, Alpha: 1, UseDoRA: true, TargetModules: []string{"p"}}, []peft.Target{tg},
		1, map[string]*model.Tensor{"p.weight": {Shape: []int{2, 3}, Data: w}})
	if err != nil {
		t.Fatal(err)
	}
	mod := l.Modules[0]
	if mod.M[0] != 5 || mod.M[1] != float32(math.Sqrt(3)) {
		t.Fatalf("magnitude %v, want [5 √3]", mod.M)
	}
	copy(mod.A, []float32{1, 0, 0})
	copy(mod.B, []float32{1, 0})
	mod.M[0] = 10
	got, err := l.Merged("p", w)
	if err != nil {
		t.Fatal(err)
	}
	// row 0: W + ΔW = (4, 0, 4), norm 4√2, scaled to norm 10
	f := 10 / (4 * math.Sqrt2)
	want := []float32{float32(4 * f), 0, float32(4 * f), 1, 1, 1}
	if !slices.Equal(got, want) {
		t.Fatalf("merged %v, want %v", got, want)
	}
}

func TestMergeErrors(t *testing.T) {
	tg := peft.Target{Path: "model.layers.0.mlp.up_proj", Out: 2, In: 2}
	l, _ := peft.New(peft.Config{R: 1, Alpha: 1, TargetModules: []string{"up_proj"}}, []peft.Target{tg}, 1, nil)
	w := []float32{1, 2, 3, 4}
	if err := l.Unmerge(tg.Path, w); err == nil || err.Error() != "model.layers.0.mlp.up_proj: the adapter is not merged" {
		t.Errorf("unmerge before merge: %v", err)
	}
	if err := l.Merge(tg.Path, w); err != nil {
		t.Fatal(err)
	}
	if err := l.Merge(tg.Path, w); err == nil || err.Error() != "model.layers.0.mlp.up_proj: the adapter is already merged" {
		t.Errorf("second merge: %v", err)
	}
	if err := l.Merge("lm_head", w); err == nil || err.Error() != "lm_head is not adapted" {
		t.Errorf("unadapted module: %v", err)
	}
	l.Unmerge(tg.Path, w)
	// a merged weight beyond float32's range
	mod := l.Modules[0]
	copy(mod.A, []float32{3e38, 0})
	copy(mod.B, []float32{3e38, 0})
	want := "model.layers.0.mlp.up_proj: merged weight [0, 0] is +Inf in fp32 (+Inf before the cast): the merge is not finite"
	if err := l.Merge(tg.Path, w); err == nil || err.Error() != want {
		t.Errorf("overflow: %v, want %q", err, want)
	}
	if !slices.Equal(w, []float32{1, 2, 3, 4}) {
		t.Errorf("a failed merge changed the weight: %v", w)
	}
	// fine in fp32, not in fp16
	want = "model.layers.0.mlp.up_proj: merged weight [1, 0] is +Inf in fp16 (70000 before the cast): the merge is not finite"
	if err := peft.CheckFinite(tg.Path, []float32{1, 2, 70000, 4}, 2, amp.FP16); err == nil || err.Error() != want {
		t.Errorf("fp16 overflow: %v, want %q", err, want)
	}
	if err := peft.CheckFinite(tg.Path, []float32{1, 2, 70000, 4}, 2, amp.BF16); err != nil {
		t.Errorf("bf16 holds 70000: %v", err)
	}
}
