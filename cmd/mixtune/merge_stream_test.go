package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/testadapter"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/quant"
	"github.com/mixtune/mixtune/safetensors"
)

// bnbFixture is a bitsandbytes NF4 checkpoint (double quantization) as
// transformers saves it (scripts/gen_bnb4_fixture.py).
const bnbFixture = "../../model/testdata/bnb4"

// randomAdapter saves, for the model in baseDir, a LoRA or DoRA adapter on
// targets with random B (and magnitudes off the base's row norms), so
// that every merge changes the weights (testadapter.Random).
func randomAdapter(t *testing.T, baseDir, dir string, targets []string, dora bool, seed uint64) string {
	t.Helper()
	if err := testadapter.Random(baseDir, dir, targets, dora, seed); err != nil {
		t.Fatal(err)
	}
	return dir
}

// peftAdapter writes a PEFT adapter with a random LoRA on q_proj and
// adapter_config.json's fields plus extra: with modules_to_save lm_head,
// a saved weight replaces the base's.
func peftAdapter(t *testing.T, baseDir, dir string, extra map[string]any) string {
	t.Helper()
	c, err := model.ReadConfig(baseDir)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(4, 4))
	fill := func(n int) []float32 {
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(rng.NormFloat64() * 0.05)
		}
		return d
	}
	d, q := c.HiddenSize, c.NumAttentionHeads*c.HeadDimension()
	var tensors []safetensors.Tensor
	if extra["modules_to_save"] != nil {
		tensors = append(tensors, safetensors.Tensor{Name: "base_model.model.lm_head.weight", Shape: []int{c.VocabSize, d}, Data: fill(c.VocabSize * d), Dtype: amp.FP32})
	}
	for i := range c.NumHiddenLayers {
		p := "base_model.model." + model.ModulePath(i, "q_proj")
		tensors = append(tensors,
			safetensors.Tensor{Name: p + ".lora_A.weight", Shape: []int{2, d}, Data: fill(2 * d), Dtype: amp.FP32},
			safetensors.Tensor{Name: p + ".lora_B.weight", Shape: []int{q, 2}, Data: fill(2 * q), Dtype: amp.FP32})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fields := map[string]any{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": []string{"q_proj"}}
	maps.Copy(fields, extra)
	cfg, _ := json.Marshal(fields)
	if err := os.WriteFile(filepath.Join(dir, peft.ConfigFile), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.WriteFile(filepath.Join(dir, peft.WeightsFile), tensors, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

// wideConfig is a two-layer model wide enough for 4-bit blocks of 64.
func wideConfig() model.Config {
	return model.Config{VocabSize: 259, HiddenSize: 64, IntermediateSize: 160, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		InitializerRange: 0.02, BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}
}

// The streaming merge writes the same bytes as merging into the model
// loaded whole (MergeInto, Requantize, Save or SaveBnB4), by design: each
// weight goes through the same per-weight arithmetic. Every file of the
// two outputs is compared byte for byte, and the requantization error
// statistics must be the same numbers.
func TestMergeStreamingBitIdentical(t *testing.T) {
	dir := t.TempDir()
	bf16Dir, _ := tinyBase(t, dir)
	// a base stored in fp32, with a wider model and several shards
	wide, err := model.New(wideConfig(), 6)
	if err != nil {
		t.Fatal(err)
	}
	fp32Dir := filepath.Join(dir, "fp32")
	if err := wide.Save(fp32Dir, amp.FP32, 30_000); err != nil {
		t.Fatal(err)
	}
	attn, mlp := []string{"q_proj", "v_proj"}, []string{"q_proj", "down_proj", "up_proj"}
	nf4 := model.Quantization{Type: quant.NF4, Double: true}
	// a bitsandbytes checkpoint whose lm_head is 4-bit too
	head4, err := model.New(wideConfig(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := head4.Quantize(nf4); err != nil {
		t.Fatal(err)
	}
	head := head4.Weights["lm_head.weight"]
	if head.Q4, err = quant.QuantizeBlob(quant.NF4, head.Data, head.Shape, quant.Options{Double: true}); err != nil {
		t.Fatal(err)
	}
	head.Data = nil
	head4Dir := filepath.Join(dir, "head4")
	if err := head4.SaveBnB4(head4Dir, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		base    string
		adapter string
		job     mergeJob
	}{
		{"bnb lora", bnbFixture, randomAdapter(t, bnbFixture, filepath.Join(dir, "a1"), attn, false, 1),
			mergeJob{storedDtype: true}},
		{"bnb dora bf16 sharded", bnbFixture, randomAdapter(t, bnbFixture, filepath.Join(dir, "a2"), mlp, true, 2),
			mergeJob{dtype: amp.BF16, maxShardBytes: 20_000}},
		{"bnb dora requantize nf4", bnbFixture, filepath.Join(dir, "a2"),
			mergeJob{dtype: amp.BF16, requant: nf4, maxShardBytes: 20_000}},
		{"bnb lora requantize fp4", bnbFixture, filepath.Join(dir, "a1"),
			mergeJob{dtype: amp.FP16, requant: model.Quantization{Type: quant.FP4}}},
		{"bf16 lora", bf16Dir, randomAdapter(t, bf16Dir, filepath.Join(dir, "a3"), mlp, false, 3),
			mergeJob{storedDtype: true}},
		{"bf16 nf4-on-load lora fp32", bf16Dir, filepath.Join(dir, "a3"),
			mergeJob{dtype: amp.FP32, base: nf4}},
		{"fp32 nf4-on-load dora requantize nf4 sharded", fp32Dir, randomAdapter(t, fp32Dir, filepath.Join(dir, "a4"), mlp, true, 4),
			mergeJob{dtype: amp.BF16, base: nf4, requant: nf4, maxShardBytes: 30_000}},
		{"fp32 fp4-on-load requantize nf4 single", fp32Dir, filepath.Join(dir, "a4"),
			mergeJob{storedDtype: true, base: model.Quantization{Type: quant.FP4}, requant: model.Quantization{Type: quant.NF4}}},
		{"fp32 modules_to_save", fp32Dir, peftAdapter(t, fp32Dir, filepath.Join(dir, "a5"), map[string]any{"modules_to_save": []string{"lm_head"}}),
			mergeJob{dtype: amp.BF16, maxShardBytes: 30_000}},
		{"bnb 4-bit lm_head requantize nf4", head4Dir, randomAdapter(t, head4Dir, filepath.Join(dir, "a7"), attn, false, 7),
			mergeJob{dtype: amp.BF16, requant: nf4}},
		{"bnb 4-bit lm_head bf16", head4Dir, filepath.Join(dir, "a7"),
			mergeJob{dtype: amp.BF16}},
		// merged into the model loaded whole (Load computes the residual
		// from every adapted base weight): the route works
		{"fp32 pissa unconverted", fp32Dir, peftAdapter(t, fp32Dir, filepath.Join(dir, "a6"), map[string]any{"init_lora_weights": "pissa"}),
			mergeJob{dtype: amp.BF16}},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := c.job
			j.modelDir, j.adapterDir = c.base, c.adapter
			whole, err := j.prepareWhole()
			if err != nil {
				t.Fatal(err)
			}
			streamed, err := j.prepare()
			if err != nil {
				t.Fatal(err)
			}
			wholeDir, streamDir := filepath.Join(t.TempDir(), "whole"), filepath.Join(t.TempDir(), "stream")
			wst, err := whole.write(wholeDir)
			if err != nil {
				t.Fatal(err)
			}
			sst, err := streamed.write(streamDir)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(wst, sst) {
				t.Errorf("requantization statistics: whole %+v, streamed %+v", wst, sst)
			}
			if j.requant.Type != 0 && sst.Tensors == 0 {
				t.Error("nothing was requantized")
			}
			if whole.dtype != streamed.dtype {
				t.Errorf("dtype: whole %v, streamed %v", whole.dtype, streamed.dtype)
			}
			want, got := readDir(t, wholeDir), readDir(t, streamDir)
			if !slices.Equal(sortedKeys(want), sortedKeys(got)) {
				t.Fatalf("files: whole %v, streamed %v", sortedKeys(want), sortedKeys(got))
			}
			if j.maxShardBytes > 0 && len(want) < 3 {
				t.Errorf("want several shards, got files %v", sortedKeys(want))
			}
			for name, b := range want {
				if !bytes.Equal(got[name], b) {
					t.Errorf("%s differs (%d bytes whole, %d streamed)", name, len(b), len(got[name]))
				}
			}
			// and the merge changed what it adapts
			base, err := model.Load(c.base)
			if err != nil {
				t.Fatal(err)
			}
			merged, err := model.Load(streamDir)
			if err != nil {
				t.Fatal(err)
			}
			q := model.ModulePath(0, "q_proj") + ".weight"
			if slices.Equal(base.Weights[q].Float32(), merged.Weights[q].Float32()) {
				t.Errorf("%s is the base's: nothing was merged", q)
			}
		})
	}
}

func readDir(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files[e.Name()] = b
	}
	return files
}

func sortedKeys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// peakHeap runs f while sampling the heap in use, and returns the largest
// growth over what was in use, collected, before f. The collector runs
// at 10% growth meanwhile, not the default 100%: the heap in use then
// stays close to what is live, whatever the machine's load does to the
// collector's pace, and the bound tests what the code holds, not when
// garbage happened to be collected.
func peakHeap(f func() error) (uint64, error) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	err := f()
	close(stop)
	<-done
	runtime.ReadMemStats(&ms)
	return max(peak, ms.HeapInuse) - base, err
}

// deepBase saves a bitsandbytes NF4 model (double quantization, bf16
// embedding and head) of many narrow layers: its fp32 weights total
// layers × about 4.2 MB, its largest weight is 1 MiB in fp32.
func deepBase(t testing.TB, dir string, layers int) (string, model.Config) {
	t.Helper()
	c := model.Config{VocabSize: 512, HiddenSize: 256, IntermediateSize: 1024, NumHiddenLayers: layers,
		NumAttentionHeads: 4, NumKeyValueHeads: 4, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		InitializerRange: 0.02, BOSTokenID: 1, EOSTokenID: 2}
	m, err := model.NewQuantized(c, 9, amp.BF16, model.Quantization{Type: quant.NF4, Double: true})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "deep")
	if err := m.SaveBnB4(p, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	return p, c
}

// streamingBound is the most the heap may grow while a model with config
// c is merged or exported one weight at a time with a rank-4 adapter
// (testadapter.Random) on every projection: 4× its largest weight in fp32
// plus the adapter (A, B and DoRA's magnitudes in fp32) plus 64 MiB. It
// fails t if the model, total bytes in fp32, is under 3× the bound: too
// small to tell streaming from holding it.
func streamingBound(t *testing.T, c model.Config) (total, largest, adapterBytes, bound uint64) {
	t.Helper()
	for _, s := range model.Specs(c) {
		n := uint64(4)
		for _, d := range s.Shape {
			n *= uint64(d)
		}
		total += n
		largest = max(largest, n)
	}
	for _, ts := range peft.ConfigTargets(c) {
		adapterBytes += 4 * (4*uint64(ts.In+ts.Out) + uint64(ts.Out))
	}
	bound = 4*largest + adapterBytes + 64<<20
	if total < 3*bound {
		t.Fatalf("the model (%d bytes in fp32) is too small to tell streaming from holding it (bound %d)", total, bound)
	}
	return total, largest, adapterBytes, bound
}

// A merge streams: merging an NF4 model whose weights take 270 MB in
// fp32 into every projection, the heap grows by at most 4× its largest
// weight in fp32 (a weight dequantized, its float64 delta, the merged
// values) plus the adapter and 64 MiB of slack for the collector's pace
// and the writer's buffers: far less than the model, which the whole-model
// merge holds. With --requantize the bound is the same, each projection
// merged and quantized twice.
func TestMergeStreamingMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 270 MB (fp32) model twice")
	}
	dir := t.TempDir()
	baseDir, c := deepBase(t, dir, 64)
	all := append(slices.Clone(model.AttentionModules), model.MLPModules...)
	adapterDir := randomAdapter(t, baseDir, filepath.Join(dir, "adapter"), all, false, 5)
	total, largest, adapterBytes, bound := streamingBound(t, c)
	for _, requant := range []model.Quantization{{}, {Type: quant.NF4, Double: true}} {
		j := mergeJob{modelDir: baseDir, adapterDir: adapterDir, dtype: amp.BF16, requant: requant}
		out := filepath.Join(t.TempDir(), "merged")
		peak, err := peakHeap(func() error {
			res, err := j.prepare()
			if err != nil {
				return err
			}
			_, err = res.write(out)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		what := "none"
		if requant.Type != 0 {
			what = requant.Type.String()
		}
		t.Logf("requantize %s: heap grew by %.1f MiB at most; model %.1f MiB in fp32, largest weight %.1f MiB, bound %.1f MiB",
			what, float64(peak)/(1<<20), float64(total)/(1<<20), float64(largest)/(1<<20), float64(bound)/(1<<20))
		if peak > bound {
			t.Errorf("requantize %s: the heap grew by %d bytes, over the bound %d (4× the largest weight %d in fp32, adapter %d, 64 MiB)",
				what, peak, bound, largest, adapterBytes)
		}
	}
}

// rewriteCheckpoint rewrites dir/model.safetensors in fp32, with change
// applied to each tensor's values in place, or to a byte tensor's bytes
// (it returns them, of the same length).
func rewriteCheckpoint(t *testing.T, dir string, change func(name string, data []float32, u8 []byte) []byte) {
	t.Helper()
	path := filepath.Join(dir, safetensors.SingleFileName)
	f, err := safetensors.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.Tensor
	for _, name := range f.Names() {
		info, _ := f.Info(name)
		if info.Dtype == "U8" {
			b, err := f.Raw(name)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, safetensors.Tensor{Name: name, Shape: info.Shape, U8: change(name, nil, slices.Clone(b))})
			continue
		}
		d, _, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		change(name, d, nil)
		ts = append(ts, safetensors.Tensor{Name: name, Shape: info.Shape, Data: d, Dtype: amp.FP32})
	}
	if err := safetensors.WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
}

// Bad input found only once a weight is read, after others were written
// (a NaN in the last weight, a 4-bit weight's quant state that
// contradicts the config), exits 2 naming the tensor and leaves nothing,
// in merge and in export gguf, which both stream: the weights went to a
// temporary directory or file, removed on the error, and --out is never
// created.
func TestMergeStreamingBadWeightLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	bf16Dir, _ := tinyBase(t, dir)
	nanDir := filepath.Join(dir, "nan")
	if err := os.CopyFS(nanDir, os.DirFS(bf16Dir)); err != nil {
		t.Fatal(err)
	}
	rewriteCheckpoint(t, nanDir, func(name string, d []float32, _ []byte) []byte {
		if name == "model.norm.weight" { // written last but for nothing
			d[3] = float32(math.NaN())
		}
		return nil
	})
	bnbDir := filepath.Join(dir, "bnb")
	if err := os.CopyFS(bnbDir, os.DirFS(bnbFixture)); err != nil {
		t.Fatal(err)
	}
	bad := "model.layers.1.mlp.down_proj.weight"
	rewriteCheckpoint(t, bnbDir, func(name string, _ []float32, u8 []byte) []byte {
		if name == bad+".quant_state.bitsandbytes__nf4" {
			return bytes.Replace(u8, []byte(`"blocksize": 64`), []byte(`"blocksize": 63`), 1)
		}
		return u8
	})
	for _, c := range []struct {
		name, base, clean, want string
	}{
		{"NaN", nanDir, bf16Dir, "tensor model.norm.weight holds a non-finite value"},
		{"quant state", bnbDir, bnbFixture, bad + ".quant_state.bitsandbytes__nf4: blocksize 63"},
	} {
		adapter := randomAdapter(t, c.clean, filepath.Join(t.TempDir(), "adapter"), []string{"q_proj"}, false, 7)
		for _, args := range [][]string{
			{"merge", "--model", c.base, "--adapter", adapter, "--dtype", "bf16"},
			{"export", "gguf", "--model", c.base, "--adapter", adapter, "--type", "q8_0"},
		} {
			parent := t.TempDir()
			code, _, stderr := runIn(t, append(args, "--out", filepath.Join(parent, "out"))...)
			t.Logf("%s %s: %s", args[0], c.name, stderr)
			if code != 2 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, ".tmp-") {
				t.Errorf("%s %s: exit %d, %q; want exit 2 naming %q, not the temporary file", args[0], c.name, code, stderr, c.want)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("%s %s: left %v beside --out", args[0], c.name, entries)
			}
		}
	}
}

