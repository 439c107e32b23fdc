package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/quant"
)

// merge --base-quantize nf4 merges into the base a QLoRA run trained on:
// the checkpoint quantized as the run did and dequantized in fp32. An
// unadapted projection comes out as its NF4 round trip, an adapted one as
// that plus the adapter's delta.
func TestMergeIntoQuantizedBase(t *testing.T) {
	dir := t.TempDir()
	baseDir, m := tinyBase(t, dir)
	ts, _ := peft.Targets(peft.ModelTargets(m), []string{"q_proj"})
	l, err := peft.New(peft.Config{R: 2, Alpha: 4, TargetModules: []string{"q_proj"}}, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range l.Modules {
		for j := range mod.B {
			mod.B[j] = 0.01 * float32(j%7-3)
		}
	}
	adapterDir := filepath.Join(dir, "adapter")
	if err := l.Save(adapterDir, baseDir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "merged")
	if code, _, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir, "--out", out, "--dtype", "fp32", "--base-quantize", "nf4"); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	merged, err := model.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(name string) []float32 {
		w := m.Weights[name]
		q, err := quant.Quantize(quant.NF4, w.Float32(), w.Shape, quant.Options{Double: true})
		if err != nil {
			t.Fatal(err)
		}
		return q.Dequantize()
	}
	up := "model.layers.1.mlp.up_proj.weight"
	for i, v := range roundTrip(up) {
		if merged.Weights[up].Data[i] != v {
			t.Fatalf("%s[%d] = %v, its NF4 round trip %v", up, i, merged.Weights[up].Data[i], v)
		}
	}
	qp := "model.layers.0.self_attn.q_proj"
	want, err := l.Merged(qp, roundTrip(qp+".weight"))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range want {
		if merged.Weights[qp+".weight"].Data[i] != v {
			t.Fatalf("%s[%d] = %v, the NF4 base merged %v", qp, i, merged.Weights[qp+".weight"].Data[i], v)
		}
	}
	code, _, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir, "--out", filepath.Join(dir, "m2"), "--base-quantize", "int4")
	if code != 2 || !strings.Contains(stderr, "--base-quantize") {
		t.Errorf("--base-quantize int4: exit %d, %s", code, stderr)
	}
}

