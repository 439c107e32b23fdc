package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/safetensors"
)

// The goldens under testdata/interop/golden come from
// scripts/interop_check.py, which scripts/gpu_check.sh runs on a host with
// transformers and PEFT (and no Go): PEFT's logits for mixtune's adapters
// (gguf/testdata/quickstart_adapter, a LoRA, and testdata/interop/
// mixtune_dora, a DoRA, both trained by mixtune), transformers' logits of
// what `mixtune merge --dtype fp32` wrote for each, two adapters PEFT saved
// (peft_lora, peft_dora) with PEFT's logits, and the base model's logits,
// all on models/tiny-byte and the token ids of its manifest.
//
// MIXTUNE_INTEROP_GOLDEN points the tests at another directory: goldens
// the script wrote with --standin (a hand-written float64 reference), to
// test these tests where transformers and PEFT are missing. Goldens in the
// repository must be transformers' and PEFT's.

const interopGoldenDir = "testdata/interop/golden"

const interopBase = "../../models/tiny-byte"

// fp32Unit is fp32's unit roundoff.
const fp32Unit = 0x1p-24

type interopGolden struct {
	dir        string
	Reference  string            `json:"reference"`
	Versions   map[string]string `json:"versions"`
	InputIDs   [][]int           `json:"input_ids"`
	Adapters   map[string]string `json:"mixtune_adapters"`
	MergedSHA  map[string]string `json:"merged_sha256"`
	Failed     []string          `json:"failed"`
	logits     map[string][]float64
	rows, seq  int
	vocab      int
	config     model.Config
	largest    map[string]float64 // max |logit| of each golden
	standInDir bool
}

