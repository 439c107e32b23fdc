package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/gpu/vulkan/vulkantest"
	"github.com/mixtune/mixtune/internal/testadapter"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

// mixtune generate --vulkan-device D decodes on the Vulkan engine, the
// checkpoint's bf16 matrices kept in 16 bits and an adapter unmerged, and
// prints what the CPU prints (the adapter merged) for the shipped tiny
// model alone and with a random LoRA and DoRA adapter: greedy fp32
// decoding of the same function to fp32 rounding (model's
// TestGenerateOnVulkan holds the engines to the same tokens). A device
// that does not exist is bad input, exit 2, naming the flag.
func TestGenerateOnVulkanCommand(t *testing.T) {
	dev := vulkantest.Find(t).Spec
	base := "../../models/tiny-byte"
	outs := map[string]string{}
	for _, adapter := range []string{"", "lora", "dora"} {
		args := []string{"generate", "--model", base, "--prompt", "Date: 2033-03-19\nIn words:", "--max-new-tokens", "24", "--blas", "native"}
		if adapter != "" {
			args = append(args, "--adapter", strongAdapter(t, base, adapter == "dora"))
		}
		code, cpu, stderr := runIn(t, args...)
		if code != 0 {
			t.Fatalf("%s: cpu: exit %d\n%s", adapter, code, stderr)
		}
		code, gpu, stderr := runIn(t, append(args, "--vulkan-device", dev)...)
		if code != 0 {
			t.Fatalf("%s: --vulkan-device %s: exit %d\n%s", adapter, dev, code, stderr)
		}
		if gpu != cpu || strings.TrimSpace(cpu) == "" {
			t.Errorf("%s: the device generated %q, the CPU %q", adapter, gpu, cpu)
		}
		outs[adapter] = gpu
		t.Logf("%s: %q", adapter, gpu)
	}
	if outs["lora"] == outs[""] || outs["dora"] == outs[""] {
		t.Errorf("the adapters change nothing (%q): the comparison cannot see one left out", outs)
	}
	code, _, stderr := runIn(t, "generate", "--model", base, "--prompt", "x", "--vulkan-device", "99")
	if code != 2 || !strings.Contains(stderr, "--vulkan-device 99") {
		t.Errorf("a device that is not there: exit %d, %q", code, stderr)
	}
}

// strongAdapter is a random LoRA (DoRA with dora) adapter on q, v and
// down projections of the model in base, its B scaled up until it changes
// what the model generates.
func strongAdapter(t *testing.T, base string, dora bool) string {
	t.Helper()
	dir := t.TempDir()
	if err := testadapter.Random(base, dir, []string{"q_proj", "v_proj", "down_proj"}, dora, 5); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(base)
	if err != nil {
		t.Fatal(err)
	}
	l, err := peft.Load(dir, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	for _, mod := range l.Modules {
		for j := range mod.B {
			mod.B[j] *= 30
		}
	}
	if err := l.Save(dir, base); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mixtune eval --vulkan-device D computes the loss on the Vulkan engine:
// the CPU's loss and token count, the loss within 1e-5 relative (the fp32
// bound of train's TestVulkanQuickstartMatchesCPU: the engines sum in
// different orders).
func TestEvalOnVulkanCommand(t *testing.T) {
	dev := vulkantest.Find(t).Spec
	val, err := os.ReadFile("../../tasks/dates/val.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	rows := filepath.Join(t.TempDir(), "val16.jsonl") // 16 rows: lavapipe is slow
	if err := os.WriteFile(rows, []byte(strings.Join(strings.SplitAfter(string(val), "\n")[:16], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"eval", "--model", "../../models/tiny-byte", "--data", rows, "--seq-len", "48", "--batch-size", "8", "--blas", "native", "--json"}
	var reps [2]struct {
		Loss   float64 `json:"loss"`
		Tokens int     `json:"tokens"`
	}
	for i, extra := range [][]string{nil, {"--vulkan-device", dev}} {
		code, out, stderr := runIn(t, append(args, extra...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", extra, code, stderr)
		}
		if err := json.Unmarshal([]byte(out), &reps[i]); err != nil {
			t.Fatalf("%v: %v\n%s", extra, err, out)
		}
	}
	cpu, gpu := reps[0], reps[1]
	if rel := math.Abs(gpu.Loss-cpu.Loss) / cpu.Loss; !(rel <= 1e-5) || gpu.Tokens != cpu.Tokens || cpu.Tokens == 0 {
		t.Errorf("device: loss %v over %d tokens; cpu: %v over %d (relative %.3g)", gpu.Loss, gpu.Tokens, cpu.Loss, cpu.Tokens, rel)
	} else {
		t.Logf("loss %v on the device, %v on the cpu (relative %.2g), %d tokens", gpu.Loss, cpu.Loss, rel, cpu.Tokens)
	}
}
