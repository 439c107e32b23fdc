package train

import (
	"math"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

// A packed row computes what its documents compute in rows of their own:
// the same loss and the same gradients, to fp32 rounding, because each
// document attends only to itself and its positions restart at 0. The
// control, packing without those two, differs.
func TestPackedEqualsUnpacked(t *testing.T) {
	m, err := model.New(model.Config{VocabSize: 259, HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		InitializerRange: 0.2, BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}, 3)
	if err != nil {
		t.Fatal(err)
	}
	c := peft.Config{R: 4, Alpha: 8, TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj", "up_proj"}}
	ts, _ := peft.Select(peft.ModelTargets(m), c)
	l, err := peft.New(c, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range l.Modules { // B = 0 would hide the adapter's gradients' dependence on A
		for i := range mod.B {
			mod.B[i] = float32(i%7-3) * 0.01
		}
	}
	tok := data.NewByteTokenizer()
	var docs []data.Example
	for _, s := range []string{"the cat sat", "on a mat, twice", "ok"} {
		body, _, _ := tok.Encode(s)
		ids := append(append([]int{tok.BOS()}, body...), tok.EOS())
		target := make([]bool, len(ids))
		for i := 1; i < len(target); i++ {
			target[i] = true
		}
		docs = append(docs, data.Example{IDs: ids, Target: target})
	}
	const seqLen = 36 // the three documents fill 10+15+2 of its slots
	eng := &nn.Engine{BLAS: blas.Gonum{}, Workers: 2}
	params := trainables(m, l)
	run := func(mode data.Mode, batch int, mangle func(*data.Batch)) (float64, [][]float32) {
		ld, err := data.NewLoader(docs, data.LoaderConfig{SeqLen: seqLen, BatchSize: batch, Mode: mode, PadID: tok.PAD()})
		if err != nil {
			t.Fatal(err)
		}
		bs := ld.Batches()
		if len(bs) != 1 {
			t.Fatalf("%v: %d batches", mode, len(bs))
		}
		if mangle != nil {
			mangle(&bs[0])
		}
		policy := amp.DefaultPolicy(amp.FP32)
		ru, err := newRunner(eng, m, l, batch, seqLen, params, &policy)
		if err != nil {
			t.Fatal(err)
		}
		defer ru.close()
		loss, err := ru.run(bs[0], 1, true, 0)
		if err != nil {
			t.Fatal(err)
		}
		var grads [][]float32
		for _, p := range params {
			grads = append(grads, append([]float32(nil), p.Grad...))
		}
		return loss, grads
	}
	lossPad, gradPad := run(data.Pad, 3, nil)
	lossPack, gradPack := run(data.Pack, 1, nil)
	worst := func(a, b [][]float32) float64 {
		var w float64
		for i := range a {
			var scale float64
			for _, v := range a[i] {
				scale = max(scale, math.Abs(float64(v)))
			}
			for j := range a[i] {
				w = max(w, math.Abs(float64(a[i][j]-b[i][j]))/scale)
			}
		}
		return w
	}
	dl := math.Abs(lossPack-lossPad) / lossPad
	dg := worst(gradPad, gradPack)
	t.Logf("packed vs unpacked: loss %.9g vs %.9g (rel %.2g), worst gradient rel %.2g", lossPack, lossPad, dl, dg)
	if dl > 1e-6 || dg > 1e-5 {
		t.Fatalf("packed differs from unpacked: loss rel %g, gradient rel %g", dl, dg)
	}
	// control: the same packed row as one document (plain causal attention
	// and positions 0..T-1) leaks across documents and changes the result
	lossLeak, gradLeak := run(data.Pack, 1, func(b *data.Batch) { b.Positions = nil })
	if math.Abs(lossLeak-lossPad)/lossPad < 1e-4 || worst(gradPad, gradLeak) < 1e-3 {
		t.Fatalf("cross-document attention changed nothing: loss %g vs %g", lossLeak, lossPad)
	}
}
