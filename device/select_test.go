package device

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

const (
	cpuWarn   = "compute runs on the CPU (compute.device: cpu): the selected GPU does no work; it is only named to child processes in Env"
	label1080 = "GPU 0 (NVIDIA GeForce GTX 1080 Ti, " + uuid1080 + ")"
	labelTi   = "GPU 1 (NVIDIA TITAN RTX, " + uuidTitan + ")"
	warn61    = label1080 + " has compute capability 6.1: no tensor cores, and fp16 arithmetic runs at 1/64 of the fp32 rate; fp32 will be faster there"
	cpuEnv    = "CUDA_VISIBLE_DEVICES="
	order     = "CUDA_DEVICE_ORDER=PCI_BUS_ID"
	noGPUNote = "no GPU found, using CPU: NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND); nvidia-smi: not found in PATH"
	listTitan = "\n  0  NVIDIA GeForce GTX 1080 Ti  " + uuid1080 + "  00000000:01:00.0  11.0 GiB total, 10.7 GiB free" +
		"\n  1  NVIDIA TITAN RTX  " + uuidTitan + "  00000000:02:00.0  24.0 GiB total, 23.6 GiB free"
)

// eight-GPU host UUIDs and labels, by index.
var (
	uuid8 = func() []string {
		var u []string
		for _, g := range eightHost() {
			u = append(u, g.UUID)
		}
		return u
	}()
	a6000 = func(i int) string { return "GPU " + string(rune('0'+i)) + " (NVIDIA RTX A6000, " + uuid8[i] + ")" }
	r3090 = func(i int) string {
		return "GPU " + string(rune('0'+i)) + " (NVIDIA GeForce RTX 3090, " + uuid8[i] + ")"
	}
)

type selectCase struct {
	name string
	inv  Inventory
	req  Request
	// want, when wantErr is "": GPUs by UUID, then the other fields exactly.
	uuids       []string
	precision   amp.Format
	lossScaling bool
	reason      string
	warnings    []string
	wantErr     string
}

func runSelectCases(t *testing.T, tests []selectCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Select(tt.inv, tt.req)
			if tt.wantErr != "" || err != nil {
				if errString(err) != tt.wantErr {
					t.Fatalf("error:\n got %q\nwant %q", errString(err), tt.wantErr)
				}
				return
			}
			var uuids []string
			for _, g := range got.GPUs {
				uuids = append(uuids, g.UUID)
			}
			env := []string{order, "CUDA_VISIBLE_DEVICES=" + strings.Join(tt.uuids, ",")}
			want := Selection{CPU: len(tt.uuids) == 0, Compute: "cpu", Precision: tt.precision, LossScaling: tt.lossScaling,
				Reason: tt.reason, Warnings: tt.warnings, Env: env, Pinned: strings.HasPrefix(tt.reason, "pinned")}
			got.GPUs = nil
			if !reflect.DeepEqual(uuids, tt.uuids) {
				t.Errorf("GPUs:\n got %q\nwant %q", uuids, tt.uuids)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("selection:\n got %#v\nwant %#v", got, want)
			}
		})
	}
}