// A merge that overflows fp16 in a weight written after others is refused
// naming the module, as the whole-model merge refused it before writing
// (exit 1), and leaves nothing.
func TestMergeStreamingOverflowLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	baseDir, _ := tinyBase(t, dir)
	adapterDir := randomAdapter(t, baseDir, filepath.Join(dir, "adapter"), []string{"q_proj", "down_proj"}, false, 8)
	l, err := peft.Load(adapterDir, peft.BaseOf(func() *model.Model {
		m, err := model.Load(baseDir)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}()))
	if err != nil {
		t.Fatal(err)
	}
	last := l.Modules[len(l.Modules)-1] // model.layers.1.mlp.down_proj, written after layer 0
	for j := range last.B {
		last.B[j] = 1e7
	}
	if err := l.Save(adapterDir+"-big", baseDir); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	code, _, stderr := runIn(t, "merge", "--model", baseDir, "--adapter", adapterDir+"-big", "--out", filepath.Join(parent, "merged"), "--dtype", "fp16")
	if want := last.Path + ": merged weight"; code != 1 || !strings.Contains(stderr, want) || strings.Contains(stderr, ".tmp-") {
		t.Errorf("exit %d, %q; want exit 1 naming %q, not the temporary file", code, stderr, want)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("left %v beside --out", entries)
	}
}
