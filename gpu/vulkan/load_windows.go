//go:build windows

package vulkan

import (
	"errors"
	"fmt"
	"syscall"
)

func loaderNames() []string { return []string{"vulkan-1.dll"} }

// openLoader loads the first of names that loads and returns the address
// of its vkGetInstanceProcAddr.
func openLoader(names []string) (handle, gipa uintptr, name string, err error) {
	var errs []error
	for _, n := range names {
		h, err := syscall.LoadLibrary(n)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			continue
		}
		sym, err := syscall.GetProcAddress(h, "vkGetInstanceProcAddr")
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: vkGetInstanceProcAddr: %w", n, err))
			syscall.FreeLibrary(h)
			continue
		}
		return uintptr(h), sym, n, nil
	}
	return 0, 0, "", errors.Join(errs...)
}

func closeLoader(h uintptr) {
	if h != 0 {
		syscall.FreeLibrary(syscall.Handle(h))
	}
}
