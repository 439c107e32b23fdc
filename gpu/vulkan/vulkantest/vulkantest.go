// Package vulkantest opens the Vulkan device tests run on, or skips the
// test naming what is missing: the device MIXTUNE_VK_DEVICE names (an
// index, UUID or PCI bus id), else the first (Mesa's lavapipe in CI).
package vulkantest

import (
	"errors"
	"os"
	"testing"

	"github.com/mixtune/mixtune/gpu/vulkan"
)

// Env is an open Vulkan stack: the loader, an instance, the devices it
// reports and the one chosen.
type Env struct {
	Lib     *vulkan.Library
	Inst    *vulkan.Instance
	Devices []*vulkan.PhysicalDevice
	Pick    *vulkan.PhysicalDevice
	// Spec names Pick as compute.vulkan_device takes it.
	Spec string
}

// Find opens the loader and an instance and chooses the test device,
// closing them when the test ends; it skips where there is no loader or
// no device.
func Find(tb testing.TB) *Env {
	tb.Helper()
	lib, err := vulkan.Load()
	if err != nil {
		if errors.Is(err, vulkan.ErrNoLoader) {
			tb.Skipf("no Vulkan loader (libvulkan.so.1): %v", err)
		}
		tb.Fatal(err)
	}
	inst, err := vulkan.NewInstance(lib, "mixtune-test")
	if err != nil {
		lib.Close()
		if errors.Is(err, vulkan.ErrNoDevice) {
			tb.Skipf("no Vulkan device: %v", err)
		}
		tb.Fatal(err)
	}
	devs, err := inst.PhysicalDevices()
	if err != nil {
		inst.Close()
		lib.Close()
		if errors.Is(err, vulkan.ErrNoDevice) {
			tb.Skipf("no Vulkan device: %v", err)
		}
		tb.Fatal(err)
	}
	e := &Env{Lib: lib, Inst: inst, Devices: devs, Pick: devs[0], Spec: "0"}
	tb.Cleanup(func() {
		inst.Close()
		lib.Close()
	})
	if spec := os.Getenv("MIXTUNE_VK_DEVICE"); spec != "" {
		if e.Pick, err = vulkan.Select(devs, spec); err != nil {
			tb.Fatal(err)
		}
		e.Spec = spec
	}
	return e
}

// Open is Find, then opens the chosen device, closed when the test ends
// (before the instance: cleanups run last first).
func Open(tb testing.TB) (*Env, *vulkan.Device) {
	tb.Helper()
	e := Find(tb)
	dev, err := e.Inst.OpenDevice(e.Pick)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(dev.Close)
	return e, dev
}
