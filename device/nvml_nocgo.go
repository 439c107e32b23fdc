//go:build !cgo

package device

import "errors"

// openNVML reports NVML unavailable: go-nvml needs cgo to dlopen
// libnvidia-ml, so a CGO_ENABLED=0 build discovers GPUs through nvidia-smi.
func openNVML() (nvmlLib, error) {
	return nil, errors.New("not available: built without cgo (CGO_ENABLED=0)")
}