// TestSelectTitanHost is the seed failure: a TITAN RTX (7.5) and a GTX 1080
// Ti (6.1) whose CUDA fastest-first order differs from nvidia-smi's.
func TestSelectTitanHost(t *testing.T) {
	nvml := inventoryFromNVML(t, "titan_1080ti.nvml.json")
	smi := inventoryFromSMI(t, "titan_1080ti.smi.csv")
	autoReason := "auto: most total VRAM (24.0 GiB) of 2 eligible GPUs: " + labelTi
	bf16Err := "precision bf16 needs compute capability 8.0 or newer (Ampere), but " + labelTi +
		" has 7.5; set precision: fp16 (with loss scaling) or fp32, or precision_fallback: true to fall back to fp16"
	runSelectCases(t, []selectCase{
		{name: "auto picks the TITAN", inv: nvml, req: Request{Device: MustSpec("auto")},
			uuids: []string{uuidTitan}, precision: amp.FP32, reason: autoReason, warnings: []string{cpuWarn}},
		{name: "auto picks the TITAN from nvidia-smi too", inv: smi, req: Request{},
			uuids: []string{uuidTitan}, precision: amp.FP32, reason: autoReason, warnings: []string{cpuWarn}},
		{name: "auto by free memory picks the TITAN too", inv: nvml, req: Request{Policy: PolicyFree},
			uuids: []string{uuidTitan}, precision: amp.FP32, reason: "auto: most free VRAM (23.6 GiB) of 2 eligible GPUs: " + labelTi, warnings: []string{cpuWarn}},
		{name: "bf16 refused on the 7.5 card", inv: nvml, req: Request{Precision: amp.BF16}, wantErr: bf16Err},
		{name: "bf16 refused on the pinned TITAN", inv: nvml, req: Request{Device: MustSpec("cuda:1"), Precision: amp.BF16, AllowCPUFallback: true}, wantErr: bf16Err},
		{name: "bf16 falls back to fp16 with loss scaling", inv: nvml, req: Request{Precision: amp.BF16, PrecisionFallback: true},
			uuids: []string{uuidTitan}, precision: amp.FP16, lossScaling: true, reason: autoReason,
			warnings: []string{cpuWarn, "bf16 needs compute capability 8.0 or newer, but " + labelTi + " has 7.5: using fp16 with loss scaling instead (precision_fallback)"}},
		{name: "fp16 on the TITAN: tensor cores, no warning", inv: nvml, req: Request{Precision: amp.FP16},
			uuids: []string{uuidTitan}, precision: amp.FP16, lossScaling: true, reason: autoReason, warnings: []string{cpuWarn}},
		{name: "cuda:0 is the 1080 Ti, as nvidia-smi shows it", inv: nvml, req: Request{Device: MustSpec("cuda:0"), Precision: amp.FP16, AllowCPUFallback: true},
			uuids: []string{uuid1080}, precision: amp.FP16, lossScaling: true,
			reason: "pinned cuda:0 (nvidia-smi index 0): " + label1080, warnings: []string{cpuWarn, warn61}},
		{name: "by UUID prefix", inv: nvml, req: Request{Device: MustSpec("gpu-8F2A"), AllowCPUFallback: true},
			uuids: []string{uuidTitan}, precision: amp.FP32, reason: "pinned by UUID gpu-8F2A: " + labelTi, warnings: []string{cpuWarn}},
		{name: "by full UUID", inv: nvml, req: Request{Device: MustSpec(uuid1080), AllowCPUFallback: true},
			uuids: []string{uuid1080}, precision: amp.FP32, reason: "pinned by UUID " + uuid1080 + ": " + label1080, warnings: []string{cpuWarn}},
		{name: "by short PCI bus id", inv: nvml, req: Request{Device: MustSpec("02:00.0"), AllowCPUFallback: true},
			uuids: []string{uuidTitan}, precision: amp.FP32, reason: "pinned by PCI bus id 02:00.0: " + labelTi, warnings: []string{cpuWarn}},
		{name: "by lspci-style PCI bus id", inv: smi, req: Request{Device: MustSpec("0000:01:00.0"), AllowCPUFallback: true},
			uuids: []string{uuid1080}, precision: amp.FP32, reason: "pinned by PCI bus id 0000:01:00.0: " + label1080, warnings: []string{cpuWarn}},
		{name: "both, precision must hold on each", inv: nvml, req: Request{Devices: []Spec{MustSpec("cuda:1"), MustSpec("cuda:0")}, Precision: amp.BF16, PrecisionFallback: true, AllowCPUFallback: true},
			uuids: []string{uuidTitan, uuid1080}, precision: amp.FP16, lossScaling: true,
			reason:   "pinned cuda:1 (nvidia-smi index 1): " + labelTi + "; cuda:0 (nvidia-smi index 0): " + label1080,
			warnings: []string{cpuWarn, "bf16 needs compute capability 8.0 or newer, but " + labelTi + " has 7.5, " + label1080 + " has 6.1: using fp16 with loss scaling instead (precision_fallback)", warn61}},
		{name: "cpu supports bf16", inv: nvml, req: Request{Device: MustSpec("CPU"), Precision: amp.BF16},
			precision: amp.BF16, reason: "device: cpu"},
		{name: "pinned GPU without allow_cpu_fallback is refused", inv: nvml, req: Request{Device: MustSpec("cuda:1")},
			wantErr: `device "cuda:1" resolves to ` + labelTi + ", but compute.device: cpu computes on the CPU; " +
				"set allow_cpu_fallback: true to run on the CPU anyway, or device: cpu"},
		{name: "several pinned without allow_cpu_fallback", inv: nvml, req: Request{Devices: []Spec{MustSpec("cuda:0"), MustSpec("cuda:1")}},
			wantErr: `devices ["cuda:0", "cuda:1"] resolves to ` + label1080 + ", " + labelTi + ", but compute.device: cpu computes on the CPU; " +
				"set allow_cpu_fallback: true to run on the CPU anyway, or device: cpu"},
		{name: "nonexistent index lists the GPUs", inv: nvml, req: Request{Device: MustSpec("cuda:2"), AllowCPUFallback: true},
			wantErr: `device "cuda:2" not found: no GPU has nvidia-smi index 2; the GPUs here, in nvidia-smi order:` + listTitan},
		{name: "nonexistent UUID lists the GPUs", inv: nvml, req: Request{Device: MustSpec("GPU-deadbeef")},
			wantErr: `device "GPU-deadbeef" not found: no GPU has a UUID starting with GPU-deadbeef; the GPUs here, in nvidia-smi order:` + listTitan},
		{name: "nonexistent PCI bus id lists the GPUs", inv: nvml, req: Request{Device: MustSpec("0000:03:00.0")},
			wantErr: `device "0000:03:00.0" not found: no GPU has PCI bus id 0000:03:00.0; the GPUs here, in nvidia-smi order:` + listTitan},
		{name: "memory refusal with the figures", inv: nvml, req: Request{Device: MustSpec("01:00.0"), MinFreeMemory: 12 * gib, AllowCPUFallback: true},
			wantErr: `device "01:00.0" refused: ` + label1080 + " has 10.7 GiB free, needs at least 12.0 GiB (min_free_memory)"},
		{name: "memory refusal by the run's estimate", inv: nvml, req: Request{Device: MustSpec("cuda:1"), MinFreeMemory: 1 * gib, NeedMemory: 30 * gib, AllowCPUFallback: true},
			wantErr: `device "cuda:1" refused: ` + labelTi + " has 23.6 GiB free, needs at least 30.0 GiB (the run's estimated need)"},
		{name: "auto skips a card that is too small", inv: nvml, req: Request{NeedMemory: 8 * gib, Policy: "FREE"},
			uuids: []string{uuidTitan}, precision: amp.FP32, reason: "auto: most free VRAM (23.6 GiB) of 2 eligible GPUs: " + labelTi, warnings: []string{cpuWarn}},
		{name: "auto with no card big enough takes the CPU", inv: nvml, req: Request{MinFreeMemory: 30 * gib},
			precision: amp.FP32, reason: "auto: no eligible GPU, using CPU: " + label1080 + " has 10.7 GiB free, needs at least 30.0 GiB (min_free_memory); " +
				labelTi + " has 23.6 GiB free, needs at least 30.0 GiB (min_free_memory)"},
	})
}

