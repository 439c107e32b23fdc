package vulkan

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// testEnv is the Vulkan stack the tests run on: the device named by
// MIXTUNE_VK_DEVICE (an index, UUID or PCI bus id), else the first.
type testEnv struct {
	lib  *Library
	inst *Instance
	devs []*PhysicalDevice
	dev  *Device
}

// openTest opens the test device, or skips naming what is missing.
func openTest(t testing.TB) *testEnv {
	t.Helper()
	lib, err := Load()
	if err != nil {
		if errors.Is(err, ErrNoLoader) {
			t.Skipf("no Vulkan loader (libvulkan.so.1): %v", err)
		}
		t.Fatal(err)
	}
	inst, err := NewInstance(lib, "mixtune-test")
	if err != nil {
		lib.Close()
		if errors.Is(err, ErrNoDevice) {
			t.Skipf("no Vulkan device: %v", err)
		}
		t.Fatal(err)
	}
	devs, err := inst.PhysicalDevices()
	if err != nil {
		inst.Close()
		lib.Close()
		if errors.Is(err, ErrNoDevice) {
			t.Skipf("no Vulkan device: %v", err)
		}
		t.Fatal(err)
	}
	pick := devs[0]
	if spec := os.Getenv("MIXTUNE_VK_DEVICE"); spec != "" {
		if pick, err = Select(devs, spec); err != nil {
			t.Fatal(err)
		}
	}
	dev, err := inst.OpenDevice(pick)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{lib: lib, inst: inst, devs: devs, dev: dev}
	t.Cleanup(func() {
		dev.Close()
		inst.Close()
		lib.Close()
	})
	return e
}

func TestDevices(t *testing.T) {
	e := openTest(t)
	for _, p := range e.devs {
		t.Logf("device %d: %s (%s, %s), Vulkan %s, driver %s %s [%s], %s, PCI %q, %d MiB device-local, subgroup %d, shared %d B, maxStorageBufferRange %d, fp16 %v, coopmat KHR/NV/NV2 %v/%v/%v",
			p.Index, p.Name, p.Vendor(), p.Type, p.VersionString(), p.DriverName, p.DriverVersionString(), p.DriverInfo,
			p.UUIDString(), p.PCIBusID, p.DeviceLocalBytes>>20, p.SubgroupSize, p.MaxSharedMemory, p.MaxStorageBufferRange,
			p.ShaderFloat16, p.CooperativeMatrixKHR, p.CooperativeMatrixNV, p.CooperativeMatrix2NV)
		if p.Name == "" || p.APIVersion < apiVersion(1, 1, 0) {
			t.Errorf("device %d: name %q, Vulkan %s: want a name and 1.1 or later", p.Index, p.Name, p.VersionString())
		}
		if p.SubgroupSize == 0 || p.SubgroupSize&(p.SubgroupSize-1) != 0 {
			t.Errorf("%s: subgroup size %d, want a power of two", p.Name, p.SubgroupSize)
		}
		// Vulkan's required minimums.
		if p.MaxSharedMemory < 16384 || p.MaxWorkgroupInvocations < 128 || p.MaxStorageBufferRange < 1<<27 {
			t.Errorf("%s: shared %d, invocations %d, storage range %d: below Vulkan's minimums", p.Name, p.MaxSharedMemory, p.MaxWorkgroupInvocations, p.MaxStorageBufferRange)
		}
		if p.DeviceLocalBytes == 0 {
			t.Errorf("%s: no device-local heap", p.Name)
		}
		if p.UUID == ([16]byte{}) {
			t.Errorf("%s: zero device UUID", p.Name)
		}
		if !strings.HasPrefix(p.UUIDString(), "GPU-") || len(p.UUIDString()) != 40 {
			t.Errorf("%s: UUID string %q", p.Name, p.UUIDString())
		}
		if strings.Contains(p.DriverName, "llvmpipe") || strings.Contains(p.Name, "llvmpipe") {
			// lavapipe: what the notes measured on Mesa 22.3.
			if p.Type != TypeCPU || p.VendorID != 0x10005 || p.DriverID != 13 {
				t.Errorf("lavapipe: type %v vendor %#x driver id %d; want CPU, 0x10005 (Mesa), 13 (VK_DRIVER_ID_MESA_LLVMPIPE)", p.Type, p.VendorID, p.DriverID)
			}
			if !p.ShaderFloat16 || p.MaxSharedMemory != 32768 || p.CooperativeMatrixKHR {
				t.Errorf("lavapipe: fp16 %v, shared %d, coopmat %v; want true, 32768, false", p.ShaderFloat16, p.MaxSharedMemory, p.CooperativeMatrixKHR)
			}
		}
	}
}