// loadInteropGolden reads the goldens, or skips while they are absent.
func loadInteropGolden(t *testing.T) *interopGolden {
	t.Helper()
	g := &interopGolden{dir: interopGoldenDir}
	if d := os.Getenv("MIXTUNE_INTEROP_GOLDEN"); d != "" {
		g.dir, g.standInDir = d, true
	}
	raw, err := os.ReadFile(filepath.Join(g.dir, "manifest.json"))
	if os.IsNotExist(err) {
		t.Skipf("golden absent: produced by scripts/gpu_check.sh on a host with transformers and PEFT (%s)", g.dir)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, g); err != nil {
		t.Fatalf("%s/manifest.json: %v", g.dir, err)
	}
	if g.Reference != "transformers" && !g.standInDir {
		t.Fatalf("%s holds %q goldens: the committed ones must come from transformers and PEFT (scripts/gpu_check.sh)", g.dir, g.Reference)
	}
	if len(g.Failed) > 0 {
		t.Errorf("the script's own checks failed on the host: %v", g.Failed)
	}
	f, err := safetensors.ReadFile(filepath.Join(g.dir, "logits.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var ids [][]int
	if err := json.Unmarshal([]byte(f.Metadata()["input_ids"]), &ids); err != nil || len(ids) == 0 {
		t.Fatalf("logits.safetensors: input_ids metadata %q: %v", f.Metadata()["input_ids"], err)
	}
	g.rows, g.seq = len(ids), len(ids[0])
	for i := range ids {
		if len(ids[i]) != g.seq || fmt.Sprint(ids[i]) != fmt.Sprint(g.InputIDs[i]) {
			t.Fatalf("row %d: the logits' input_ids %v differ from the manifest's", i, ids[i])
		}
	}
	m, err := model.Load(interopBase)
	if err != nil {
		t.Fatal(err)
	}
	g.config, g.vocab = m.Config, m.Config.VocabSize
	g.logits, g.largest = map[string][]float64{}, map[string]float64{}
	for _, name := range f.Names() {
		v, shape, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(shape) != fmt.Sprint([]int{g.rows, g.seq, g.vocab}) {
			t.Fatalf("logits %s: shape %v, want [%d %d %d]", name, shape, g.rows, g.seq, g.vocab)
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
			g.largest[name] = max(g.largest[name], math.Abs(out[i]))
		}
		g.logits[name] = out
	}
	t.Logf("goldens from %s (%v)", g.Reference, g.Versions)
	return g
}

// want returns golden name's logits, failing the test if it is missing.
func (g *interopGolden) want(t *testing.T, name string) []float64 {
	t.Helper()
	w, ok := g.logits[name]
	if !ok {
		t.Fatalf("%s/logits.safetensors has no %q", g.dir, name)
	}
	return w
}

// pathLength is k, the summed lengths of the inner products on the longest
// path from the input to a logit: per layer the q/k/v projection, the
// attention scores, the weighted sum of values, o_proj, gate/up, down_proj
// and an adapter's A and B on each of those four matmuls; then the head.
// A correct fp32 forward pass rounds each logit by at most about k·u of
// the largest |logit| (Higham's γ_k for inner products, with the network's
// amplification taken as 1), so this holds for any correct implementation,
// whatever its summation order.
func (g *interopGolden) pathLength(r int) int {
	c := g.config
	return c.NumHiddenLayers*(3*c.HiddenSize+c.HeadDimension()+g.seq+c.IntermediateSize+4*r) + c.HiddenSize
}

// bound is the largest |Δlogit| allowed between mixtune's logits, computed
// in fp32 (fp32 true) or float64, and golden name's: transformers computes
// in float64 but rounds to fp32 in RMSNorm, the attention softmax and
// RoPE (k roundings at most), the golden is stored in fp32 (one more), and
// mixtune's fp32 pass adds k.
func (g *interopGolden) bound(name string, r int, fp32 bool) float64 {
	k := g.pathLength(r) + 1
	if fp32 {
		k += g.pathLength(r)
	}
	return float64(k) * fp32Unit * g.largest[name]
}

// interopLogits runs m (with adapter l, if any) on the golden's token ids
// in dt on backend be and returns the logits.
func interopLogits(t *testing.T, g *interopGolden, m *model.Model, l *peft.Adapter, be blas.Backend, dt tensor.Dtype) []float64 {
	t.Helper()
	b := nn.NewBuilder(&nn.Engine{BLAS: be, Workers: 2}, dt)
	gc := model.GraphConfig{Batch: g.rows, SeqLen: g.seq}
	if l != nil {
		gc.Linear = l.Linear(map[string]*G.Node{})
	}
	gr, err := m.Build(b, gc)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, row := range g.InputIDs {
		ids = append(ids, row...)
	}
	G.Let(gr.IDs, tensor.New(tensor.WithShape(len(ids)), tensor.WithBacking(ids)))
	G.Let(gr.Targets, tensor.New(tensor.WithShape(len(ids)), tensor.WithBacking(make([]int, len(ids)))))
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	switch v := gr.Logits.Value().Data().(type) {
	case []float64:
		return append([]float64(nil), v...)
	case []float32:
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	t.Fatalf("logits of type %T", gr.Logits.Value().Data())
	return nil
}

// interopBackends are float64 on gonum and fp32 on every BLAS backend
// that loads here.
type interopBackend struct {
	name string
	be   blas.Backend
	dt   tensor.Dtype
}

func interopBackends(t *testing.T) []interopBackend {
	t.Helper()
	out := []interopBackend{{"float64 gonum", blas.Gonum{}, tensor.Float64}}
	for _, k := range []blas.Kind{blas.KindGonum, blas.KindNative, blas.KindOpenBLAS, blas.KindOneDNN} {
		c, err := blas.Choose(k, 2, blas.AutoOptions{})
		if err != nil {
			t.Logf("%s: not tested: %v", k, err)
			continue
		}
		out = append(out, interopBackend{"fp32 " + string(k), c.Backend, tensor.Float32})
	}
	return out
}

// compareLogits checks mixtune's logits against golden name's on every
// backend, within bound.
func compareLogits(t *testing.T, g *interopGolden, name string, m *model.Model, l *peft.Adapter, r int) {
	t.Helper()
	want := g.want(t, name)
	if l != nil {
		// the comparison can tell the adapter from none: PEFT's logits
		// differ from the base model's by far more than the bound
		base := g.want(t, "base")
		var moved float64
		for i := range want {
			moved = max(moved, math.Abs(want[i]-base[i]))
		}
		if b := g.bound(name, r, true); !(moved > 10*b) {
			t.Errorf("%s: the adapter moves the logits by %.3g, not 10 times the bound %.3g: the check cannot see it", name, moved, b)
		}
	}
	for _, ib := range interopBackends(t) {
		got := interopLogits(t, g, m, l, ib.be, ib.dt)
		var worst float64
		for i := range want {
			worst = max(worst, math.Abs(got[i]-want[i]))
		}
		b := g.bound(name, r, ib.dt == tensor.Float32)
		t.Logf("%s, %s: max|Δlogit| %.3g = %.3g of max|logit| %.4g (bound %.3g)", name, ib.name, worst, worst/g.largest[name], g.largest[name], b)
		if !(worst <= b) {
			t.Errorf("%s, %s: max|Δlogit| %.3g over the bound %.3g", name, ib.name, worst, b)
		}
	}
}

// loadAdapter loads an adapter directory onto a fresh tiny-byte and
// returns the model, the adapter and its rank.
func loadAdapter(t *testing.T, dir string) (*model.Model, *peft.Adapter, int) {
	t.Helper()
	m, err := model.Load(interopBase)
	if err != nil {
		t.Fatal(err)
	}
	l, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatalf("mixtune cannot load %s: %v", dir, err)
	}
	return m, l, l.Config.R
}

// (a) PEFT loaded mixtune's adapters onto transformers' model: mixtune's
// logits with them match PEFT's; and the base model's match transformers'.
func TestInteropPEFTRunsMixtuneAdapters(t *testing.T) {
	g := loadInteropGolden(t)
	m, err := model.Load(interopBase)
	if err != nil {
		t.Fatal(err)
	}
	compareLogits(t, g, "base", m, nil, 0)
	for name, dir := range g.Adapters {
		m, l, r := loadAdapter(t, filepath.Join("../..", dir))
		compareLogits(t, g, "peft."+name, m, l, r)
	}
	if len(g.Adapters) < 2 {
		t.Errorf("manifest lists %d mixtune adapters, want the LoRA and the DoRA", len(g.Adapters))
	}
}

// (b) transformers loaded `mixtune merge --dtype fp32` output: the merge
// here (float64 arithmetic rounded to fp32 once, the bytes the host's
// binary wrote while the code is the same: the test logs a difference)
// and mixtune's logits of it match transformers'.
func TestInteropTransformersRunsMergedCheckpoints(t *testing.T) {
	g := loadInteropGolden(t)
	for name, dir := range g.Adapters {
		out := filepath.Join(t.TempDir(), "merged")
		code, _, stderr := runIn(t, "merge", "--model", interopBase, "--adapter", filepath.Join("../..", dir), "--out", out, "--dtype", "fp32")
		if code != 0 {
			t.Fatalf("merge %s: exit %d: %s", name, code, stderr)
		}
		raw, err := os.ReadFile(filepath.Join(out, "model.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		if got, want := hex.EncodeToString(sum[:]), g.MergedSHA[name]; got != want {
			// a later change to the merge's arithmetic may move bits
			// within its one fp32 rounding; the logits still hold it
			// to the bound
			t.Logf("merged %s: sha256 %s, the host's merge wrote %s: the weights differ from those transformers ran", name, got, want)
		} else {
			t.Logf("merged %s: the bytes the host's merge wrote (sha256 %.12s…)", name, got)
		}
		m, err := model.Load(out)
		if err != nil {
			t.Fatal(err)
		}
		_, _, r := loadAdapter(t, filepath.Join("../..", dir))
		compareLogits(t, g, "merged."+name, m, nil, r)
	}
}

// goldenLoss is the mean cross-entropy of golden name's logits over every
// token but each row's first, in float64 (as `input_ids` rows train).
func goldenLoss(g *interopGolden, name string) float64 {
	lg := g.logits[name]
	var sum float64
	var n int
	for r, row := range g.InputIDs {
		for p := 0; p+1 < len(row); p++ {
			z := lg[(r*g.seq+p)*g.vocab : (r*g.seq+p+1)*g.vocab]
			hi := math.Inf(-1)
			for _, x := range z {
				hi = max(hi, x)
			}
			var e float64
			for _, x := range z {
				e += math.Exp(x - hi)
			}
			sum += hi + math.Log(e) - z[row[p+1]]
			n++
		}
	}
	return sum / float64(n)
}

// (c) mixtune loads the adapters PEFT saved, computes PEFT's logits with
// them, and trains from them: three steps on the golden's rows, whose
// step-0 validation loss and first step's loss (before any update) are the
// loss of PEFT's logits, and every loss is finite.
func TestInteropMixtuneTrainsPEFTAdapters(t *testing.T) {
	g := loadInteropGolden(t)
	for _, name := range []string{"peft_lora", "peft_dora"} {
		adapter := filepath.Join(g.dir, name)
		m, l, r := loadAdapter(t, adapter)
		if name == "peft_dora" && !l.Config.UseDoRA {
			t.Errorf("%s: loaded without use_dora", name)
		}
		if l.Config.R != 8 || len(l.Modules) != 4*7 {
			t.Errorf("%s: %s with %d modules, want r=8 on 28", name, l.Config, len(l.Modules))
		}
		compareLogits(t, g, "peft."+name, m, l, r)

		want := goldenLoss(g, "peft."+name)
		// cross-entropy moves by at most 2·max|Δlogit| (its gradient in
		// the logits has 1-norm ≤ 2), from fp32 training's logits
		bound := 2 * g.bound("peft."+name, r, true)
		dir := t.TempDir()
		data := filepath.Join(dir, "rows.jsonl")
		var rows strings.Builder
		for _, row := range g.InputIDs {
			b, _ := json.Marshal(map[string][]int{"input_ids": row})
			rows.Write(append(b, '\n'))
		}
		if err := os.WriteFile(data, []byte(rows.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, ib := range interopBackends(t)[1:] {
			kind := strings.TrimPrefix(ib.name, "fp32 ")
			recipe := filepath.Join(dir, kind+".yaml")
			body := fmt.Sprintf(`name: %s
seed: 1
output_dir: %s
model: {path: %s}
data: {train: %s, validation: %s, seq_len: %d}
adapter: {from: %s}
train: {steps: 3, batch_size: %d, eval_every: 0, log_every: 1}
optimizer: {lr: 1.0e-3}
schedule: {warmup_steps: 1}
compute: {blas: %s}
`, kind, filepath.Join(dir, "runs"), interopBase, data, data, g.seq, adapter, g.rows, kind)
			if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := runIn(t, "train", "-c", recipe)
			if code != 0 {
				t.Fatalf("%s, %s: train from the PEFT adapter: exit %d: %s", name, kind, code, stderr)
			}
			losses, val := runLosses(t, filepath.Join(dir, "runs", kind))
			if len(losses) != 3 || len(val) == 0 {
				t.Fatalf("%s, %s: losses %v, validation losses %v", name, kind, losses, val)
			}
			for _, v := range append(losses, val...) {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Errorf("%s, %s: loss %v", name, kind, v)
				}
			}
			t.Logf("%s, %s: step-0 val loss %.7f, step losses %.7f, PEFT's logits' loss %.7f (bound %.3g)", name, kind, val[0], losses, want, bound)
			for _, got := range []float64{val[0], losses[0]} {
				if !(math.Abs(got-want) <= bound) {
					t.Errorf("%s, %s: loss %.7f before training, PEFT's logits give %.7f (bound %.3g)", name, kind, got, want, bound)
				}
			}
			if !(losses[2] < losses[0]) {
				t.Errorf("%s, %s: losses %v: three steps on three rows did not lower the loss", name, kind, losses)
			}
		}
	}
}

// runLosses reads a run's metrics.jsonl: the step lines' losses and the
// validation losses, in order.
func runLosses(t *testing.T, runDir string) (losses, val []float64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(runDir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var rec struct {
			Loss    *float64 `json:"loss"`
			ValLoss *float64 `json:"val_loss"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("%s/metrics.jsonl: %v", runDir, err)
		}
		if rec.Loss != nil {
			losses = append(losses, *rec.Loss)
		}
		if rec.ValLoss != nil {
			val = append(val, *rec.ValLoss)
		}
	}
	return losses, val
}