func TestSelectEightGPUs(t *testing.T) {
	inv := inventoryFromSMI(t, "eight_gpu.smi.csv")
	runSelectCases(t, []selectCase{
		{name: "total: the A6000 with the most free", inv: inv, req: Request{Policy: PolicyTotal},
			uuids: []string{uuid8[1]}, precision: amp.FP32, warnings: []string{cpuWarn},
			reason: "auto: most total VRAM (48.0 GiB) of 8 eligible GPUs: " + a6000(1) + " (tie broken by free VRAM: 20.0 GiB)"},
		{name: "free: an idle 3090", inv: inv, req: Request{Policy: PolicyFree},
			uuids: []string{uuid8[6]}, precision: amp.FP32, warnings: []string{cpuWarn},
			reason: "auto: most free VRAM (23.6 GiB) of 8 eligible GPUs: " + r3090(6) + " (tie broken by lower index)"},
		{name: "min_free_memory passes over the busy A6000s", inv: inv, req: Request{MinFreeMemory: 21 * gib, Precision: amp.BF16},
			uuids: []string{uuid8[6]}, precision: amp.BF16, warnings: []string{cpuWarn},
			reason: "auto: most total VRAM (24.0 GiB) of 3 eligible GPUs: " + r3090(6) + " (tie broken by lower index); passed over: " +
				a6000(0) + " has 1.2 GiB free, needs at least 21.0 GiB (min_free_memory); " +
				a6000(1) + " has 20.0 GiB free, needs at least 21.0 GiB (min_free_memory); " +
				a6000(2) + " has 7.8 GiB free, needs at least 21.0 GiB (min_free_memory); " +
				a6000(3) + " has 512.0 MiB free, needs at least 21.0 GiB (min_free_memory); " +
				r3090(5) + " has 2.9 GiB free, needs at least 21.0 GiB (min_free_memory)"},
		{name: "two pinned GPUs", inv: inv, req: Request{Devices: []Spec{MustSpec("cuda:4"), MustSpec("GPU-e2f0")}, NeedMemory: 20 * gib, AllowCPUFallback: true},
			uuids: []string{uuid8[4], uuid8[6]}, precision: amp.FP32, warnings: []string{cpuWarn},
			reason: "pinned cuda:4 (nvidia-smi index 4): " + r3090(4) + "; by UUID GPU-e2f0: " + r3090(6)},
		{name: "a busy one among pinned GPUs is refused", inv: inv, req: Request{Devices: []Spec{MustSpec("cuda:4"), MustSpec("cuda:5")}, NeedMemory: 20 * gib, AllowCPUFallback: true},
			wantErr: `device "cuda:5" refused: ` + r3090(5) + " has 2.9 GiB free, needs at least 20.0 GiB (the run's estimated need)"},
		{name: "the same GPU twice", inv: inv, req: Request{Devices: []Spec{MustSpec("cuda:4"), MustSpec("B1:00.0"), MustSpec("GPU-5be9")}, AllowCPUFallback: true},
			wantErr: "devices lists " + r3090(4) + " twice"},
		{name: "ambiguous UUID prefix lists the matches", inv: inv, req: Request{Device: MustSpec("GPU-8f2"), AllowCPUFallback: true},
			wantErr: `device "GPU-8f2" is ambiguous: it begins 2 UUIDs; give more of it:` +
				"\n  1  NVIDIA RTX A6000  " + uuid8[1] + "  00000000:1C:00.0  48.0 GiB total, 20.0 GiB free" +
				"\n  2  NVIDIA RTX A6000  " + uuid8[2] + "  00000000:3D:00.0  48.0 GiB total, 7.8 GiB free"},
		{name: "unique prefix", inv: inv, req: Request{Device: MustSpec("GPU-8f2b"), AllowCPUFallback: true},
			uuids: []string{uuid8[2]}, precision: amp.FP32, warnings: []string{cpuWarn}, reason: "pinned by UUID GPU-8f2b: " + a6000(2)},
	})
}

