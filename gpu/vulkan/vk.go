package vulkan

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// Result is a VkResult.
type Result int32

// The VkResult values this package names.
const (
	Success                     Result = 0
	NotReady                    Result = 1
	Timeout                     Result = 2
	Incomplete                  Result = 5
	ErrorOutOfHostMemory        Result = -1
	ErrorOutOfDeviceMemory      Result = -2
	ErrorInitializationFailed   Result = -3
	ErrorDeviceLost             Result = -4
	ErrorMemoryMapFailed        Result = -5
	ErrorLayerNotPresent        Result = -6
	ErrorExtensionNotPresent    Result = -7
	ErrorFeatureNotPresent      Result = -8
	ErrorIncompatibleDriver     Result = -9
	ErrorTooManyObjects         Result = -10
	ErrorFormatNotSupported     Result = -11
	ErrorFragmentedPool         Result = -12
	ErrorUnknown                Result = -13
	ErrorOutOfPoolMemory        Result = -1000069000
	ErrorFragmentation          Result = -1000161000
	ErrorValidationFailed       Result = -1000011001
	ErrorInvalidShader          Result = -1000012000
	PipelineCompileRequired     Result = 1000297000
	ErrorInvalidExternalHandle  Result = -1000072003
	ErrorInvalidOpaqueCaptureAd Result = -1000257000
)

var resultNames = map[Result]string{
	Success: "VK_SUCCESS", NotReady: "VK_NOT_READY", Timeout: "VK_TIMEOUT", Incomplete: "VK_INCOMPLETE",
	ErrorOutOfHostMemory: "VK_ERROR_OUT_OF_HOST_MEMORY", ErrorOutOfDeviceMemory: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
	ErrorInitializationFailed: "VK_ERROR_INITIALIZATION_FAILED", ErrorDeviceLost: "VK_ERROR_DEVICE_LOST",
	ErrorMemoryMapFailed: "VK_ERROR_MEMORY_MAP_FAILED", ErrorLayerNotPresent: "VK_ERROR_LAYER_NOT_PRESENT",
	ErrorExtensionNotPresent: "VK_ERROR_EXTENSION_NOT_PRESENT", ErrorFeatureNotPresent: "VK_ERROR_FEATURE_NOT_PRESENT",
	ErrorIncompatibleDriver: "VK_ERROR_INCOMPATIBLE_DRIVER", ErrorTooManyObjects: "VK_ERROR_TOO_MANY_OBJECTS",
	ErrorFormatNotSupported: "VK_ERROR_FORMAT_NOT_SUPPORTED", ErrorFragmentedPool: "VK_ERROR_FRAGMENTED_POOL",
	ErrorUnknown: "VK_ERROR_UNKNOWN", ErrorOutOfPoolMemory: "VK_ERROR_OUT_OF_POOL_MEMORY",
	ErrorFragmentation: "VK_ERROR_FRAGMENTATION", ErrorValidationFailed: "VK_ERROR_VALIDATION_FAILED_EXT",
	ErrorInvalidShader: "VK_ERROR_INVALID_SHADER_NV", PipelineCompileRequired: "VK_PIPELINE_COMPILE_REQUIRED",
	ErrorInvalidExternalHandle: "VK_ERROR_INVALID_EXTERNAL_HANDLE", ErrorInvalidOpaqueCaptureAd: "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS",
}

// String is the result's C name, or its number when unnamed here.
func (r Result) String() string {
	if s, ok := resultNames[r]; ok {
		return s
	}
	return fmt.Sprintf("VkResult(%d)", int32(r))
}

// Error is a failed Vulkan call: which call, and the VkResult it returned.
type Error struct {
	Call   string
	Result Result
}

func (e *Error) Error() string { return e.Call + ": " + e.Result.String() }

// check turns a returned VkResult into an *Error when it is not VK_SUCCESS.
func check(call string, r uintptr) error {
	if res := Result(int32(r)); res != Success {
		return &Error{Call: call, Result: res}
	}
	return nil
}

// call invokes a Vulkan entry point. Pointer arguments must be written
// uintptr(unsafe.Pointer(p)) in the argument list itself: call is
// go:uintptrescapes, which moves what they point to onto the heap and
// keeps it alive for the call. SyscallN's own directive covers only its
// direct callers: without call's, a struct passed here stayed on the
// caller's stack, and a stack that grew on the way into the driver left
// the driver reading the old copy (a SIGSEGV in vkAllocateDescriptorSets
// from a fresh goroutine's first dispatch, TestDropoutMask's subtests).
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// Non-dispatchable handles are 64-bit integers; dispatchable ones pointers
// (held as uintptr: they point to driver memory, not Go memory).
type (
	handle   = uintptr
	ndHandle = uint64
)

