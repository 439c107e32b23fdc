package device

import (
	"context"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

const (
	uuid1080  = "GPU-3c8f0b2e-5d1a-6b7c-9e0f-1a2b3c4d5e6f"
	uuidTitan = "GPU-8f2a6d1c-4b3e-7a9f-2c5d-6e7f8091a2b3"
	uuidMIG0  = "GPU-b7e4d2a1-9c3f-4e5d-a6b7-c8d9e0f1a2b3"
	uuidA100  = "GPU-0d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"
	uuid3g    = "MIG-4f8a1d2e-6b5c-5a4d-9e8f-1a2b3c4d5e6f"
	uuid2g    = "MIG-9b3c7e5f-2a1d-5c4b-8f7e-6d5c4b3a2f1e"
	mib       = 1 << 20
	gib       = 1 << 30
)

// The seed host: the 1080 Ti is on the lower PCI bus id, so it is index 0.
var titanHost = []GPU{
	{Index: 0, UUID: uuid1080, PCIBusID: "00000000:01:00.0", Name: "NVIDIA GeForce GTX 1080 Ti",
		MemoryTotal: 11264 * mib, MemoryFree: 11003 * mib, ComputeMajor: 6, ComputeMinor: 1, UtilizationGPU: 2},
	{Index: 1, UUID: uuidTitan, PCIBusID: "00000000:02:00.0", Name: "NVIDIA TITAN RTX",
		MemoryTotal: 24576 * mib, MemoryFree: 24201 * mib, ComputeMajor: 7, ComputeMinor: 5, UtilizationGPU: 0},
}

var migHost = []GPU{
	{Index: 0, UUID: uuidMIG0, PCIBusID: "00000000:07:00.0", Name: "NVIDIA A100-SXM4-40GB",
		MemoryTotal: 40 * gib, MemoryFree: 40354 * mib, ComputeMajor: 8, ComputeMinor: 0, UtilizationGPU: -1, MIGMode: "enabled",
		MIGDevices: []GPU{
			{Index: 0, UUID: uuid3g, PCIBusID: "00000000:07:00.0", Name: "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
				MemoryTotal: 20096 * mib, MemoryFree: 19993 * mib, ComputeMajor: 8, ComputeMinor: 0, UtilizationGPU: -1, MIGMode: "enabled"},
			{Index: 0, UUID: uuid2g, PCIBusID: "00000000:07:00.0", Name: "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
				MemoryTotal: 9984 * mib, MemoryFree: 9920 * mib, ComputeMajor: 8, ComputeMinor: 0, UtilizationGPU: -1, MIGMode: "enabled"},
		}},
	{Index: 1, UUID: uuidA100, PCIBusID: "00000000:0F:00.0", Name: "NVIDIA A100-SXM4-40GB",
		MemoryTotal: 40 * gib, MemoryFree: 28 * gib, ComputeMajor: 8, ComputeMinor: 0, UtilizationGPU: 12, MIGMode: "disabled"},
}

// eightHost is eight_gpu.smi.csv: four busy A6000s, then four RTX 3090s of
// which two are idle with the same free memory.
func eightHost() []GPU {
	rows := []struct {
		uuid, bus, name string
		total, free     uint64
		util            int
	}{
		{"GPU-1a7e4c2d-0b9f-4e21-8d3c-5f6a7b8c9d01", "00000000:1B:00.0", "NVIDIA RTX A6000", 49140, 1200, 98},
		{"GPU-8f2a91b3-7c4d-4a5e-9f10-2b3c4d5e6f02", "00000000:1C:00.0", "NVIDIA RTX A6000", 49140, 20480, 45},
		{"GPU-8f2b5e07-1d2c-4b3a-8e9f-0a1b2c3d4e03", "00000000:3D:00.0", "NVIDIA RTX A6000", 49140, 8000, 100},
		{"GPU-c04d7f18-6e5d-4c3b-a291-8f7e6d5c4b04", "00000000:3E:00.0", "NVIDIA RTX A6000", 49140, 512, 99},
		{"GPU-5be93a60-2f1e-4d0c-b8a7-9c8d7e6f5a05", "00000000:88:00.0", "NVIDIA GeForce RTX 3090", 24576, 24100, 0},
		{"GPU-d7311f4c-3a2b-4c1d-9e8f-7a6b5c4d3e06", "00000000:89:00.0", "NVIDIA GeForce RTX 3090", 24576, 3000, 87},
		{"GPU-e2f08a9d-4b3c-4d2e-8f1a-6b5c4d3e2f07", "00000000:B1:00.0", "NVIDIA GeForce RTX 3090", 24576, 24200, 0},
		{"GPU-49c6b2e5-5c4d-4e3f-9a2b-5c4d3e2f1a08", "00000000:B2:00.0", "NVIDIA GeForce RTX 3090", 24576, 24200, -1},
	}
	gpus := make([]GPU, len(rows))
	for i, r := range rows {
		gpus[i] = GPU{Index: i, UUID: r.uuid, PCIBusID: r.bus, Name: r.name, MemoryTotal: r.total * mib, MemoryFree: r.free * mib,
			ComputeMajor: 8, ComputeMinor: 6, UtilizationGPU: r.util}
	}
	return gpus
}

func TestParseNvidiaSMI(t *testing.T) {
	oldDriver := []GPU{
		{Index: 0, UUID: uuid1080, PCIBusID: "00000000:01:00.0", Name: "GeForce GTX 1080 Ti",
			MemoryTotal: 11178 * mib, MemoryFree: 10914 * mib, UtilizationGPU: -1},
		{Index: 1, UUID: uuidTitan, PCIBusID: "00000000:02:00.0", Name: "TITAN RTX",
			MemoryTotal: 24220 * mib, MemoryFree: 23848 * mib, UtilizationGPU: 0},
	}
	migSMI := []GPU{migHost[0], migHost[1]}
	migSMI[0].MIGDevices = nil
	migSMI[0].MemoryTotal, migSMI[0].MemoryFree = 40960*mib, 40354*mib
	migSMI[1].MemoryFree = 28672 * mib

	tests := []struct {
		name    string
		csv     string
		want    []GPU
		wantErr string
	}{
		{name: "titan_1080ti.smi.csv", csv: readTestdata(t, "titan_1080ti.smi.csv"), want: titanHost},
		{name: "old driver without compute_cap", csv: readTestdata(t, "old_driver.smi.csv"), want: oldDriver},
		{name: "eight_gpu.smi.csv", csv: readTestdata(t, "eight_gpu.smi.csv"), want: eightHost()},
		{name: "mig_a100.smi.csv", csv: readTestdata(t, "mig_a100.smi.csv"), want: migSMI},
		{
			name: "units kept, N/A memory, columns in another order",
			csv: "uuid, index, name, pci.bus_id, memory.free [MiB], memory.total [MiB], compute_cap\n" +
				"GPU-aa, 0, Tesla T4, 00000000:3B:00.0, 15000 MiB, 15360 MiB, 7.5\n" +
				"GPU-bb, 1, Tesla T4, 00000000:5E:00.0, [N/A], [N/A], [N/A]\n",
			want: []GPU{
				{Index: 0, UUID: "GPU-aa", PCIBusID: "00000000:3B:00.0", Name: "Tesla T4", MemoryTotal: 15360 * mib, MemoryFree: 15000 * mib,
					ComputeMajor: 7, ComputeMinor: 5, UtilizationGPU: -1},
				{Index: 1, UUID: "GPU-bb", PCIBusID: "00000000:5E:00.0", Name: "Tesla T4", UtilizationGPU: -1},
			},
		},
		{
			name: "bad rows are reported, good rows kept",
			csv: "index, uuid, pci.bus_id, name, memory.total [MiB], memory.free [MiB]\n" +
				"0, GPU-aa, 00000000:01:00.0, Tesla T4, 15360, 15000\n" +
				"Unable to determine the device handle for GPU 00000000:02:00.0: GPU is lost\n" +
				"2, [N/A], 00000000:03:00.0, Tesla T4, 15360, 15000\n" +
				"3, GPU-dd, 00000000:04:00.0, Tesla T4, lots, 15000\n",
			want: []GPU{{Index: 0, UUID: "GPU-aa", PCIBusID: "00000000:01:00.0", Name: "Tesla T4", MemoryTotal: 15360 * mib, MemoryFree: 15000 * mib, UtilizationGPU: -1}},
			wantErr: "nvidia-smi line 3 has 1 of the header's 6 fields: \"Unable to determine the device handle for GPU 00000000:02:00.0: GPU is lost\"\n" +
				"nvidia-smi line 4: GPU 2: uuid is \"[N/A]\"\n" +
				"nvidia-smi line 5: GPU 3: memory.total \"lots\" is not a MiB count",
		},
		{
			name:    "noheader output is refused",
			csv:     "0, GPU-aa, 00000000:01:00.0, Tesla T4, 15360, 15000\n",
			wantErr: `nvidia-smi header "0,GPU-aa,00000000:01:00.0,Tesla T4,15360,15000" has no index column (the header line is required: use --format=csv,nounits, not noheader)`,
		},
		{name: "empty", csv: "", wantErr: "nvidia-smi output is empty"},
		{name: "header only", csv: "index, uuid, pci.bus_id, name, memory.total [MiB], memory.free [MiB]\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNvidiaSMI(tt.csv)
			if gotErr := errString(err); gotErr != tt.wantErr {
				t.Errorf("error:\n got %q\nwant %q", gotErr, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("GPUs:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestDiscoverNVML(t *testing.T) {
	flakyV100 := []GPU{
		{Index: 0, UUID: "GPU-11111111-2222-4333-8444-555555555555", PCIBusID: "00000000:15:00.0", Name: "Tesla V100-SXM2-16GB",
			MemoryTotal: 16 * gib, MemoryFree: 16890658816, ComputeMajor: 7, UtilizationGPU: 0},
		{Index: 2, UUID: "GPU-66666666-7777-4888-9999-aaaaaaaaaaaa", PCIBusID: "00000000:17:00.0", Name: "Tesla V100-SXM2-16GB",
			UtilizationGPU: 0},
	}
	tests := []struct {
		fixture string
		want    Inventory
	}{
		{"titan_1080ti.nvml.json", Inventory{GPUs: titanHost, Source: "nvml"}},
		{"mig_a100.nvml.json", Inventory{GPUs: migHost, Source: "nvml"}},
		{"flaky.nvml.json", Inventory{GPUs: flakyV100, Source: "nvml",
			Note: "GPU 1 left out: ERROR_GPU_IS_LOST; GPU 2 memory: ERROR_UNKNOWN"}},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			got := inventoryFromNVML(t, tt.fixture)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestDiscoverSources checks that NVML and nvidia-smi fixtures recorded on
// the same host give the same GPUs.
func TestDiscoverSources(t *testing.T) {
	nv := inventoryFromNVML(t, "titan_1080ti.nvml.json")
	smi := inventoryFromSMI(t, "titan_1080ti.smi.csv")
	if !reflect.DeepEqual(nv.GPUs, smi.GPUs) {
		t.Errorf("NVML and nvidia-smi disagree:\nnvml       %+v\nnvidia-smi %+v", nv.GPUs, smi.GPUs)
	}
	if want := "NVML unavailable (NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND)), read nvidia-smi instead"; smi.Note != want || smi.Source != "nvidia-smi" {
		t.Errorf("source %q note %q, want nvidia-smi and %q", smi.Source, smi.Note, want)
	}
}

func TestDiscoverFallback(t *testing.T) {
	const full = "nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,memory.total,memory.free,compute_cap,utilization.gpu,mig.mode.current --format=csv,nounits"
	const noCC = "nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,memory.total,memory.free,utilization.gpu,mig.mode.current --format=csv,nounits"
	const bare = "nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,memory.total,memory.free,utilization.gpu --format=csv,nounits"
	ccErr := readTestdata(t, "old_driver.compute_cap.err")
	tests := []struct {
		name      string
		smi       fakeSMI
		wantCalls []string
		want      Inventory
	}{
		{
			name:      "old driver: second query without compute_cap",
			smi:       fakeSMI{out: readTestdata(t, "old_driver.smi.csv"), reject: map[string]string{"compute_cap": ccErr}},
			wantCalls: []string{full, noCC},
			want: Inventory{Source: "nvidia-smi", Note: "NVML unavailable (NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND)), read nvidia-smi instead",
				GPUs: []GPU{
					{Index: 0, UUID: uuid1080, PCIBusID: "00000000:01:00.0", Name: "GeForce GTX 1080 Ti", MemoryTotal: 11178 * mib, MemoryFree: 10914 * mib, UtilizationGPU: -1},
					{Index: 1, UUID: uuidTitan, PCIBusID: "00000000:02:00.0", Name: "TITAN RTX", MemoryTotal: 24220 * mib, MemoryFree: 23848 * mib, UtilizationGPU: 0},
				}},
		},
		{
			name: "very old driver: third query without mig.mode.current",
			smi: fakeSMI{out: "index, uuid, pci.bus_id, name, memory.total [MiB], memory.free [MiB], utilization.gpu [%]\n0, GPU-aa, 0000:04:00.0, Tesla K80, 11441, 11380, 0\n",
				reject: map[string]string{"compute_cap": ccErr, "mig.mode.current": `Field "mig.mode.current" is not a valid field to query.`}},
			wantCalls: []string{full, noCC, bare},
			want: Inventory{Source: "nvidia-smi", Note: "NVML unavailable (NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND)), read nvidia-smi instead",
				GPUs: []GPU{{Index: 0, UUID: "GPU-aa", PCIBusID: "0000:04:00.0", Name: "Tesla K80", MemoryTotal: 11441 * mib, MemoryFree: 11380 * mib, UtilizationGPU: 0}}},
		},
		{
			name: "a complaint with exit status 0 still retries",
			smi: fakeSMI{out: readTestdata(t, "old_driver.smi.csv"), exitZero: true,
				reject: map[string]string{"compute_cap": ccErr}},
			wantCalls: []string{full, noCC},
			want: Inventory{Source: "nvidia-smi", Note: "NVML unavailable (NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND)), read nvidia-smi instead",
				GPUs: []GPU{
					{Index: 0, UUID: uuid1080, PCIBusID: "00000000:01:00.0", Name: "GeForce GTX 1080 Ti", MemoryTotal: 11178 * mib, MemoryFree: 10914 * mib, UtilizationGPU: -1},
					{Index: 1, UUID: uuidTitan, PCIBusID: "00000000:02:00.0", Name: "TITAN RTX", MemoryTotal: 24220 * mib, MemoryFree: 23848 * mib, UtilizationGPU: 0},
				}},
		},
		{
			name:      "every query refused",
			smi:       fakeSMI{reject: map[string]string{"memory.free": `Field "memory.free" is not a valid field to query.`}},
			wantCalls: []string{full, noCC, bare},
			want: Inventory{Source: "none", Note: "no GPU found, using CPU: NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND); " +
				`nvidia-smi: Field "memory.free" is not a valid field to query.`},
		},
		{
			name:      "driver not loaded: no retry",
			smi:       fakeSMI{reject: map[string]string{"memory.free": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n"}},
			wantCalls: []string{full},
			want: Inventory{Source: "none", Note: "no GPU found, using CPU: NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND); " +
				"nvidia-smi: exit status 2: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."},
		},
		{
			name:      "MIG enabled: the fallback says it cannot list instances",
			smi:       fakeSMI{out: readTestdata(t, "mig_a100.smi.csv")},
			wantCalls: []string{full},
			want: Inventory{Source: "nvidia-smi", GPUs: func() []GPU {
				g := inventoryFromSMI(t, "mig_a100.smi.csv").GPUs
				return g
			}(), Note: "NVML unavailable (NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND)), read nvidia-smi instead; " +
				"nvidia-smi does not list MIG instances: GPUs with MIG enabled cannot be pinned by MIG-… id"},
		},
		{
			name:      "no GPUs listed",
			smi:       fakeSMI{out: "index, uuid, pci.bus_id, name, memory.total [MiB], memory.free [MiB], compute_cap, utilization.gpu [%], mig.mode.current\n"},
			wantCalls: []string{full},
			want: Inventory{Source: "nvidia-smi", Note: "no GPU found, using CPU: nvidia-smi lists no devices; " +
				"NVML unavailable (NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND)), read nvidia-smi instead"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			smi := tt.smi
			got := discover(context.Background(), noNVML, smi.run)
			if !reflect.DeepEqual(smi.calls, tt.wantCalls) {
				t.Errorf("calls:\n got %q\nwant %q", smi.calls, tt.wantCalls)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDiscoverNeverFails(t *testing.T) {
	v100 := recordedNVML{Init: "SUCCESS", Devices: []recordedDevice{{UUID: "GPU-aa", Name: "Tesla V100", PCIBusID: "00000000:15:00.0",
		Memory: &recordedMemory{Total: 16 * gib, Free: 15 * gib}, ComputeCapability: []int{7, 0},
		Errors: map[string]string{"utilization": "PANIC", "mig_mode": "ERROR_NOT_SUPPORTED"}}}}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		open func() (nvmlLib, error)
		want Inventory
	}{
		{
			name: "no NVML, no nvidia-smi",
			ctx:  context.Background(), open: noNVML,
			want: Inventory{Source: "none", Note: "no GPU found, using CPU: NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND); nvidia-smi: not found in PATH"},
		},
		{
			name: "driver not loaded",
			ctx:  context.Background(), open: func() (nvmlLib, error) { return fakeNVML{recordedNVML{Init: "ERROR_DRIVER_NOT_LOADED"}}, nil },
			want: Inventory{Source: "none", Note: "no GPU found, using CPU: NVML: init: ERROR_DRIVER_NOT_LOADED; nvidia-smi: not found in PATH"},
		},
		{
			name: "NVML lists no devices",
			ctx:  context.Background(), open: func() (nvmlLib, error) { return fakeNVML{recordedNVML{Init: "SUCCESS"}}, nil },
			want: Inventory{Source: "nvml", Note: "no GPU found, using CPU: NVML lists no devices"},
		},
		{
			name: "device count fails",
			ctx:  context.Background(), open: func() (nvmlLib, error) { return fakeNVML{recordedNVML{Init: "SUCCESS", Count: "ERROR_UNKNOWN"}}, nil },
			want: Inventory{Source: "none", Note: "no GPU found, using CPU: NVML: device count: ERROR_UNKNOWN; nvidia-smi: not found in PATH"},
		},
		{
			name: "init panics",
			ctx:  context.Background(), open: func() (nvmlLib, error) { return fakeNVML{recordedNVML{Init: "PANIC"}}, nil },
			want: Inventory{Source: "none", Note: "no GPU found, using CPU: NVML: panic: recorded panic; nvidia-smi: not found in PATH"},
		},
		{
			name: "a getter panics: that field is unknown",
			ctx:  context.Background(), open: func() (nvmlLib, error) { return fakeNVML{v100}, nil },
			want: Inventory{Source: "nvml", Note: "GPU 0 utilization: panic: recorded panic", GPUs: []GPU{{UUID: "GPU-aa", Name: "Tesla V100", PCIBusID: "00000000:15:00.0",
				MemoryTotal: 16 * gib, MemoryFree: 15 * gib, ComputeMajor: 7, UtilizationGPU: -1}}},
		},
		{
			name: "cancelled",
			ctx:  cancelled, open: noNVML,
			want: Inventory{Source: "none", Note: "no GPU found, using CPU: discovery cancelled: context canceled"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := discover(tt.ctx, tt.open, missingSMI)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestDiscoverThisMachine runs the real discovery. The build machine has no
// GPU and no driver: Discover must say so and not fail.
func TestDiscoverThisMachine(t *testing.T) {
	if _, err := exec.LookPath("nvidia-smi"); err == nil {
		t.Skip("nvidia-smi is installed: this test is for a host without a driver")
	}
	inv := Discover(context.Background())
	if len(inv.GPUs) != 0 || inv.Source != "none" {
		t.Errorf("got %d GPUs from %q, want none", len(inv.GPUs), inv.Source)
	}
	if !strings.HasPrefix(inv.Note, "no GPU found, using CPU: NVML: ") || !strings.HasSuffix(inv.Note, "; nvidia-smi: not found in PATH") {
		t.Errorf("note %q", inv.Note)
	}
	t.Logf("note: %s", inv.Note)
}

func TestDiscoverNoUsableDevice(t *testing.T) {
	rec := recordedNVML{Init: "SUCCESS", Devices: []recordedDevice{{Errors: map[string]string{"handle": "ERROR_GPU_IS_LOST"}}}}
	got := discover(context.Background(), func() (nvmlLib, error) { return fakeNVML{rec}, nil }, missingSMI)
	want := Inventory{Source: "nvml", Note: "no GPU found, using CPU: NVML lists no usable device; GPU 0 left out: ERROR_GPU_IS_LOST"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}