func TestSelectCUDAVisibleDevices(t *testing.T) {
	inv := inventoryFromSMI(t, "eight_gpu.smi.csv")
	titan := inventoryFromNVML(t, "titan_1080ti.nvml.json")
	cvd := func(v string) Request {
		return Request{CUDAVisibleDevices: v, CUDAVisibleSet: true, CUDADeviceOrder: "PCI_BUS_ID"}
	}
	indicesWarn := func(v string) string {
		return `CUDA_VISIBLE_DEVICES="` + v + `" uses indices, read here in nvidia-smi (PCI bus) order; CUDA_DEVICE_ORDER is not PCI_BUS_ID, ` +
			"so other CUDA programs started from this environment count fastest-first and may mean other GPUs: list UUIDs instead"
	}
	pinHidden := cvd("0")
	pinHidden.Device, pinHidden.AllowCPUFallback = MustSpec("cuda:1"), true
	pinVisible := cvd("1")
	pinVisible.Device, pinVisible.AllowCPUFallback = MustSpec("cuda:1"), true
	fastestFirst := cvd("5,4,0")
	fastestFirst.Policy, fastestFirst.CUDADeviceOrder = PolicyFree, ""
	runSelectCases(t, []selectCase{
		{name: "a full UUID and a prefix", inv: inv, req: cvd("GPU-c04d7f18-6e5d-4c3b-a291-8f7e6d5c4b04,GPU-5be9"),
			uuids: []string{uuid8[3]}, precision: amp.FP32, warnings: []string{cpuWarn},
			reason: "auto: most total VRAM (48.0 GiB) of 2 eligible GPUs: " + a6000(3) + `; CUDA_VISIBLE_DEVICES="GPU-c04d7f18-6e5d-4c3b-a291-8f7e6d5c4b04,GPU-5be9" leaves 2 of 8 GPUs visible`},
		{name: "an unknown UUID truncates the list", inv: inv, req: cvd("GPU-8f2a,GPU-zz,4"),
			uuids: []string{uuid8[1]}, precision: amp.FP32,
			warnings: []string{cpuWarn, `CUDA_VISIBLE_DEVICES="GPU-8f2a,GPU-zz,4": entry 2 "GPU-zz" matches no device, so CUDA ignores it and every entry after it`},
			reason:   "auto: most total VRAM (48.0 GiB) of 1 eligible GPU: " + a6000(1) + `; CUDA_VISIBLE_DEVICES="GPU-8f2a,GPU-zz,4" leaves 1 of 8 GPUs visible`},
		{name: "an ambiguous prefix first hides everything", inv: inv, req: cvd("GPU-8f2,4"),
			precision: amp.FP32, reason: `auto: CUDA_VISIBLE_DEVICES="GPU-8f2,4" hides all 8 GPUs, using CPU`,
			warnings: []string{`CUDA_VISIBLE_DEVICES="GPU-8f2,4": entry 1 "GPU-8f2" is ambiguous (a prefix of ` + a6000(1) + ", " + a6000(2) + "), so CUDA ignores it and every entry after it"}},
		{name: "an index out of range truncates", inv: inv, req: cvd("4,9,5"),
			uuids: []string{uuid8[4]}, precision: amp.FP32,
			warnings: []string{cpuWarn, `CUDA_VISIBLE_DEVICES="4,9,5": entry 2 "9" is out of range (8 GPUs), so CUDA ignores it and every entry after it`},
			reason:   "auto: most total VRAM (24.0 GiB) of 1 eligible GPU: " + r3090(4) + `; CUDA_VISIBLE_DEVICES="4,9,5" leaves 1 of 8 GPUs visible`},
		{name: "a repeat truncates", inv: inv, req: cvd("6,GPU-e2f0,0"),
			uuids: []string{uuid8[6]}, precision: amp.FP32,
			warnings: []string{cpuWarn, `CUDA_VISIBLE_DEVICES="6,GPU-e2f0,0": entry 2 "GPU-e2f0" repeats an earlier entry (` + r3090(6) + "), so CUDA ignores it and every entry after it"},
			reason:   "auto: most total VRAM (24.0 GiB) of 1 eligible GPU: " + r3090(6) + `; CUDA_VISIBLE_DEVICES="6,GPU-e2f0,0" leaves 1 of 8 GPUs visible`},
		{name: "-1 hides everything", inv: inv, req: cvd("-1"),
			precision: amp.FP32, reason: `auto: CUDA_VISIBLE_DEVICES="-1" hides all 8 GPUs, using CPU`,
			warnings: []string{`CUDA_VISIBLE_DEVICES="-1": entry 1 "-1" is not an index, GPU-… UUID or MIG-… id, so CUDA ignores it and every entry after it`}},
		{name: "empty hides everything", inv: inv, req: cvd(""),
			precision: amp.FP32, reason: `auto: CUDA_VISIBLE_DEVICES="" hides all 8 GPUs, using CPU`},
		{name: "indices in PCI order, warned about without PCI_BUS_ID", inv: inv, req: fastestFirst,
			uuids: []string{uuid8[4]}, precision: amp.FP32, warnings: []string{cpuWarn, indicesWarn("5,4,0")},
			reason: "auto: most free VRAM (23.5 GiB) of 3 eligible GPUs: " + r3090(4) + `; CUDA_VISIBLE_DEVICES="5,4,0" leaves 3 of 8 GPUs visible`},
		{name: "cuda:N stays the nvidia-smi index", inv: titan, req: pinVisible,
			uuids: []string{uuidTitan}, precision: amp.FP32, warnings: []string{cpuWarn},
			reason: "pinned cuda:1 (nvidia-smi index 1): " + labelTi + `; CUDA_VISIBLE_DEVICES="1" only limits the choice, indices stay nvidia-smi's`},
		{name: "a pinned GPU hidden by CUDA_VISIBLE_DEVICES", inv: titan, req: pinHidden,
			wantErr: `device "cuda:1" is ` + labelTi + `, but CUDA_VISIBLE_DEVICES="0" hides it (visible: ` + label1080 + "); cuda:N always counts in nvidia-smi order, not in CUDA_VISIBLE_DEVICES order"},
	})
}

