//go:build !cgo || !linux

package device

import (
	"errors"
	"runtime"
)

// openNVML reports NVML unavailable, and why: go-nvml dlopens
// libnvidia-ml.so.1 through cgo, on Linux only. Such a build discovers GPUs
// through nvidia-smi (nvidia-smi.exe on Windows) instead.
func openNVML() (nvmlLib, error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("loading NVML is not supported on " + runtime.GOOS + " (go-nvml dlopens libnvidia-ml on Linux only)")
	}
	return nil, errors.New("not available: built without cgo (CGO_ENABLED=0)")
}
