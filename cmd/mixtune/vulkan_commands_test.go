package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/gpu/vulkan/vulkantest"
)

// mixtune generate --vulkan-device D decodes on the Vulkan engine and
// prints what the CPU prints for the shipped tiny model (greedy fp32
// decoding: model's TestGenerateOnVulkan holds the engines to the same
// tokens); a device that does not exist is bad input, exit 2, naming the
// flag.
func TestGenerateOnVulkanCommand(t *testing.T) {
	dev := vulkantest.Find(t).Spec
	args := []string{"generate", "--model", "../../models/tiny-byte", "--prompt", "Date: 2033-03-19\nIn words:", "--max-new-tokens", "24", "--blas", "native"}
	code, cpu, stderr := runIn(t, args...)
	if code != 0 {
		t.Fatalf("cpu: exit %d\n%s", code, stderr)
	}
	code, gpu, stderr := runIn(t, append(args, "--vulkan-device", dev)...)
	if code != 0 {
		t.Fatalf("--vulkan-device %s: exit %d\n%s", dev, code, stderr)
	}
	if gpu != cpu || strings.TrimSpace(cpu) == "" {
		t.Errorf("the device generated %q, the CPU %q", gpu, cpu)
	}
	code, _, stderr = runIn(t, append(args, "--vulkan-device", "99")...)
	if code != 2 || !strings.Contains(stderr, "--vulkan-device 99") {
		t.Errorf("a device that is not there: exit %d, %q", code, stderr)
	}
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