func TestSelectMIG(t *testing.T) {
	inv := inventoryFromNVML(t, "mig_a100.nvml.json")
	smi := inventoryFromSMI(t, "mig_a100.smi.csv")
	labelMIG0 := "GPU 0 (NVIDIA A100-SXM4-40GB, " + uuidMIG0 + ")"
	labelA100 := "GPU 1 (NVIDIA A100-SXM4-40GB, " + uuidA100 + ")"
	migOnly := Request{CUDAVisibleDevices: "MIG-4f8a", CUDAVisibleSet: true}
	runSelectCases(t, []selectCase{
		{name: "auto passes over the MIG-enabled card", inv: inv, req: Request{Precision: amp.BF16},
			uuids: []string{uuidA100}, precision: amp.BF16, warnings: []string{cpuWarn},
			reason: "auto: most total VRAM (40.0 GiB) of 1 eligible GPU: " + labelA100 + "; passed over: " + labelMIG0 + " has MIG enabled (pin one of its MIG-… instances)"},
		{name: "whole MIG-enabled GPU by index", inv: inv, req: Request{Device: MustSpec("cuda:0"), AllowCPUFallback: true},
			wantErr: `device "cuda:0" is ` + labelMIG0 + ", which has MIG enabled: CUDA cannot use it as a whole GPU; pin one of its MIG instances:" +
				"\n  " + uuid3g + "  NVIDIA A100-SXM4-40GB MIG 3g.20gb  19.6 GiB total, 19.5 GiB free" +
				"\n  " + uuid2g + "  NVIDIA A100-SXM4-40GB MIG 2g.10gb  9.8 GiB total, 9.7 GiB free"},
		{name: "whole MIG-enabled GPU by UUID, nvidia-smi", inv: smi, req: Request{Device: MustSpec("GPU-b7e4"), AllowCPUFallback: true},
			wantErr: `device "GPU-b7e4" is ` + labelMIG0 + ", which has MIG enabled: CUDA cannot use it as a whole GPU; pin one of its MIG instances (MIG-…, listed by nvidia-smi -L) or disable MIG"},
		{name: "a MIG instance", inv: inv, req: Request{Device: MustSpec("MIG-9b3c"), Precision: amp.BF16, AllowCPUFallback: true},
			uuids: []string{uuid2g}, precision: amp.BF16, warnings: []string{cpuWarn},
			reason: "pinned by MIG id MIG-9b3c: MIG instance " + uuid2g + " (NVIDIA A100-SXM4-40GB MIG 2g.10gb) on GPU 0"},
		{name: "a MIG instance too small", inv: inv, req: Request{Device: MustSpec("MIG-9b3c"), MinFreeMemory: 10 * gib, AllowCPUFallback: true},
			wantErr: `device "MIG-9b3c" refused: MIG instance ` + uuid2g + " (NVIDIA A100-SXM4-40GB MIG 2g.10gb) on GPU 0 has 9.7 GiB free, needs at least 10.0 GiB (min_free_memory)"},
		{name: "two MIG instances", inv: inv, req: Request{Devices: []Spec{MustSpec("MIG-9b3c"), MustSpec("MIG-4f8a")}, AllowCPUFallback: true},
			wantErr: "devices lists MIG instance " + uuid2g + " (NVIDIA A100-SXM4-40GB MIG 2g.10gb) on GPU 0 with other devices: a CUDA process can use only one MIG instance"},
		{name: "MIG instance unknown to the nvidia-smi fallback", inv: smi, req: Request{Device: MustSpec("MIG-9b3c"), AllowCPUFallback: true},
			wantErr: `device "MIG-9b3c" not found: no GPU has a MIG instance with a UUID starting with MIG-9b3c (the nvidia-smi fallback does not list MIG instances); the GPUs here, in nvidia-smi order:` +
				"\n  0  NVIDIA A100-SXM4-40GB  " + uuidMIG0 + "  00000000:07:00.0  40.0 GiB total, 39.4 GiB free" +
				"\n  1  NVIDIA A100-SXM4-40GB  " + uuidA100 + "  00000000:0F:00.0  40.0 GiB total, 28.0 GiB free"},
		{name: "CUDA_VISIBLE_DEVICES naming a MIG instance: auto takes it", inv: inv, req: migOnly,
			uuids: []string{uuid3g}, precision: amp.FP32, warnings: []string{cpuWarn},
			reason: "auto: most total VRAM (19.6 GiB) of 1 eligible GPU: MIG instance " + uuid3g + ` (NVIDIA A100-SXM4-40GB MIG 3g.20gb) on GPU 0; CUDA_VISIBLE_DEVICES="MIG-4f8a" leaves 1 of 2 GPUs visible`},
	})
}