// merge --requantize nf4 writes the merged model with its projections in
// bitsandbytes' 4-bit layout. The output loads back in mixtune as a
// bitsandbytes checkpoint; the projections no adapter touched keep the
// base's NF4 codes bit for bit; each merged one dequantizes to within the
// NF4 bound of its fp32 merged values (half the table gap around the
// value times the block's absmax, plus the double-quantized absmax's
// error) and the error statistics match what merge printed and the figures
// its help states; eval of the 4-bit model equals eval of an fp32 model
// holding its dequantized weights (to 1e-6) and stays near the fp32
// merged model's loss.
func TestMergeRequantize(t *testing.T) {
	dir := t.TempDir()
	base, err := model.New(wideConfig(), 5)
	if err != nil {
		t.Fatal(err)
	}
	baseDir := filepath.Join(dir, "base")
	if err := base.Save(baseDir, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(baseDir)
	if err != nil {
		t.Fatal(err)
	}
	targets := []string{"q_proj", "down_proj"}
	ts, _ := peft.Targets(peft.ModelTargets(m), targets)
	l, err := peft.New(peft.Config{R: 4, Alpha: 8, TargetModules: targets}, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(8, 8))
	for _, mod := range l.Modules {
		for j := range mod.B {
			mod.B[j] = float32(rng.NormFloat64() * 0.01)
		}
	}
	adapterDir := filepath.Join(dir, "adapter")
	if err := l.Save(adapterDir, baseDir); err != nil {
		t.Fatal(err)
	}
	ref, out := filepath.Join(dir, "merged-fp32"), filepath.Join(dir, "merged-nf4")
	if code, _, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir, "--out", ref, "--dtype", "fp32", "--base-quantize", "nf4"); code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir, "--out", out, "--dtype", "bf16", "--base-quantize", "nf4", "--requantize", "nf4")
	if code != 0 {
		t.Fatalf("merge --requantize nf4: exit %d: %s", code, stderr)
	}
	t.Logf("merge said: %s", stdout)
	var nReq, nKept int
	var values int64
	var rmse, relPct, maxErr, maxOfAbsmax float64
	line := stdout[strings.Index(stdout, "requantized"):]
	if _, err := fmt.Sscanf(line, "requantized %d projections to nf4 with double quantization (bitsandbytes layout); %d kept their nf4 codes (no adapter: no added error); added error over %d values: RMSE %g (%g%% of the weights' RMS), max %g (%g of its block's absmax)",
		&nReq, &nKept, &values, &rmse, &relPct, &maxErr, &maxOfAbsmax); err != nil {
		t.Fatalf("merge's summary %q: %v", line, err)
	}
	if nReq != 4 || nKept != 10 {
		t.Errorf("%d projections requantized and %d kept; want 4 (q_proj, down_proj × 2 layers) and 10", nReq, nKept)
	}

	want, err := model.Load(ref)
	if err != nil {
		t.Fatal(err)
	}
	got, err := model.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Config.BnB4; c == nil || c.QuantType != "nf4" || !c.DoubleQuant || c.ComputeDtype != "bfloat16" {
		t.Fatalf("quantization_config read back as %+v", c)
	}
	if s := got.StoredDtypes(); s != "BF16×7, NF4×14" {
		t.Errorf("stored as %s", s)
	}
	code4 := quant.NF4.Code()
	sorted := append([]float32(nil), code4[:]...)
	slices.Sort(sorted)
	halfGap := func(x float64) float64 { // half the table gap around x (in [-1, 1])
		for i := 1; i < len(sorted); i++ {
			if x <= float64(sorted[i]) {
				return (float64(sorted[i]) - float64(sorted[i-1])) / 2
			}
		}
		return 0
	}
	var n int64
	var se, ss, worst, worstRel float64
	for name, w := range got.Weights {
		if !model.Quantizable(name) {
			continue
		}
		q, err := quant.Decode(w.Q4)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		back, fp := q.Dequantize(), want.Weights[name].Data
		merged := strings.Contains(name, "q_proj") || strings.Contains(name, "down_proj")
		for b := 0; b < q.Blocks(); b++ {
			lo, hi := b*q.BlockSize, min((b+1)*q.BlockSize, len(fp))
			var a, blockErr float64
			for _, v := range fp[lo:hi] {
				a = max(a, math.Abs(float64(v)))
			}
			for i := lo; i < hi; i++ {
				d := math.Abs(float64(back[i]) - float64(fp[i]))
				if !merged {
					if d != 0 {
						t.Fatalf("%s[%d] = %v, the base's NF4 value %v: an unmerged projection's codes changed", name, i, back[i], fp[i])
					}
					continue
				}
				if bound := a*halfGap(float64(fp[i])/a)*(1+1e-6) + math.Abs(float64(q.BlockAbsmax(b))-a); d > bound {
					t.Fatalf("%s[%d]: merged %v requantized to %v: error %.3g over the NF4 bound %.3g", name, i, fp[i], back[i], d, bound)
				}
				se, ss = se+d*d, ss+float64(fp[i])*float64(fp[i])
				blockErr = max(blockErr, d)
			}
			if merged {
				worst, worstRel = max(worst, blockErr), max(worstRel, blockErr/a)
			}
		}
		if merged {
			n += int64(len(fp))
		}
	}
	gotRMSE, gotRel := math.Sqrt(se/float64(n)), math.Sqrt(se/ss)
	t.Logf("requantized projections: RMSE %.4g (%.2f%% of the weights' RMS), max %.4g (%.3f of its block's absmax)", gotRMSE, 100*gotRel, worst, worstRel)
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-3*math.Abs(b) }
	if n != values || !close(rmse, gotRMSE) || !close(relPct, 100*gotRel) || !close(maxErr, worst) || !close(maxOfAbsmax, worstRel) {
		t.Errorf("merge printed %d values, RMSE %g (%g%%), max %g (%g of absmax); measured %d, %g (%g%%), %g (%g)",
			values, rmse, relPct, maxErr, maxOfAbsmax, n, gotRMSE, 100*gotRel, worst, worstRel)
	}
	// --requantize's help: about 9.2% of the weights' RMS, at most 0.152 of
	// a block's absmax plus the double-quantized absmax's error (0.159 on
	// normal weights)
	if gotRel > 0.105 || worstRel > 0.165 {
		t.Errorf("requantization error %.2f%% of the RMS, %.3f of the absmax: over what --requantize's help states", 100*gotRel, worstRel)
	}

	// an fp32 model holding the 4-bit model's dequantized weights
	deq := &model.Model{Config: want.Config, Weights: map[string]*model.Tensor{}}
	for name, w := range got.Weights {
		deq.Weights[name] = &model.Tensor{Shape: w.Shape, Data: w.Float32()}
	}
	deqDir := filepath.Join(dir, "dequantized")
	if err := deq.Save(deqDir, amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "val.jsonl")
	os.WriteFile(data, []byte(`{"text": "Hello world, hello dates."}`+"\n"+`{"prompt": "1987-11-04 =", "completion": " November 4, 1987"}`+"\n"), 0o644)
	loss := func(modelDir string) float64 {
		code, stdout, stderr := runIn(t, "eval", "--model", modelDir, "--data", data, "--seq-len", "32", "--blas", "native", "--json")
		if code != 0 {
			t.Fatalf("eval %s: exit %d: %s", modelDir, code, stderr)
		}
		var rep struct{ Loss float64 }
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Loss
	}
	l4, ld, lf := loss(out), loss(deqDir), loss(ref)
	t.Logf("eval loss: requantized NF4 %.7f, its dequantized weights in fp32 %.7f, the fp32 merge %.7f", l4, ld, lf)
	if math.Abs(l4-ld) > 1e-6*ld {
		t.Errorf("the NF4 model's loss %.9f, its dequantized weights' %.9f", l4, ld)
	}
	if math.Abs(l4-lf) > 1e-2*lf {
		t.Errorf("the NF4 model's loss %.7f, the fp32 merge's %.7f", l4, lf)
	}
}
