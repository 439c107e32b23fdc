package vulkan

import (
	"errors"
	"fmt"
	"unsafe"
)

// ErrNoLoader is wrapped by Load's error when no Vulkan loader library
// could be opened; callers fall back to the CPU.
var ErrNoLoader = errors.New("no Vulkan loader (libvulkan.so.1)")

// ErrNoDevice is wrapped by errors when the loader is present but reports
// no physical device (no ICD, or none that loads).
var ErrNoDevice = errors.New("no Vulkan device")

// Library is an opened Vulkan loader. It holds only the library handle and
// vkGetInstanceProcAddr; Close it after every Instance made from it.
type Library struct {
	name   string
	handle uintptr
	gipa   uintptr // vkGetInstanceProcAddr

	createInstance              uintptr
	enumerateInstanceVersion    uintptr // nil on 1.0 loaders
	enumerateInstanceExtensions uintptr
}

// Load opens the platform's Vulkan loader (libvulkan.so.1 on Linux,
// libvulkan.1.dylib on macOS, vulkan-1.dll on Windows). Without one the
// error wraps ErrNoLoader.
func Load() (*Library, error) { return LoadFrom(loaderNames()...) }

// LoadFrom opens the first loader library of names that opens.
func LoadFrom(names ...string) (*Library, error) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return nil, fmt.Errorf("vulkan: only 64-bit targets are supported: %w", ErrNoLoader)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("vulkan: no library names given: %w", ErrNoLoader)
	}
	h, gipa, name, err := openLoader(names)
	if err != nil {
		return nil, fmt.Errorf("vulkan: %w: %v", ErrNoLoader, err)
	}
	l := &Library{name: name, handle: h, gipa: gipa}
	l.createInstance = l.instanceProc(0, "vkCreateInstance")
	l.enumerateInstanceVersion = l.instanceProc(0, "vkEnumerateInstanceVersion")
	l.enumerateInstanceExtensions = l.instanceProc(0, "vkEnumerateInstanceExtensionProperties")
	if l.createInstance == 0 || l.enumerateInstanceExtensions == 0 {
		closeLoader(h)
		return nil, fmt.Errorf("vulkan: %s has no vkCreateInstance: %w", name, ErrNoLoader)
	}
	return l, nil
}

// Name is the file name of the loader that was opened.
func (l *Library) Name() string { return l.name }

// Version is the loader's instance-level Vulkan version (1.0.0 for loaders
// older than vkEnumerateInstanceVersion).
func (l *Library) Version() uint32 {
	if l.enumerateInstanceVersion == 0 {
		return apiVersion(1, 0, 0)
	}
	var v uint32
	if call(l.enumerateInstanceVersion, uintptr(unsafe.Pointer(&v))) != 0 {
		return apiVersion(1, 0, 0)
	}
	return v
}

// Close unloads the library. Instances made from it must be closed first.
func (l *Library) Close() {
	closeLoader(l.handle)
	l.handle, l.gipa = 0, 0
}

// instanceProc is vkGetInstanceProcAddr(instance, name), 0 when absent.
func (l *Library) instanceProc(instance handle, name string) uintptr {
	n := cstr(name)
	return call(l.gipa, instance, uintptr(unsafe.Pointer(n)))
}

// procEntry names one function pointer to resolve.
type procEntry struct {
	name string
	dst  *uintptr
}

// resolve fills every entry through get; a missing one is an error naming it.
func resolve(what string, get func(string) uintptr, entries []procEntry) error {
	var missing []string
	for _, e := range entries {
		*e.dst = get(e.name)
		if *e.dst == 0 {
			missing = append(missing, e.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("vulkan: %s lacks %v", what, missing)
	}
	return nil
}

// instanceExtensions lists the instance extensions the loader offers.
func (l *Library) instanceExtensions() ([]string, error) {
	for range 3 { // the count can change between the two calls
		var n uint32
		if err := check("vkEnumerateInstanceExtensionProperties", call(l.enumerateInstanceExtensions, 0, uintptr(unsafe.Pointer(&n)), 0)); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		props := make([]extensionProperties, n)
		r := call(l.enumerateInstanceExtensions, 0, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&props[0])))
		if Result(int32(r)) == Incomplete {
			continue
		}
		if err := check("vkEnumerateInstanceExtensionProperties", r); err != nil {
			return nil, err
		}
		names := make([]string, 0, n)
		for _, e := range props[:n] {
			names = append(names, gostr(e.ExtensionName[:]))
		}
		return names, nil
	}
	return nil, fmt.Errorf("vkEnumerateInstanceExtensionProperties: the list kept changing")
}