func TestSelectNoGPU(t *testing.T) {
	inv := Inventory{Source: "none", Note: noGPUNote}
	runSelectCases(t, []selectCase{
		{name: "auto takes the CPU and says why", inv: inv, req: Request{Precision: amp.FP16},
			precision: amp.FP16, lossScaling: true, reason: "auto: " + noGPUNote},
		{name: "a pinned GPU is an error", inv: inv, req: Request{Device: MustSpec("cuda:0"), AllowCPUFallback: true},
			wantErr: `device "cuda:0" not found: this host has no GPU (` + noGPUNote + ")"},
	})
}

func TestSelectCapability(t *testing.T) {
	old := inventoryFromSMI(t, "old_driver.smi.csv")
	mixed := Inventory{Source: "nvml", GPUs: []GPU{
		{Index: 0, UUID: "GPU-a0", Name: "Tesla V100-SXM2-32GB", MemoryTotal: 32 * gib, MemoryFree: 31 * gib, ComputeMajor: 7, UtilizationGPU: -1},
		{Index: 1, UUID: "GPU-a1", Name: "NVIDIA A10", MemoryTotal: 24 * gib, MemoryFree: 23 * gib, ComputeMajor: 8, ComputeMinor: 6, UtilizationGPU: -1},
		{Index: 2, UUID: "GPU-a2", Name: "Tesla P100-PCIE-16GB", MemoryTotal: 16 * gib, MemoryFree: 15 * gib, ComputeMajor: 6, UtilizationGPU: -1},
	}}
	oldTi := "GPU 1 (TITAN RTX, " + uuidTitan + ")"
	runSelectCases(t, []selectCase{
		{name: "bf16 refused names the GPU that has it", inv: mixed, req: Request{Precision: amp.BF16},
			wantErr: "precision bf16 needs compute capability 8.0 or newer (Ampere), but GPU 0 (Tesla V100-SXM2-32GB, GPU-a0) has 7.0; " +
				"set precision: fp16 (with loss scaling) or fp32, or precision_fallback: true to fall back to fp16, or pin a GPU that has bf16: GPU 1 (NVIDIA A10, GPU-a1)"},
		{name: "fp16 on 6.0: no tensor cores", inv: mixed, req: Request{Device: MustSpec("cuda:2"), Precision: amp.FP16, AllowCPUFallback: true},
			uuids: []string{"GPU-a2"}, precision: amp.FP16, lossScaling: true,
			reason:   "pinned cuda:2 (nvidia-smi index 2): GPU 2 (Tesla P100-PCIE-16GB, GPU-a2)",
			warnings: []string{cpuWarn, "GPU 2 (Tesla P100-PCIE-16GB, GPU-a2) has compute capability 6.0: no tensor cores (7.0 or newer), so fp16 mixed precision gains little there"}},
		{name: "unknown capability: bf16 kept, with a warning", inv: old, req: Request{Precision: amp.BF16},
			uuids: []string{uuidTitan}, precision: amp.BF16, reason: "auto: most total VRAM (23.7 GiB) of 2 eligible GPUs: " + oldTi,
			warnings: []string{cpuWarn, oldTi + ": compute capability unknown (the driver does not report it), so bf16 support (8.0 or newer) is not checked"}},
		{name: "unknown capability: fp16 kept, with a warning", inv: old, req: Request{Precision: amp.FP16},
			uuids: []string{uuidTitan}, precision: amp.FP16, lossScaling: true, reason: "auto: most total VRAM (23.7 GiB) of 2 eligible GPUs: " + oldTi,
			warnings: []string{cpuWarn, oldTi + ": compute capability unknown (the driver does not report it), so fp16 tensor-core support (7.0 or newer) is not checked"}},
	})
}

