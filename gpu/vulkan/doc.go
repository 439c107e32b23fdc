// Package vulkan is a compute-only Vulkan runtime reached through purego,
// with no cgo: a CGO_ENABLED=0 binary dlopens the Vulkan loader
// (libvulkan.so.1, libvulkan.1.dylib or vulkan-1.dll) at run time, takes
// only vkGetInstanceProcAddr from it by symbol, and fetches every other
// entry point through vkGetInstanceProcAddr and vkGetDeviceProcAddr.
//
// The package is optional: Load returns an error, never panics, when no
// loader or no device is present, and callers then compute on the CPU.
// Nothing is global: a *Library is a value handed to NewInstance, an
// *Instance enumerates PhysicalDevices (name, vendor, driver, UUID, PCI
// bus id, memory, subgroup size, shared memory, fp16 and
// cooperative-matrix support) and opens a *Device with one compute queue.
// A Device allocates Buffers from a suballocator, builds Kernels (compute
// pipelines from embedded SPIR-V with push constants, through one pipeline
// cache) and records many dispatches into one submission with a Recorder,
// which puts the memory barriers between them and waits on a fence.
//
// The kernels (GLSL under shaders/, compiled by scripts/gen_spirv.sh with
// glslc and committed as SPIR-V) are a tiled fp32 GEMM, the same GEMM
// reading B as bf16 or fp16 bits, exact fp32→bf16/fp16 rounding, RMSNorm forward, and
// an AdamW step that follows optim.AdamW's operation order.
// Mesa's lavapipe runs them on the CPU, so the tests run on every CI
// machine; the same binary runs on NVIDIA's, AMD's and Intel's drivers.
//
// The C structures are mirrored by hand; TestStructLayouts compiles a C
// program against vulkan_core.h and compares every size and offset.
// Only 64-bit targets are supported (handles travel as uintptr).
package vulkan
