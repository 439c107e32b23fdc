package main

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
)

var allModules = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// tinyBase writes a small byte-vocabulary model in bf16 and returns its
// directory and the loaded model.
func tinyBase(t *testing.T, dir string) (string, *model.Model) {
	t.Helper()
	m, err := model.New(model.Config{VocabSize: 259, HiddenSize: 16, IntermediateSize: 24, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 32, RMSNormEps: 1e-5, RopeTheta: 10000,
		InitializerRange: 0.1, BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}, 4)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "base")
	if err := m.Save(p, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	m, err = model.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, m
}

func runIn(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := app{}.run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// forward returns the logits of m (with adapter l, if any) on fixed tokens.
func forward(t *testing.T, m *model.Model, l *peft.Adapter) []float32 {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float32)
	gc := model.GraphConfig{Batch: 2, SeqLen: 6}
	if l != nil {
		gc.Linear = l.Linear(map[string]*G.Node{})
	}
	g, err := m.Build(b, gc)
	if err != nil {
		t.Fatal(err)
	}
	ids := []int{256, 72, 101, 108, 108, 111, 256, 87, 111, 114, 108, 100}
	G.Let(g.IDs, tensor.New(tensor.WithShape(12), tensor.WithBacking(ids)))
	G.Let(g.Targets, tensor.New(tensor.WithShape(12), tensor.WithBacking(make([]int, 12))))
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), g.Logits.Value().Data().([]float32)...)
}

func relDiff(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
		n = math.Max(n, math.Abs(float64(b[i])))
	}
	return d / n
}