func TestSelectBadRequest(t *testing.T) {
	inv := inventoryFromNVML(t, "titan_1080ti.nvml.json")
	runSelectCases(t, []selectCase{
		{name: "device and devices", inv: inv, req: Request{Device: MustSpec("cuda:0"), Devices: []Spec{MustSpec("cuda:1")}},
			wantErr: `device "cuda:0" and devices ["cuda:1"] are both set: use one`},
		{name: "auto in devices", inv: inv, req: Request{Devices: []Spec{MustSpec("cuda:0"), MustSpec("auto")}},
			wantErr: `devices[1] is "auto": devices lists GPUs only; use device: auto instead`},
		{name: "policy", inv: inv, req: Request{Policy: "fastest"}, wantErr: `unknown device selection policy "fastest" (want "total" or "free")`},
	})
}

// A malformed device is refused when the recipe is read, by ParseSpec.
func TestParseSpecErrors(t *testing.T) {
	syntax := "want auto, cpu, cuda:N (nvidia-smi index), GPU-<uuid or unique prefix>, MIG-<uuid> or a PCI bus id such as 0000:01:00.0"
	for in, want := range map[string]string{
		"1":       `device "1": write cuda:1 for the GPU that nvidia-smi shows as 1`,
		"cuda":    `device "cuda": ` + syntax,
		"cuda:-1": `device "cuda:-1": want cuda:N with N the GPU's index as nvidia-smi shows it`,
		"GPU-":    `device "GPU-": ` + syntax,
		"titan":   `device "titan": ` + syntax,
	} {
		if _, err := ParseSpec(in); errString(err) != want {
			t.Errorf("ParseSpec(%q): %v, want %q", in, err, want)
		}
	}
	for in, want := range map[string]string{"": "auto", " AUTO ": "auto", "cpu": "cpu", "cuda:1": "cuda:1", "GPU-8f2a": "GPU-8f2a", "01:00.0": "01:00.0"} {
		var s Spec
		b, _ := MustSpec(in).MarshalText()
		if err := s.UnmarshalText(b); err != nil || s.String() != want || string(b) != want {
			t.Errorf("%q round trip: %q %v", in, b, err)
		}
	}
}