// Structure types (VkStructureType).
const (
	stApplicationInfo                           = 0
	stInstanceCreateInfo                        = 1
	stDeviceQueueCreateInfo                     = 2
	stDeviceCreateInfo                          = 3
	stSubmitInfo                                = 4
	stMemoryAllocateInfo                        = 5
	stFenceCreateInfo                           = 8
	stQueryPoolCreateInfo                       = 11
	stBufferCreateInfo                          = 12
	stShaderModuleCreateInfo                    = 16
	stPipelineCacheCreateInfo                   = 17
	stPipelineShaderStageCreate                 = 18
	stComputePipelineCreateInfo                 = 29
	stPipelineLayoutCreateInfo                  = 30
	stDescriptorSetLayoutCreate                 = 32
	stDescriptorPoolCreateInfo                  = 33
	stDescriptorSetAllocateInfo                 = 34
	stWriteDescriptorSet                        = 35
	stCommandPoolCreateInfo                     = 39
	stCommandBufferAllocateInfo                 = 40
	stCommandBufferBeginInfo                    = 42
	stMemoryBarrier                             = 46
	stPhysicalDeviceFeatures2                   = 1000059000
	stPhysicalDeviceProperties2                 = 1000059001
	stPhysicalDeviceSubgroupProps               = 1000094000
	stPhysicalDeviceIDProperties                = 1000071004
	stPhysicalDeviceDriverProps                 = 1000196000
	stPhysicalDevicePCIBusInfo                  = 1000212000
	stPhysicalDeviceFloat16Int8                 = 1000082000
	stPhysicalDevice16BitStorage                = 1000083000
	stPhysicalDeviceMemoryModelFeatures         = 1000211000
	stPhysicalDeviceCoopMatFeaturesNV           = 1000249000
	stCooperativeMatrixPropertiesNV             = 1000249001
	stPhysicalDeviceCoopMatFeaturesKHR          = 1000506000
	stCooperativeMatrixPropertiesKHR            = 1000506001
	stPhysicalDeviceBFloat16FeaturesKHR         = 1000141000
	stPhysicalDeviceCoopMat2FeaturesNV          = 1000593000
	stCoopMatFlexibleDimensionsPropsNV          = 1000593001
	stPhysicalDeviceCoopMat2PropertiesNV        = 1000593002
	maxPhysicalDeviceNameSize                   = 256
	maxExtensionNameSize                        = 256
	maxDescriptionSize                          = 256
	maxDriverNameSize                           = 256
	maxDriverInfoSize                           = 256
	uuidSize                                    = 16
	luidSize                                    = 8
	maxMemoryTypes                              = 32
	maxMemoryHeaps                              = 16
	wholeSize                            uint64 = ^uint64(0)
)

// Flags and enumerants.
const (
	queueComputeBit = 0x2

	instanceCreateEnumeratePortability = 0x1 // VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR

	memoryPropertyDeviceLocal  = 0x1
	memoryPropertyHostVisible  = 0x2
	memoryPropertyHostCoherent = 0x4
	memoryPropertyHostCached   = 0x8
	memoryHeapDeviceLocal      = 0x1

	bufferUsageTransferSrc = 0x1
	bufferUsageTransferDst = 0x2
	bufferUsageStorage     = 0x20

	descriptorTypeStorageBuffer = 7
	shaderStageCompute          = 0x20
	pipelineBindPointCompute    = 1

	commandPoolResetCommandBuffer = 0x2
	commandBufferLevelPrimary     = 0
	commandBufferOneTimeSubmit    = 0x1

	pipelineStageTopOfPipe    = 0x1
	pipelineStageBottomOfPipe = 0x2000
	pipelineStageTransfer     = 0x1000
	pipelineStageCompute      = 0x800
	pipelineStageHost         = 0x4000
	accessShaderRead          = 0x20
	accessShaderWrite         = 0x40
	accessTransferRead        = 0x800
	accessTransferWrite       = 0x1000
	accessHostRead            = 0x2000
	accessHostWrite           = 0x4000
	sharingModeExclusive      = 0

	queryTypeTimestamp = 2
	queryResult64      = 0x1 // VK_QUERY_RESULT_64_BIT
	queryResultWait    = 0x2 // VK_QUERY_RESULT_WAIT_BIT
)

// apiVersion packs a Vulkan version number (VK_MAKE_API_VERSION, variant 0).
func apiVersion(major, minor, patch uint32) uint32 { return major<<22 | minor<<12 | patch }

// versionString formats a packed Vulkan version.
func versionString(v uint32) string {
	return fmt.Sprintf("%d.%d.%d", v>>22&0x7f, v>>12&0x3ff, v&0xfff)
}

// cstr is s as a NUL-terminated C string.
func cstr(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// gostr is the NUL-terminated string in a fixed C char array.
func gostr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