// A trained DoRA adapter merged and exported in bf16: the export reloads,
// computes what the adapter computes to bf16 precision, and evaluates with
// `mixtune eval` to the adapter's loss.
func TestMergeCommandBF16ExportReloadsAndEvaluates(t *testing.T) {
	dir := t.TempDir()
	baseDir, m := tinyBase(t, dir)
	ts, _ := peft.Targets(peft.ModelTargets(m), allModules)
	l, err := peft.New(peft.Config{R: 4, Alpha: 8, UseDoRA: true, TargetModules: allModules}, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	for _, mod := range l.Modules { // as if trained
		for j := range mod.B {
			mod.B[j] = float32(rng.NormFloat64() * 0.05)
		}
		for j := range mod.M {
			mod.M[j] *= float32(1 + 0.1*rng.NormFloat64())
		}
	}
	adapterDir := filepath.Join(dir, "adapter")
	if err := l.Save(adapterDir, baseDir); err != nil {
		t.Fatal(err)
	}
	want := forward(t, m, l)

	out := filepath.Join(dir, "merged")
	code, stdout, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir, "--out", out, "--dtype", "bf16")
	if code != 0 {
		t.Fatalf("merge: exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "merged dora r=4 alpha=8") || !strings.Contains(stdout, "(bf16)") {
		t.Errorf("merge said %q", stdout)
	}
	merged, err := model.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if merged.StoredDtypes() != "BF16×21" {
		t.Errorf("merged model stored as %s", merged.StoredDtypes())
	}
	rel := relDiff(forward(t, merged, nil), want)
	t.Logf("bf16 merged export vs fp32 adapter forward: %.2g relative", rel)
	if rel > 2e-2 {
		t.Errorf("the bf16 merged model's logits are %.2g from the adapter's", rel)
	}

	data := filepath.Join(dir, "val.jsonl")
	os.WriteFile(data, []byte(`{"text": "Hello world, hello dates."}`+"\n"+`{"prompt": "1987-11-04 =", "completion": " November 4, 1987"}`+"\n"), 0o644)
	loss := func(args ...string) float64 {
		code, stdout, stderr := runIn(t, append([]string{"eval", "--data", data, "--seq-len", "32", "--blas", "gonum", "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("eval %v: exit %d: %s", args, code, stderr)
		}
		var rep struct{ Loss float64 }
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Loss
	}
	la, lm := loss("--model", baseDir, "--adapter", adapterDir), loss("--model", out)
	t.Logf("eval loss: base + adapter %.6f, bf16 merged model %.6f", la, lm)
	if math.Abs(la-lm) > 1e-2*la {
		t.Errorf("merged loss %.6f, adapter loss %.6f", lm, la)
	}

	code, _, stderr = runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir, "--out", out)
	if code != 2 || !strings.Contains(stderr, "--out "+out+" already exists and is not empty; choose a new directory") {
		t.Errorf("merge over an existing model: exit %d: %s", code, stderr)
	}
	code, _, stderr = runIn(t, "merge", "--model", baseDir, "--out", filepath.Join(dir, "x"))
	if code != 2 || !strings.Contains(stderr, "--model, --adapter and --out are required") {
		t.Errorf("missing --adapter: exit %d: %s", code, stderr)
	}
}

// extract-lora on a model tuned by a known rank-2 change: the error table,
// and an adapter that loads and evaluates.
func TestExtractLoRACommand(t *testing.T) {
	dir := t.TempDir()
	baseDir, m := tinyBase(t, dir)
	tuned := &model.Model{Config: m.Config, Weights: map[string]*model.Tensor{}}
	rng := rand.New(rand.NewPCG(3, 3))
	for name, w := range m.Weights {
		d := append([]float32(nil), w.Data...)
		if len(w.Shape) == 2 && !strings.Contains(name, "embed") && !strings.Contains(name, "lm_head") {
			out, in := w.Shape[0], w.Shape[1]
			u, v := make([]float64, out*2), make([]float64, 2*in)
			for i := range u {
				u[i] = rng.NormFloat64() * 0.1
			}
			for i := range v {
				v[i] = rng.NormFloat64() * 0.1
			}
			for o := 0; o < out; o++ {
				for j := 0; j < in; j++ {
					d[o*in+j] += float32(u[o*2]*v[j] + u[o*2+1]*v[in+j])
				}
			}
		}
		tuned.Weights[name] = &model.Tensor{Shape: w.Shape, Data: d}
	}
	tuned.Weights["model.norm.weight"].Data[0] += 0.5 // a change no adapter carries
	tunedDir := filepath.Join(dir, "tuned")
	if err := tuned.Save(tunedDir, amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "extracted")
	code, stdout, stderr := runIn(t, "extract-lora", "--base", baseDir, "--tuned", tunedDir, "--rank", "2", "--out", out, "--json")
	if code != 0 {
		t.Fatalf("extract-lora: exit %d: %s", code, stderr)
	}
	var rows []extractRow
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 14 {
		t.Fatalf("%d modules reported, want 14", len(rows))
	}
	for _, r := range rows {
		if r.RelError > 1e-5 || r.DeltaNorm == 0 {
			t.Errorf("%s: ‖ΔW‖ %.3g, relative error %.2g", r.Module, r.DeltaNorm, r.RelError)
		}
	}
	if !strings.Contains(stderr, "note: model.norm.weight changed") {
		t.Errorf("no note about the changed norm: %q", stderr)
	}
	l, err := peft.Load(out, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if rel := relDiff(forward(t, m, l), forward(t, &model.Model{Config: m.Config, Weights: withNorm(tuned, m)}, nil)); rel > 1e-5 {
		t.Errorf("base + extracted adapter is %.2g from the tuned model", rel)
	}
	code, _, stderr = runIn(t, "extract-lora", "--base", baseDir, "--tuned", tunedDir, "--rank", "0", "--out", filepath.Join(dir, "y"))
	if code != 2 || !strings.Contains(stderr, "--rank must be positive, got 0") {
		t.Errorf("rank 0: exit %d: %s", code, stderr)
	}
}

// withNorm is tuned's weights with base's final norm: what base + adapter
// can reach.
func withNorm(tuned, base *model.Model) map[string]*model.Tensor {
	w := map[string]*model.Tensor{}
	for k, v := range tuned.Weights {
		w[k] = v
	}
	w["model.norm.weight"] = base.Weights["model.norm.weight"]
	return w
}

// `mixtune merge` on every family: the merged directory keeps the family's
// config.json (every field, torch_dtype updated), gets the tokenizer files,
// is sharded with an index above --max-shard-size, and loads back to the
// adapter's logits.
func TestMergeEveryFamily(t *testing.T) {
	fams, err := filepath.Glob("../../model/testdata/families/*")
	if err != nil || len(fams) == 0 {
		t.Fatal("no family fixtures", err)
	}
	for i, src := range fams {
		if strings.HasSuffix(src, "-bf16") {
			continue
		}
		name := filepath.Base(src)
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "base")
			os.MkdirAll(base, 0o755)
			for _, f := range []string{"config.json", "model.safetensors"} {
				b, _ := os.ReadFile(filepath.Join(src, f))
				os.WriteFile(filepath.Join(base, f), b, 0o644)
			}
			os.WriteFile(filepath.Join(base, "tokenizer_config.json"), []byte(`{"chat_template": "x"}`), 0o644)
			os.WriteFile(filepath.Join(base, "generation_config.json"), []byte(`{"eos_token_id": [2, 3]}`), 0o644)
			m, err := model.Load(base)
			if err != nil {
				t.Fatal(err)
			}
			c := peft.Config{R: 2, Alpha: 4, UseDoRA: i%2 == 1, TargetModules: allModules}
			ts, _ := peft.Select(peft.ModelTargets(m), c)
			l, err := peft.New(c, ts, 1, m.Weights)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(3, uint64(i)))
			for _, mod := range l.Modules {
				for j := range mod.B {
					mod.B[j] = float32(rng.NormFloat64() * 0.1)
				}
			}
			if err := l.Save(filepath.Join(dir, "adapter"), base); err != nil {
				t.Fatal(err)
			}
			want := smallForward(t, m, l)
			out := filepath.Join(dir, "merged")
			code, _, stderr := runIn(t, "merge", "--model", base, "--adapter", filepath.Join(dir, "adapter"), "--out", out, "--dtype", "fp32", "--max-shard-size", "40000")
			if code != 0 {
				t.Fatalf("merge: exit %d: %s", code, stderr)
			}
			merged, err := model.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			if d := relDiff(smallForward(t, merged, nil), want); d > 2e-6 {
				t.Errorf("merged model's logits are %.2g from the adapter's", d)
			}
			var orig, back map[string]any
			b1, _ := os.ReadFile(filepath.Join(base, "config.json"))
			b2, _ := os.ReadFile(filepath.Join(out, "config.json"))
			json.Unmarshal(b1, &orig)
			json.Unmarshal(b2, &back)
			orig["torch_dtype"] = "float32"
			if !reflect.DeepEqual(orig, back) {
				t.Errorf("config.json changed:\n%v\n%v", orig, back)
			}
			for _, f := range []string{"tokenizer_config.json", "generation_config.json", "model.safetensors.index.json"} {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Errorf("merged directory lacks %s", f)
				}
			}
			// and extract-lora takes the rank-2 LoRA back out of the merged model
			code, stdout, stderr := runIn(t, "extract-lora", "--base", base, "--tuned", out, "--rank", "2", "--out", filepath.Join(dir, "extracted"), "--json")
			if code != 0 {
				t.Fatalf("extract-lora: exit %d: %s", code, stderr)
			}
			var rows []extractRow
			json.Unmarshal([]byte(stdout), &rows)
			for _, r := range rows {
				if !c.UseDoRA && r.RelError > 1e-5 {
					t.Errorf("extracting a rank-2 LoRA: %s rel error %.2g", r.Module, r.RelError)
				}
			}
			if len(rows) != 7*m.Config.NumHiddenLayers {
				t.Errorf("extracted %d modules", len(rows))
			}
		})
	}
}

// smallForward is forward for the family fixtures' 40-id vocabulary.
func smallForward(t *testing.T, m *model.Model, l *peft.Adapter) []float32 {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Gonum{}, Workers: 2}, tensor.Float32)
	gc := model.GraphConfig{Batch: 1, SeqLen: 7}
	if l != nil {
		gc.Linear = l.Linear(map[string]*G.Node{})
	}
	g, err := m.Build(b, gc)
	if err != nil {
		t.Fatal(err)
	}
	G.Let(g.IDs, tensor.New(tensor.WithShape(7), tensor.WithBacking([]int{1, 5, 9, 31, 4, 4, 17})))
	G.Let(g.Targets, tensor.New(tensor.WithShape(7), tensor.WithBacking(make([]int, 7))))
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	return append([]float32(nil), g.Logits.Value().Data().([]float32)...)
}