// TestSelectKeepsInventory: the chosen GPU is the inventory's own record,
// and Select leaves the inventory as it was.
func TestSelectKeepsInventory(t *testing.T) {
	inv := inventoryFromNVML(t, "mig_a100.nvml.json")
	before := inventoryFromNVML(t, "mig_a100.nvml.json")
	sel, err := Select(inv, Request{Device: MustSpec("MIG-4f8a"), AllowCPUFallback: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sel.GPUs, []GPU{migHost[0].MIGDevices[0]}) {
		t.Errorf("GPUs %+v", sel.GPUs)
	}
	if !reflect.DeepEqual(inv, before) {
		t.Errorf("Select changed the inventory")
	}
}

func TestRank(t *testing.T) {
	gpus := eightHost()
	order := func(r []GPU) []int {
		var idx []int
		for _, g := range r {
			idx = append(idx, g.Index)
		}
		return idx
	}
	tests := []struct {
		policy Policy
		want   []int
	}{
		{PolicyTotal, []int{1, 2, 0, 3, 6, 7, 4, 5}},
		{PolicyFree, []int{6, 7, 4, 1, 2, 5, 0, 3}},
		{"", []int{1, 2, 0, 3, 6, 7, 4, 5}},
	}
	for _, tt := range tests {
		if got := order(Rank(gpus, tt.policy)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Rank(%q) = %v, want %v", tt.policy, got, tt.want)
		}
	}
	if got := order(gpus); !reflect.DeepEqual(got, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("Rank reordered its input: %v", got)
	}
}

func TestParsePCI(t *testing.T) {
	tests := []struct {
		in   string
		want pciAddr
		ok   bool
	}{
		{"00000000:01:00.0", pciAddr{0, 1, 0, 0}, true},
		{"0000:3b:00.0", pciAddr{0, 0x3b, 0, 0}, true},
		{"3B:00.0", pciAddr{0, 0x3b, 0, 0}, true},
		{"0001:b1:1f.7", pciAddr{1, 0xb1, 0x1f, 7}, true},
		{"01:00", pciAddr{}, false},
		{"01:20.0", pciAddr{}, false},
		{"01:00.8", pciAddr{}, false},
		{"100:00.0", pciAddr{}, false},
		{"x:01:00.0", pciAddr{}, false},
		{"cuda:0", pciAddr{}, false},
	}
	for _, tt := range tests {
		got, ok := parsePCI(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parsePCI(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestApplyCUDAVisible checks the visible list itself: CUDA renumbers the
// devices in list order.
func TestApplyCUDAVisible(t *testing.T) {
	all := eightHost()
	tests := []struct {
		value   string
		want    []int // nvidia-smi indices, in CUDA's new order
		numeric bool
	}{
		{"5,4,0", []int{5, 4, 0}, true},
		{" 7 , GPU-1a7e ", []int{7, 0}, true},
		{"GPU-49c6b2e5-5c4d-4e3f-9a2b-5c4d3e2f1a08,GPU-8F2B", []int{7, 2}, false},
		{"3,,4", []int{3}, true},
		{"GPU-8f2b,GPU-8f2", []int{2}, false},
		{"8", nil, false},
		{"", nil, false},
		{"MIG-4f8a", nil, false},
	}
	for _, tt := range tests {
		vis, numeric, _ := applyCUDAVisible(all, nil, tt.value)
		var got []int
		for _, g := range vis {
			got = append(got, g.Index)
		}
		if !reflect.DeepEqual(got, tt.want) || numeric != tt.numeric {
			t.Errorf("%q: visible %v numeric %v, want %v %v", tt.value, got, numeric, tt.want, tt.numeric)
		}
	}
}

// With a GPU engine (compute.device auto or gpu) a selected GPU is left to
// the engine: compute "gpu", no compute-on-CPU warning, and a pin without
// allow_cpu_fallback is not refused here (the trainer refuses it if the
// engine cannot take the GPU); Pinned tells it whether to.
func TestSelectForGPUEngine(t *testing.T) {
	inv := inventoryFromNVML(t, "titan_1080ti.nvml.json")
	for _, tc := range []struct {
		name   string
		req    Request
		pinned bool
	}{
		{"auto", Request{GPUEngine: true}, false},
		{"pinned without CPU fallback", Request{Device: MustSpec("cuda:1"), GPUEngine: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Select(inv, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if sel.Compute != "gpu" || sel.Pinned != tc.pinned || len(sel.GPUs) != 1 {
				t.Errorf("compute %q, pinned %v, %d GPUs; want gpu, %v, 1", sel.Compute, sel.Pinned, len(sel.GPUs), tc.pinned)
			}
			for _, w := range sel.Warnings {
				if strings.Contains(w, "compute runs on the CPU") {
					t.Errorf("warning %q with a GPU engine", w)
				}
			}
		})
	}
}

// auto takes one GPU per rank of the host, best first, and no more than
// are eligible.
func TestSelectCountForRanks(t *testing.T) {
	inv := inventoryFromNVML(t, "titan_1080ti.nvml.json")
	for _, tc := range []struct{ count, want int }{{0, 1}, {1, 1}, {2, 2}, {5, 2}} {
		sel, err := Select(inv, Request{Count: tc.count, GPUEngine: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(sel.GPUs) != tc.want {
			t.Errorf("count %d: %d GPUs, want %d", tc.count, len(sel.GPUs), tc.want)
		}
		if len(sel.GPUs) == 2 && (sel.GPUs[0].Name != "NVIDIA TITAN RTX" || !strings.Contains(sel.Reason, "2 GPUs for")) {
			t.Errorf("count %d: order %s, %s; reason %q", tc.count, sel.GPUs[0].Name, sel.GPUs[1].Name, sel.Reason)
		}
	}
}
