package train

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/model"
)

func TestPickVulkan(t *testing.T) {
	lavapipe := &vulkan.PhysicalDevice{Index: 0, Name: "llvmpipe (LLVM 15.0.6, 256 bits)", Type: vulkan.TypeCPU, DeviceLocalBytes: 8 << 30}
	small := &vulkan.PhysicalDevice{Index: 1, Name: "Intel UHD", Type: vulkan.TypeIntegratedGPU, DeviceLocalBytes: 2 << 30, UUID: [16]byte{1}}
	big := &vulkan.PhysicalDevice{Index: 2, Name: "NVIDIA H200", Type: vulkan.TypeDiscreteGPU, DeviceLocalBytes: 140 << 30, UUID: [16]byte{0x30, 0x69}}
	other := &vulkan.PhysicalDevice{Index: 3, Name: "AMD Radeon", Type: vulkan.TypeDiscreteGPU, DeviceLocalBytes: 16 << 30, UUID: [16]byte{7}}
	sel := func(uuid string) device.Selection {
		return device.Selection{GPUs: []device.GPU{{UUID: uuid}}}
	}
	for _, tc := range []struct {
		name string
		devs []*vulkan.PhysicalDevice
		spec string
		sel  device.Selection
		want *vulkan.PhysicalDevice
		err  string
	}{
		{"largest real GPU", []*vulkan.PhysicalDevice{lavapipe, small, other, big}, "", device.Selection{}, big, ""},
		{"selected GPU by UUID", []*vulkan.PhysicalDevice{lavapipe, big, other}, "", sel(other.UUIDString()), other, ""},
		{"UUID case", []*vulkan.PhysicalDevice{big, other}, "", sel(strings.ToUpper(big.UUIDString())), big, ""},
		{"selected GPU unknown to Vulkan", []*vulkan.PhysicalDevice{big}, "", sel("GPU-ffffffff-0000-0000-0000-000000000000"), nil, "no device with the selected GPU's UUID"},
		{"lavapipe only: never auto", []*vulkan.PhysicalDevice{lavapipe}, "", device.Selection{}, nil, "only the CPU driver 0 (llvmpipe"},
		{"lavapipe named", []*vulkan.PhysicalDevice{lavapipe, big}, "0", device.Selection{}, lavapipe, ""},
		{"named by UUID over the selection", []*vulkan.PhysicalDevice{big, other}, other.UUIDString(), sel(big.UUIDString()), other, ""},
		{"bad index", []*vulkan.PhysicalDevice{big}, "4", device.Selection{}, nil, "vulkan: device index 4 out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := pickVulkan(tc.devs, tc.spec, tc.sel)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %s", got, err, tc.want.Name)
			}
		})
	}
}

func TestComputeDeviceField(t *testing.T) {
	t.Chdir("..") // the recipe names its files from the repository's root
	for _, tc := range []struct {
		sets []string
		err  string
	}{
		{[]string{"compute.device=tpu"}, `unknown compute device "tpu"`},
		{[]string{"compute.device=cpu", "compute.vulkan_device=0"}, "compute.vulkan_device: names a Vulkan device, but compute.device is cpu"},
		{[]string{"compute.gemm_tile=64x64"}, `compute.gemm_tile: must be one of auto, 128x256, 128x128, 128x128s4, 256x128, cm2-128x256, cm2-128x128, cm2-128x256u8, cm2-256x128u8, got "64x64"`},
		{[]string{"compute.split_dkv=maybe"}, `compute.split_dkv: want auto, true or false, got "maybe"`},
	} {
		_, err := Load("configs/quickstart.yaml", tc.sets)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: err %v, want one containing %q", tc.sets, err, tc.err)
		}
	}
	for _, s := range []string{"auto", "cpu", "gpu", "GPU"} {
		if _, err := Load("configs/quickstart.yaml", []string{"compute.device=" + s}); err != nil {
			t.Errorf("compute.device=%s: %v", s, err)
		}
	}
	// the Vulkan engine takes checkpointing and preference objectives
	for _, sets := range [][]string{
		{"compute.device=gpu", "compute.activation_checkpointing=true"},
		{"compute.device=gpu", "train.objective=dpo", "data.train=tasks/dates-pref/train.jsonl", "data.mode=pad"},
	} {
		if _, err := Load("configs/quickstart.yaml", sets); err != nil {
			t.Errorf("%v: %v", sets, err)
		}
	}
	for s, want := range map[string]SplitDKV{"auto": SplitDKVAuto, "true": SplitDKVOn, "false": SplitDKVOff} {
		r, err := Load("configs/quickstart.yaml", []string{"compute.split_dkv=" + s})
		if err != nil || r.Compute.SplitDKV != want {
			t.Errorf("compute.split_dkv=%s: %v, %v", s, r.Compute.SplitDKV, err)
		} else if b, _ := want.MarshalText(); string(b) != s {
			t.Errorf("%v marshals as %q", want, b)
		}
	}
	for _, tile := range GemmTiles() {
		if _, err := Load("configs/quickstart.yaml", []string{"compute.gemm_tile=" + tile}); err != nil {
			t.Errorf("compute.gemm_tile=%s: %v", tile, err)
		}
	}
}

