package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/gguf"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

func TestExportGGUFCommand(t *testing.T) {
	dir := t.TempDir()
	baseDir, m := tinyBase(t, dir)
	out := filepath.Join(dir, "tiny.gguf")
	code, stdout, stderr := runIn(t, "export", "gguf", "--model", baseDir, "--out", out, "--type", "q8_0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// hidden 16 and intermediate 24 are not multiples of 32: every matrix
	// falls back to f16, as llama.cpp's converter does, and says so
	if !strings.Contains(stdout, "wrote "+out) || !strings.Contains(stdout, "written as f16") || !strings.Contains(stdout, "mixtune's byte tokenizer") {
		t.Fatalf("stdout: %s", stdout)
	}
	p, closer, err := gguf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	if p.Get("general.architecture") != "llama" || p.Get("general.name") != "base" || p.Get("general.file_type") != uint32(7) {
		t.Fatalf("metadata: %v %v %v", p.Get("general.architecture"), p.Get("general.name"), p.Get("general.file_type"))
	}
	emb, shape, err := p.Float32("token_embd.weight")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shape, []int{259, 16}) || emb[17] != m.Weights["model.embed_tokens.weight"].Data[17] {
		t.Fatalf("token_embd %v: %v vs %v", shape, emb[17], m.Weights["model.embed_tokens.weight"].Data[17])
	}

	// an adapter, merged and as a LoRA file
	all := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
	ts, _ := peft.Targets(peft.ModelTargets(m), all)
	l, err := peft.New(peft.Config{R: 4, Alpha: 8, TargetModules: all}, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	adapterDir := filepath.Join(dir, "adapter")
	if err := l.Save(adapterDir, baseDir); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--adapter", adapterDir, "--out", filepath.Join(dir, "merged.gguf")},
		{"--adapter", adapterDir, "--lora", "--type", "f32", "--out", filepath.Join(dir, "lora.gguf")},
	} {
		if code, _, stderr := runIn(t, append([]string{"export", "gguf", "--model", baseDir}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	p2, c2, err := gguf.Open(filepath.Join(dir, "lora.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if p2.Get("general.type") != "adapter" || len(p2.Tensors) != 2*len(l.Modules) {
		t.Fatalf("adapter file: %v, %d tensors", p2.Get("general.type"), len(p2.Tensors))
	}
}

// Bad input exits 2 with a message naming what is wrong, and leaves no
// file (not even a temporary one) behind.
func TestExportGGUFRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	baseDir, _ := tinyBase(t, dir)
	unigram := filepath.Join(dir, "unigram")
	if err := os.CopyFS(unigram, os.DirFS(baseDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unigram, "tokenizer.json"), []byte(`{"model": {"type": "Unigram", "vocab": [["a", 0]]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	exists := filepath.Join(outDir, "exists.gguf")
	if err := os.WriteFile(exists, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"export"}, "name the format"},
		{[]string{"export", "onnx"}, `unknown export format "onnx"`},
		{[]string{"export", "gguf", "--model", baseDir}, "--model and --out are required"},
		{[]string{"export", "gguf", "--model", baseDir, "--out", filepath.Join(outDir, "a.gguf"), "--type", "q4_0"}, `unknown GGUF type "q4_0"`},
		{[]string{"export", "gguf", "--model", baseDir, "--out", filepath.Join(outDir, "a.gguf"), "--lora"}, "--lora exports an adapter"},
		{[]string{"export", "gguf", "--model", baseDir, "--out", exists}, "already exists"},
		{[]string{"export", "gguf", "--model", unigram, "--out", filepath.Join(outDir, "a.gguf")}, `tokenizer model "Unigram" is not supported by GGUF export`},
		{[]string{"export", "gguf", "--model", "../../model/testdata/families/qwen3", "--out", filepath.Join(outDir, "a.gguf")}, "only 40 ids; add the model's tokenizer.json"},
		{[]string{"export", "gguf", "--model", filepath.Join(dir, "nothing"), "--out", filepath.Join(outDir, "a.gguf")}, "config.json"},
	} {
		code, _, stderr := runIn(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
	entries, _ := os.ReadDir(outDir)
	if len(entries) != 1 {
		t.Fatalf("files left in the output directory: %v", entries)
	}
	if b, _ := os.ReadFile(exists); string(b) != "keep" {
		t.Fatal("an existing file was overwritten")
	}
}

// export gguf streams: exporting a model whose weights take 270 MB in
// fp32, merged with an adapter on every projection, the heap grows by at
// most 4× its largest weight in fp32 (a weight dequantized, its float64
// delta, the merged values; then the merged and the permuted values) plus
// the adapter and 64 MiB of slack for the collector's pace and the
// writer's buffers: far less than the model, which the whole-model export
// held. Measured for a bitsandbytes NF4 checkpoint, a bf16 checkpoint
// quantized to NF4 as it loads (--base-quantize), and the bf16 one with DoRA.
func TestExportGGUFStreamingMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 270 MB (fp32) model and exports it three times")
	}
	dir := t.TempDir()
	nf4Dir, c := deepBase(t, dir, 64)
	m, err := model.New(c, 9)
	if err != nil {
		t.Fatal(err)
	}
	bf16Dir := filepath.Join(dir, "bf16")
	if err := m.Save(bf16Dir, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	m = nil
	all := append(slices.Clone(model.AttentionModules), model.MLPModules...)
	lora := randomAdapter(t, nf4Dir, filepath.Join(dir, "lora"), all, false, 5)
	dora := randomAdapter(t, bf16Dir, filepath.Join(dir, "dora"), all, true, 6)
	total, largest, adapterBytes, bound := streamingBound(t, c)
	for _, run := range []struct {
		name string
		args []string
	}{
		{"bitsandbytes nf4, lora, q8_0", []string{"--model", nf4Dir, "--adapter", lora, "--type", "q8_0"}},
		{"bf16 nf4-on-load, lora, f16", []string{"--model", bf16Dir, "--adapter", lora, "--base-quantize", "nf4", "--type", "f16"}},
		{"bf16, dora, bf16", []string{"--model", bf16Dir, "--adapter", dora, "--type", "bf16"}},
	} {
		out := filepath.Join(t.TempDir(), "model.gguf")
		peak, err := peakHeap(func() error {
			if code, _, stderr := runIn(t, append([]string{"export", "gguf", "--out", out}, run.args...)...); code != 0 {
				return fmt.Errorf("exit %d: %s", code, stderr)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", run.name, err)
		}
		t.Logf("%s: heap grew by %.1f MiB at most; model %.1f MiB in fp32, largest weight %.1f MiB, bound %.1f MiB",
			run.name, float64(peak)/(1<<20), float64(total)/(1<<20), float64(largest)/(1<<20), float64(bound)/(1<<20))
		if peak > bound {
			t.Errorf("%s: the heap grew by %d bytes, over the bound %d (4× the largest weight %d in fp32, adapter %d, 64 MiB)",
				run.name, peak, bound, largest, adapterBytes)
		}
	}
}
