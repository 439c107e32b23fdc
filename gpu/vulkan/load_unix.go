//go:build darwin || freebsd || linux || netbsd

package vulkan

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/ebitengine/purego"
)

// loaderNames are the Vulkan loader's file names on this OS, in the order tried.
func loaderNames() []string {
	if runtime.GOOS == "darwin" {
		return []string{"libvulkan.1.dylib", "libvulkan.dylib", "libMoltenVK.dylib"}
	}
	return []string{"libvulkan.so.1", "libvulkan.so"}
}

// openLoader dlopens the first of names that loads and returns the address
// of its vkGetInstanceProcAddr.
func openLoader(names []string) (handle, gipa uintptr, name string, err error) {
	var errs []error
	for _, n := range names {
		h, err := purego.Dlopen(n, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			continue
		}
		sym, err := purego.Dlsym(h, "vkGetInstanceProcAddr")
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: vkGetInstanceProcAddr: %w", n, err))
			purego.Dlclose(h)
			continue
		}
		return h, sym, n, nil
	}
	return 0, 0, "", errors.Join(errs...)
}

func closeLoader(h uintptr) {
	if h != 0 {
		purego.Dlclose(h)
	}
}