// settleCompute: the engine that took a selected GPU is recorded; a GPU
// no engine took warns, and a pinned one without allow_cpu_fallback is
// refused at its field.
func TestSettleCompute(t *testing.T) {
	t.Chdir("..")
	gpu := device.GPU{UUID: "GPU-8f2a6d1c-4b3e-7a9f-2c5d-6e7f8091a2b3"}
	for _, tc := range []struct {
		name        string
		sets        []string
		pinned, eng bool
		compute     string
		warn, err   string
	}{
		{"vulkan took it", nil, true, true, "vulkan", "", ""},
		{"auto falls back", nil, false, false, "cpu", "compute runs on the CPU (no Vulkan loader): the selected GPU does no work", ""},
		{"pinned falls back when allowed", nil, true, false, "cpu", "compute runs on the CPU (no Vulkan loader)", ""},
		{"pinned refused", []string{"allow_cpu_fallback=false", "device=cuda:1"}, true, false, "", "", "device: the pinned GPU would do no work: the run computes on the CPU (no Vulkan loader)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Load("configs/quickstart.yaml", tc.sets)
			if err != nil {
				t.Fatal(err)
			}
			c := &components{device: &DeviceChoice{Selection: device.Selection{GPUs: []device.GPU{gpu}, Compute: "gpu", Pinned: tc.pinned}}, gpuReason: "no Vulkan loader"}
			if tc.eng {
				c.gpu = &gpuEngine{}
			}
			err = c.settleCompute(r)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			sel := c.device.Selection
			if err != nil || sel.Compute != tc.compute {
				t.Fatalf("compute %q, err %v; want %q", sel.Compute, err, tc.compute)
			}
			if tc.warn != "" && (len(sel.Warnings) == 0 || !strings.Contains(sel.Warnings[0], tc.warn)) {
				t.Errorf("warnings %q, want one containing %q", sel.Warnings, tc.warn)
			}
		})
	}
}

// Each local rank takes the next selected GPU; more ranks than GPUs share
// them only with compute.share_gpu; the devices report says which.
func TestRankAssignment(t *testing.T) {
	t.Chdir("..")
	sel := device.Selection{GPUs: []device.GPU{{Index: 3, Name: "A", UUID: "GPU-a"}, {Index: 1, Name: "B", UUID: "GPU-b"}}, Compute: "gpu"}
	for _, tc := range []struct {
		sets  []string
		ranks int
		want  []string
		err   string
	}{
		{nil, 2, []string{"rank 0: GPU 3 (A, GPU-a): selected GPU 1 of 2", "rank 1: GPU 1 (B, GPU-b): selected GPU 2 of 2"}, ""},
		{nil, 3, nil, "compute.share_gpu: 3 ranks on this host and 2 GPU(s) selected: ranks would share a GPU"},
		{[]string{"compute.share_gpu=true"}, 3, []string{"rank 0: GPU 3 (A, GPU-a): selected GPU 1 of 2, shared (compute.share_gpu)", "rank 1: GPU 1 (B, GPU-b): selected GPU 2 of 2, shared (compute.share_gpu)", "rank 2: GPU 3 (A, GPU-a): selected GPU 1 of 2, shared (compute.share_gpu)"}, ""},
		{[]string{"compute.device=cpu"}, 2, []string{"all 2 ranks compute on the CPU (compute.device: cpu)"}, ""},
	} {
		r, err := Load("configs/quickstart.yaml", tc.sets)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.RankAssignment(sel, tc.ranks)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v, %d ranks: err %v, want %q", tc.sets, tc.ranks, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%v, %d ranks: %q, %v; want %q", tc.sets, tc.ranks, got, err, tc.want)
		}
	}
}

