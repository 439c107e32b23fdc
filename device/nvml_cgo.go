//go:build cgo && linux

package device

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// openNVML returns go-nvml's library. Nothing is loaded until Init, which
// dlopens libnvidia-ml.so.1 and fails with ERROR_LIBRARY_NOT_FOUND on a
// host without the driver.
func openNVML() (nvmlLib, error) {
	return goNVML{nvml.New()}, nil
}

// goNVML adapts go-nvml's Interface (the real library or its mock) to
// nvmlLib.
type goNVML struct{ lib nvml.Interface }

func (g goNVML) Init() error {
	if ret := g.lib.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return fmt.Errorf("libnvidia-ml.so.1 not found (%s)", ret.Error())
		}
		return nvmlError(ret)
	}
	return nil
}

func (g goNVML) Shutdown() error { return nvmlError(g.lib.Shutdown()) }

func (g goNVML) DeviceCount() (int, error) {
	n, ret := g.lib.DeviceGetCount()
	return n, nvmlError(ret)
}

func (g goNVML) Device(i int) (nvmlDevice, error) {
	d, ret := g.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return nil, nvmlError(ret)
	}
	return goDevice{d: d, lib: g.lib}, nil
}

// goDevice is a handle to a whole GPU or a MIG instance.
type goDevice struct {
	d   nvml.Device
	lib nvml.Interface
}

// has reports whether the loaded libnvidia-ml exports symbol. go-nvml links
// with unresolved symbols ignored, so calling a function an old driver does
// not have would jump to nowhere: a crash no recover can catch.
func (g goDevice) has(symbol string) bool {
	return g.lib.Extensions().LookupSymbol(symbol) == nil
}

func (g goDevice) UUID() (string, error) {
	s, ret := g.d.GetUUID()
	return s, nvmlError(ret)
}

func (g goDevice) PCIBusID() (string, error) {
	p, ret := g.d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return "", nvmlError(ret)
	}
	return cString(p.BusId[:]), nil
}

func (g goDevice) Name() (string, error) {
	s, ret := g.d.GetName()
	return s, nvmlError(ret)
}

func (g goDevice) Memory() (total, free uint64, err error) {
	m, ret := g.d.GetMemoryInfo()
	return m.Total, m.Free, nvmlError(ret)
}

func (g goDevice) ComputeCapability() (major, minor int, err error) {
	if !g.has("nvmlDeviceGetCudaComputeCapability") {
		return 0, 0, fmt.Errorf("nvmlDeviceGetCudaComputeCapability: %w", errNotSupported)
	}
	major, minor, ret := g.d.GetCudaComputeCapability()
	return major, minor, nvmlError(ret)
}

func (g goDevice) Utilization() (int, error) {
	u, ret := g.d.GetUtilizationRates()
	return int(u.Gpu), nvmlError(ret)
}

func (g goDevice) MIGEnabled() (bool, error) {
	if !g.has("nvmlDeviceGetMigMode") {
		return false, fmt.Errorf("nvmlDeviceGetMigMode: %w", errNotSupported)
	}
	current, _, ret := g.d.GetMigMode()
	return current == nvml.DEVICE_MIG_ENABLE, nvmlError(ret)
}

func (g goDevice) MIGDevices() ([]nvmlDevice, error) {
	if !g.has("nvmlDeviceGetMaxMigDeviceCount") || !g.has("nvmlDeviceGetMigDeviceHandleByIndex") {
		return nil, fmt.Errorf("nvmlDeviceGetMigDeviceHandleByIndex: %w", errNotSupported)
	}
	n, ret := g.d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlError(ret)
	}
	var out []nvmlDevice
	for i := 0; i < n; i++ {
		m, ret := g.d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue // an empty slot: fewer instances than the maximum
		}
		if ret != nvml.SUCCESS {
			return out, fmt.Errorf("MIG device %d: %w", i, nvmlError(ret))
		}
		out = append(out, goDevice{d: m, lib: g.lib})
	}
	return out, nil
}

// nvmlError turns an NVML return code into nil or an error, marking the
// codes that mean "this GPU or driver does not have it".
func nvmlError(ret nvml.Return) error {
	switch ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return fmt.Errorf("%s: %w", ret.Error(), errNotSupported)
	}
	return errors.New(ret.Error())
}

// cString reads a NUL-terminated C char array.
func cString(b []uint8) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
