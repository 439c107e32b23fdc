//go:build cgo && linux

package device

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// nvmlReturn maps a recorded return code to go-nvml's.
func nvmlReturn(t *testing.T, code string) nvml.Return {
	t.Helper()
	codes := map[string]nvml.Return{
		"": nvml.SUCCESS, "SUCCESS": nvml.SUCCESS,
		"ERROR_NOT_SUPPORTED":      nvml.ERROR_NOT_SUPPORTED,
		"ERROR_FUNCTION_NOT_FOUND": nvml.ERROR_FUNCTION_NOT_FOUND,
		"ERROR_GPU_IS_LOST":        nvml.ERROR_GPU_IS_LOST,
		"ERROR_UNKNOWN":            nvml.ERROR_UNKNOWN,
		"ERROR_LIBRARY_NOT_FOUND":  nvml.ERROR_LIBRARY_NOT_FOUND,
		"ERROR_DRIVER_NOT_LOADED":  nvml.ERROR_DRIVER_NOT_LOADED,
	}
	r, ok := codes[code]
	if !ok {
		t.Fatalf("no go-nvml return code for %q", code)
	}
	return r
}

// mockFromRecord builds go-nvml's own mock from an NVML-shaped fixture, so
// that the adapter in nvml_cgo.go is tested on the same data as discovery.
func mockFromRecord(t *testing.T, rec recordedNVML) nvml.Interface {
	ext := &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return nil }}
	return &mock.Interface{
		ExtensionsFunc:     func() nvml.ExtendedInterface { return ext },
		InitFunc:           func() nvml.Return { return nvmlReturn(t, rec.Init) },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(rec.Devices), nvmlReturn(t, rec.Count) },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			d := rec.Devices[i]
			if ret := nvmlReturn(t, d.Errors["handle"]); ret != nvml.SUCCESS {
				return nil, ret
			}
			return mockDevice(t, d), nvml.SUCCESS
		},
	}
}

func mockDevice(t *testing.T, d recordedDevice) *mock.Device {
	ret := func(getter string, present bool) nvml.Return {
		if code, ok := d.Errors[getter]; ok {
			return nvmlReturn(t, code)
		}
		if !present {
			return nvml.ERROR_NOT_SUPPORTED
		}
		return nvml.SUCCESS
	}
	m := &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return d.UUID, ret("uuid", true) },
		GetNameFunc: func() (string, nvml.Return) { return d.Name, ret("name", true) },
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			copy(p.BusId[:], d.PCIBusID)
			return p, ret("pci_bus_id", true)
		},
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			if r := ret("memory", d.Memory != nil); r != nvml.SUCCESS {
				return nvml.Memory{}, r
			}
			return nvml.Memory{Total: d.Memory.Total, Free: d.Memory.Free, Used: d.Memory.Total - d.Memory.Free}, nvml.SUCCESS
		},
		GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) {
			if r := ret("compute_capability", len(d.ComputeCapability) == 2); r != nvml.SUCCESS {
				return 0, 0, r
			}
			return d.ComputeCapability[0], d.ComputeCapability[1], nvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			if r := ret("utilization", d.UtilizationGPU != nil); r != nvml.SUCCESS {
				return nvml.Utilization{}, r
			}
			return nvml.Utilization{Gpu: uint32(*d.UtilizationGPU)}, nvml.SUCCESS
		},
		GetMigModeFunc: func() (int, int, nvml.Return) {
			if r := ret("mig_mode", d.MIGMode != nil); r != nvml.SUCCESS {
				return 0, 0, r
			}
			return *d.MIGMode, *d.MIGMode, nvml.SUCCESS
		},
		// Seven slots as on an A100, filled from the front.
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return 7, nvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i >= len(d.MIGDevices) {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return mockDevice(t, d.MIGDevices[i]), nvml.SUCCESS
		},
	}
	return m
}

// TestGoNVMLAdapter runs each NVML fixture through go-nvml's mock and the
// adapter, and through the plain fake: both must give the same inventory.
func TestGoNVMLAdapter(t *testing.T) {
	for _, fixture := range []string{"titan_1080ti.nvml.json", "mig_a100.nvml.json", "flaky.nvml.json"} {
		t.Run(fixture, func(t *testing.T) {
			rec := loadNVML(t, fixture)
			want := inventoryFromNVML(t, fixture)
			got := discover(context.Background(), func() (nvmlLib, error) { return goNVML{mockFromRecord(t, rec)}, nil }, missingSMI)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestGoNVMLLibraryNotFound(t *testing.T) {
	lib := mockFromRecord(t, recordedNVML{Init: "ERROR_LIBRARY_NOT_FOUND"})
	got := discover(context.Background(), func() (nvmlLib, error) { return goNVML{lib}, nil }, missingSMI)
	want := Inventory{Source: "none", Note: "no GPU found, using CPU: NVML: init: libnvidia-ml.so.1 not found (ERROR_LIBRARY_NOT_FOUND); nvidia-smi: not found in PATH"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got %+v\nwant %+v", got, want)
	}
}

// TestGoNVMLMissingSymbol: an old libnvidia-ml without
// nvmlDeviceGetCudaComputeCapability or the MIG calls must not be called
// into; the fields stay unknown.
func TestGoNVMLMissingSymbol(t *testing.T) {
	rec := loadNVML(t, "mig_a100.nvml.json")
	lib := mockFromRecord(t, rec).(*mock.Interface)
	lib.ExtensionsFunc = func() nvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(s string) error {
			if s == "nvmlDeviceGetCudaComputeCapability" || strings.HasPrefix(s, "nvmlDeviceGetMig") {
				return nvml.ERROR_FUNCTION_NOT_FOUND
			}
			return nil
		}}
	}
	got := discover(context.Background(), func() (nvmlLib, error) { return goNVML{lib}, nil }, missingSMI)
	if got.Source != "nvml" || got.Note != "" || len(got.GPUs) != 2 {
		t.Fatalf("got %+v", got)
	}
	for _, g := range got.GPUs {
		if g.ComputeMajor != 0 || g.MIGMode != "" || len(g.MIGDevices) != 0 {
			t.Errorf("GPU %d: compute %d.%d, MIG %q with %d instances; want all unknown", g.Index, g.ComputeMajor, g.ComputeMinor, g.MIGMode, len(g.MIGDevices))
		}
	}
}

// TestGoNVMLDGXA100 reads go-nvml's own DGX A100 mock, whose devices lack
// several methods (calling them panics) and have no MIG instances: discovery
// must come back with eight GPUs and notes, not a panic.
func TestGoNVMLDGXA100(t *testing.T) {
	got := discover(context.Background(), func() (nvmlLib, error) { return goNVML{dgxa100.New()}, nil }, missingSMI)
	if got.Source != "nvml" || len(got.GPUs) != 8 {
		t.Fatalf("source %q, %d GPUs; want nvml and 8 (note %q)", got.Source, len(got.GPUs), got.Note)
	}
	for i, g := range got.GPUs {
		if g.Index != i || !strings.HasPrefix(g.UUID, "GPU-") || g.Name != "Mock NVIDIA A100-SXM4-40GB" || g.MemoryTotal != 40*gib || g.UtilizationGPU != -1 {
			t.Errorf("GPU %d: %+v", i, g)
		}
	}
	if !strings.Contains(got.Note, "GPU 0 utilization: panic: ") {
		t.Errorf("note %q does not report the missing utilization method", got.Note)
	}
	t.Logf("note: %s", got.Note)
}