// A run's engine builds the tensor-core kernels of its precision's
// 16-bit format alone: fp32 runs none.
func TestTensorFormats(t *testing.T) {
	for _, tc := range []struct {
		low  amp.Format
		want []vulkan.Rounding
	}{
		{amp.BF16, []vulkan.Rounding{vulkan.RoundBF16}},
		{amp.FP16, []vulkan.Rounding{vulkan.RoundFP16}},
		{amp.FP32, []vulkan.Rounding{}},
	} {
		got := tensorFormats(tc.low)
		if got == nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v: %v, want %v (not nil: nil builds every format)", tc.low, got, tc.want)
		}
	}
}

// A task's decoding falls back to the CPU on the errors that say the
// device is too small, wrapped as the decoder wraps them, and on no
// other.
func TestDeviceTooSmall(t *testing.T) {
	oom := &vulkan.Error{Call: "vkAllocateMemory", Result: vulkan.ErrorOutOfDeviceMemory}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("decode 7 tokens: decode on X: %w", oom), true},
		{fmt.Errorf("decode 7 tokens: vkengine: key/value cache of 2 sequences × 9 tokens: buffer of 9 bytes: %w", vulkan.ErrBufferTooLarge), true},
		{fmt.Errorf("decode 7 tokens: %w", &vulkan.Error{Call: "vkQueueSubmit", Result: -4}), false}, // device lost
		{errors.New("token id 300 is outside the vocabulary"), false},
		{nil, false},
	} {
		if got := deviceTooSmall(tc.err); got != tc.want {
			t.Errorf("deviceTooSmall(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// generate's and eval's --vulkan-device: a device too small is bad input
// naming the flag; other errors, and errors without the flag, pass
// through.
func TestTooSmallForFlag(t *testing.T) {
	oom := fmt.Errorf("decode 9 tokens: %w", &vulkan.Error{Call: "vkAllocateMemory", Result: vulkan.ErrorOutOfDeviceMemory})
	var in *InputError
	if err := tooSmallForFlag("0", oom); !errors.As(err, &in) || !strings.Contains(err.Error(), "--vulkan-device 0") {
		t.Errorf("out of memory: %v", err)
	}
	if err := tooSmallForFlag("", oom); err != oom {
		t.Errorf("without the flag: %v", err)
	}
	other := errors.New("token id 300 is outside the vocabulary")
	if err := tooSmallForFlag("0", other); err != other {
		t.Errorf("another error: %v", err)
	}
}

// compactStored keeps the shipped tiny model's matrices, stored in bf16,
// as bf16 (their exact values) and its norm vectors in fp32: 2 bytes a
// matrix value, 4 a norm value, counted from the config (half the fp32
// matrices' bytes on the device for generate and eval --vulkan-device).
func TestCompactStored(t *testing.T) {
	m, err := model.Load(filepath.Join("..", "models", "tiny-byte"))
	if err != nil {
		t.Fatal(err)
	}
	c := m.Config
	d, f, kv := c.HiddenSize, c.IntermediateSize, c.NumKeyValueHeads*c.HeadDimension()
	matrices := c.NumHiddenLayers*(2*d*d+2*d*kv+3*d*f) + 2*c.VocabSize*d
	norms := (2*c.NumHiddenLayers + 1) * d
	want := make(map[string][]float32)
	for name, w := range m.Weights {
		want[name] = w.Float32()
	}
	if got := m.WeightBytes(); got != 4*(matrices+norms) {
		t.Fatalf("loaded: %d bytes, want %d", got, 4*(matrices+norms))
	}
	compactStored(m)
	if got := m.WeightBytes(); got != 2*matrices+4*norms {
		t.Errorf("compacted: %d bytes, want %d", got, 2*matrices+4*norms)
	}
	for name, w := range m.Weights {
		for i, v := range w.Float32() {
			if math.Float32bits(v) != math.Float32bits(want[name][i]) {
				t.Fatalf("%s[%d]: %v compacted, %v loaded", name, i, v, want[name][i])
			}
		}
	}
	t.Logf("%d bytes of weights, %d of them fp32 before", m.WeightBytes(), 4*(matrices+norms))
}
