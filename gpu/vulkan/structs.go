package vulkan

import "unsafe"

// Mirrors of the C structures this package passes to Vulkan. Field names
// are the C names with the first letter upper-cased (TestStructLayouts
// relies on that to compare every offset with the C compiler's), in C
// order, with Go's natural alignment, which matches C's on the 64-bit
// targets this package supports. Pointer fields are unsafe.Pointer or typed
// pointers, never uintptr, so the collector sees them.

type applicationInfo struct {
	SType              uint32
	PNext              unsafe.Pointer
	PApplicationName   *byte
	ApplicationVersion uint32
	PEngineName        *byte
	EngineVersion      uint32
	ApiVersion         uint32
}

type instanceCreateInfo struct {
	SType                   uint32
	PNext                   unsafe.Pointer
	Flags                   uint32
	PApplicationInfo        *applicationInfo
	EnabledLayerCount       uint32
	PpEnabledLayerNames     **byte
	EnabledExtensionCount   uint32
	PpEnabledExtensionNames **byte
}

type extensionProperties struct {
	ExtensionName [maxExtensionNameSize]byte
	SpecVersion   uint32
}

type physicalDeviceSparseProperties struct {
	ResidencyStandard2DBlockShape            uint32
	ResidencyStandard2DMultisampleBlockShape uint32
	ResidencyStandard3DBlockShape            uint32
	ResidencyAlignedMipSize                  uint32
	ResidencyNonResidentStrict               uint32
}

type physicalDeviceProperties struct {
	ApiVersion        uint32
	DriverVersion     uint32
	VendorID          uint32
	DeviceID          uint32
	DeviceType        uint32
	DeviceName        [maxPhysicalDeviceNameSize]byte
	PipelineCacheUUID [uuidSize]byte
	Limits            physicalDeviceLimits
	SparseProperties  physicalDeviceSparseProperties
}

type physicalDeviceProperties2 struct {
	SType      uint32
	PNext      unsafe.Pointer
	Properties physicalDeviceProperties
}

type physicalDeviceIDProperties struct {
	SType           uint32
	PNext           unsafe.Pointer
	DeviceUUID      [uuidSize]byte
	DriverUUID      [uuidSize]byte
	DeviceLUID      [luidSize]byte
	DeviceNodeMask  uint32
	DeviceLUIDValid uint32
}

type conformanceVersion struct {
	Major, Minor, Subminor, Patch uint8
}

type physicalDeviceDriverProperties struct {
	SType              uint32
	PNext              unsafe.Pointer
	DriverID           uint32
	DriverName         [maxDriverNameSize]byte
	DriverInfo         [maxDriverInfoSize]byte
	ConformanceVersion conformanceVersion
}

type physicalDeviceSubgroupProperties struct {
	SType                     uint32
	PNext                     unsafe.Pointer
	SubgroupSize              uint32
	SupportedStages           uint32
	SupportedOperations       uint32
	QuadOperationsInAllStages uint32
}

type physicalDevicePCIBusInfoPropertiesEXT struct {
	SType       uint32
	PNext       unsafe.Pointer
	PciDomain   uint32
	PciBus      uint32
	PciDevice   uint32
	PciFunction uint32
}

type physicalDeviceFeatures2 struct {
	SType    uint32
	PNext    unsafe.Pointer
	Features [55]uint32 // VkPhysicalDeviceFeatures: 55 VkBool32, none used here
}

type physicalDeviceShaderFloat16Int8Features struct {
	SType         uint32
	PNext         unsafe.Pointer
	ShaderFloat16 uint32
	ShaderInt8    uint32
}

type physicalDeviceVulkanMemoryModelFeatures struct {
	SType                                         uint32
	PNext                                         unsafe.Pointer
	VulkanMemoryModel                             uint32
	VulkanMemoryModelDeviceScope                  uint32
	VulkanMemoryModelAvailabilityVisibilityChains uint32
}

type physicalDeviceCooperativeMatrixFeaturesNV struct {
	SType                               uint32
	PNext                               unsafe.Pointer
	CooperativeMatrix                   uint32
	CooperativeMatrixRobustBufferAccess uint32
}

type cooperativeMatrixPropertiesNV struct {
	SType               uint32
	PNext               unsafe.Pointer
	MSize, NSize, KSize uint32
	AType, BType        uint32
	CType, DType        uint32
	Scope               uint32
}

// VkPhysicalDeviceCooperativeMatrixFeaturesKHR, VkCooperativeMatrixPropertiesKHR
// and VkPhysicalDeviceShaderBfloat16FeaturesKHR are newer than Debian's
// vulkan_core.h (1.3.239), so TestStructLayouts cannot check them: their
// layouts are Vulkan 1.4's (VkBool32 and enums are 32-bit, pNext aligned).
type physicalDeviceCooperativeMatrixFeaturesKHR struct {
	SType                               uint32
	PNext                               unsafe.Pointer
	CooperativeMatrix                   uint32
	CooperativeMatrixRobustBufferAccess uint32
}

type cooperativeMatrixPropertiesKHR struct {
	SType                  uint32
	PNext                  unsafe.Pointer
	MSize, NSize, KSize    uint32
	AType, BType           uint32
	CType, ResultType      uint32
	SaturatingAccumulation uint32
	Scope                  uint32
}

// VkPhysicalDeviceCooperativeMatrix2FeaturesNV,
// VkPhysicalDeviceCooperativeMatrix2PropertiesNV and
// VkCooperativeMatrixFlexibleDimensionsPropertiesNV (VK_NV_cooperative_matrix2)
// are newer still; TestStructLayouts checks them against a vulkan_core.h
// that has them (MIXTUNE_VULKAN_INCLUDE).
type physicalDeviceCooperativeMatrix2FeaturesNV struct {
	SType                                 uint32
	PNext                                 unsafe.Pointer
	CooperativeMatrixWorkgroupScope       uint32
	CooperativeMatrixFlexibleDimensions   uint32
	CooperativeMatrixReductions           uint32
	CooperativeMatrixConversions          uint32
	CooperativeMatrixPerElementOperations uint32
	CooperativeMatrixTensorAddressing     uint32
	CooperativeMatrixBlockLoads           uint32
}

type physicalDeviceCooperativeMatrix2PropertiesNV struct {
	SType                                               uint32
	PNext                                               unsafe.Pointer
	CooperativeMatrixWorkgroupScopeMaxWorkgroupSize     uint32
	CooperativeMatrixFlexibleDimensionsMaxDimension     uint32
	CooperativeMatrixWorkgroupScopeReservedSharedMemory uint32
}

type cooperativeMatrixFlexibleDimensionsPropertiesNV struct {
	SType                                    uint32
	PNext                                    unsafe.Pointer
	MGranularity, NGranularity, KGranularity uint32
	AType, BType                             uint32
	CType, ResultType                        uint32
	SaturatingAccumulation                   uint32
	Scope                                    uint32
	WorkgroupInvocations                     uint32
}

type physicalDeviceShaderBfloat16FeaturesKHR struct {
	SType                           uint32
	PNext                           unsafe.Pointer
	ShaderBFloat16Type              uint32
	ShaderBFloat16DotProduct        uint32
	ShaderBFloat16CooperativeMatrix uint32
}

type memoryType struct {
	PropertyFlags uint32
	HeapIndex     uint32
}

type memoryHeap struct {
	Size  uint64
	Flags uint32
}

type physicalDeviceMemoryProperties struct {
	MemoryTypeCount uint32
	MemoryTypes     [maxMemoryTypes]memoryType
	MemoryHeapCount uint32
	MemoryHeaps     [maxMemoryHeaps]memoryHeap
}

type extent3D struct {
	Width, Height, Depth uint32
}

type queueFamilyProperties struct {
	QueueFlags                  uint32
	QueueCount                  uint32
	TimestampValidBits          uint32
	MinImageTransferGranularity extent3D
}

type deviceQueueCreateInfo struct {
	SType            uint32
	PNext            unsafe.Pointer
	Flags            uint32
	QueueFamilyIndex uint32
	QueueCount       uint32
	PQueuePriorities *float32
}

type deviceCreateInfo struct {
	SType                   uint32
	PNext                   unsafe.Pointer
	Flags                   uint32
	QueueCreateInfoCount    uint32
	PQueueCreateInfos       *deviceQueueCreateInfo
	EnabledLayerCount       uint32
	PpEnabledLayerNames     **byte
	EnabledExtensionCount   uint32
	PpEnabledExtensionNames **byte
	PEnabledFeatures        unsafe.Pointer
}

type bufferCreateInfo struct {
	SType                 uint32
	PNext                 unsafe.Pointer
	Flags                 uint32
	Size                  uint64
	Usage                 uint32
	SharingMode           uint32
	QueueFamilyIndexCount uint32
	PQueueFamilyIndices   *uint32
}

type memoryRequirements struct {
	Size           uint64
	Alignment      uint64
	MemoryTypeBits uint32
}

type memoryAllocateInfo struct {
	SType           uint32
	PNext           unsafe.Pointer
	AllocationSize  uint64
	MemoryTypeIndex uint32
}

type shaderModuleCreateInfo struct {
	SType    uint32
	PNext    unsafe.Pointer
	Flags    uint32
	CodeSize uintptr
	PCode    *uint32
}

type pipelineCacheCreateInfo struct {
	SType           uint32
	PNext           unsafe.Pointer
	Flags           uint32
	InitialDataSize uintptr
	PInitialData    unsafe.Pointer
}

type descriptorSetLayoutBinding struct {
	Binding            uint32
	DescriptorType     uint32
	DescriptorCount    uint32
	StageFlags         uint32
	PImmutableSamplers unsafe.Pointer
}

type descriptorSetLayoutCreateInfo struct {
	SType        uint32
	PNext        unsafe.Pointer
	Flags        uint32
	BindingCount uint32
	PBindings    *descriptorSetLayoutBinding
}

type pushConstantRange struct {
	StageFlags uint32
	Offset     uint32
	Size       uint32
}

type pipelineLayoutCreateInfo struct {
	SType                  uint32
	PNext                  unsafe.Pointer
	Flags                  uint32
	SetLayoutCount         uint32
	PSetLayouts            *ndHandle
	PushConstantRangeCount uint32
	PPushConstantRanges    *pushConstantRange
}

type pipelineShaderStageCreateInfo struct {
	SType               uint32
	PNext               unsafe.Pointer
	Flags               uint32
	Stage               uint32
	Module              ndHandle
	PName               *byte
	PSpecializationInfo unsafe.Pointer
}

type computePipelineCreateInfo struct {
	SType              uint32
	PNext              unsafe.Pointer
	Flags              uint32
	Stage              pipelineShaderStageCreateInfo
	Layout             ndHandle
	BasePipelineHandle ndHandle
	BasePipelineIndex  int32
}

type descriptorPoolSize struct {
	Type            uint32
	DescriptorCount uint32
}

type descriptorPoolCreateInfo struct {
	SType         uint32
	PNext         unsafe.Pointer
	Flags         uint32
	MaxSets       uint32
	PoolSizeCount uint32
	PPoolSizes    *descriptorPoolSize
}

type descriptorSetAllocateInfo struct {
	SType              uint32
	PNext              unsafe.Pointer
	DescriptorPool     ndHandle
	DescriptorSetCount uint32
	PSetLayouts        *ndHandle
}

type descriptorBufferInfo struct {
	Buffer ndHandle
	Offset uint64
	Range  uint64
}

type writeDescriptorSet struct {
	SType            uint32
	PNext            unsafe.Pointer
	DstSet           ndHandle
	DstBinding       uint32
	DstArrayElement  uint32
	DescriptorCount  uint32
	DescriptorType   uint32
	PImageInfo       unsafe.Pointer
	PBufferInfo      *descriptorBufferInfo
	PTexelBufferView unsafe.Pointer
}

type commandPoolCreateInfo struct {
	SType            uint32
	PNext            unsafe.Pointer
	Flags            uint32
	QueueFamilyIndex uint32
}

type commandBufferAllocateInfo struct {
	SType              uint32
	PNext              unsafe.Pointer
	CommandPool        ndHandle
	Level              uint32
	CommandBufferCount uint32
}

type commandBufferBeginInfo struct {
	SType            uint32
	PNext            unsafe.Pointer
	Flags            uint32
	PInheritanceInfo unsafe.Pointer
}

type memoryBarrier struct {
	SType         uint32
	PNext         unsafe.Pointer
	SrcAccessMask uint32
	DstAccessMask uint32
}

type bufferCopy struct {
	SrcOffset uint64
	DstOffset uint64
	Size      uint64
}

type submitInfo struct {
	SType                uint32
	PNext                unsafe.Pointer
	WaitSemaphoreCount   uint32
	PWaitSemaphores      *ndHandle
	PWaitDstStageMask    *uint32
	CommandBufferCount   uint32
	PCommandBuffers      *handle
	SignalSemaphoreCount uint32
	PSignalSemaphores    *ndHandle
}

type fenceCreateInfo struct {
	SType uint32
	PNext unsafe.Pointer
	Flags uint32
}

type queryPoolCreateInfo struct {
	SType              uint32
	PNext              unsafe.Pointer
	Flags              uint32
	QueryType          uint32
	QueryCount         uint32
	PipelineStatistics uint32
}

// physicalDeviceLimits mirrors VkPhysicalDeviceLimits field for field.
type physicalDeviceLimits struct {
	MaxImageDimension1D                             uint32
	MaxImageDimension2D                             uint32
	MaxImageDimension3D                             uint32
	MaxImageDimensionCube                           uint32
	MaxImageArrayLayers                             uint32
	MaxTexelBufferElements                          uint32
	MaxUniformBufferRange                           uint32
	MaxStorageBufferRange                           uint32
	MaxPushConstantsSize                            uint32
	MaxMemoryAllocationCount                        uint32
	MaxSamplerAllocationCount                       uint32
	BufferImageGranularity                          uint64
	SparseAddressSpaceSize                          uint64
	MaxBoundDescriptorSets                          uint32
	MaxPerStageDescriptorSamplers                   uint32
	MaxPerStageDescriptorUniformBuffers             uint32
	MaxPerStageDescriptorStorageBuffers             uint32
	MaxPerStageDescriptorSampledImages              uint32
	MaxPerStageDescriptorStorageImages              uint32
	MaxPerStageDescriptorInputAttachments           uint32
	MaxPerStageResources                            uint32
	MaxDescriptorSetSamplers                        uint32
	MaxDescriptorSetUniformBuffers                  uint32
	MaxDescriptorSetUniformBuffersDynamic           uint32
	MaxDescriptorSetStorageBuffers                  uint32
	MaxDescriptorSetStorageBuffersDynamic           uint32
	MaxDescriptorSetSampledImages                   uint32
	MaxDescriptorSetStorageImages                   uint32
	MaxDescriptorSetInputAttachments                uint32
	MaxVertexInputAttributes                        uint32
	MaxVertexInputBindings                          uint32
	MaxVertexInputAttributeOffset                   uint32
	MaxVertexInputBindingStride                     uint32
	MaxVertexOutputComponents                       uint32
	MaxTessellationGenerationLevel                  uint32
	MaxTessellationPatchSize                        uint32
	MaxTessellationControlPerVertexInputComponents  uint32
	MaxTessellationControlPerVertexOutputComponents uint32
	MaxTessellationControlPerPatchOutputComponents  uint32
	MaxTessellationControlTotalOutputComponents     uint32
	MaxTessellationEvaluationInputComponents        uint32
	MaxTessellationEvaluationOutputComponents       uint32
	MaxGeometryShaderInvocations                    uint32
	MaxGeometryInputComponents                      uint32
	MaxGeometryOutputComponents                     uint32
	MaxGeometryOutputVertices                       uint32
	MaxGeometryTotalOutputComponents                uint32
	MaxFragmentInputComponents                      uint32
	MaxFragmentOutputAttachments                    uint32
	MaxFragmentDualSrcAttachments                   uint32
	MaxFragmentCombinedOutputResources              uint32
	MaxComputeSharedMemorySize                      uint32
	MaxComputeWorkGroupCount                        [3]uint32
	MaxComputeWorkGroupInvocations                  uint32
	MaxComputeWorkGroupSize                         [3]uint32
	SubPixelPrecisionBits                           uint32
	SubTexelPrecisionBits                           uint32
	MipmapPrecisionBits                             uint32
	MaxDrawIndexedIndexValue                        uint32
	MaxDrawIndirectCount                            uint32
	MaxSamplerLodBias                               float32
	MaxSamplerAnisotropy                            float32
	MaxViewports                                    uint32
	MaxViewportDimensions                           [2]uint32
	ViewportBoundsRange                             [2]float32
	ViewportSubPixelBits                            uint32
	MinMemoryMapAlignment                           uintptr
	MinTexelBufferOffsetAlignment                   uint64
	MinUniformBufferOffsetAlignment                 uint64
	MinStorageBufferOffsetAlignment                 uint64
	MinTexelOffset                                  int32
	MaxTexelOffset                                  uint32
	MinTexelGatherOffset                            int32
	MaxTexelGatherOffset                            uint32
	MinInterpolationOffset                          float32
	MaxInterpolationOffset                          float32
	SubPixelInterpolationOffsetBits                 uint32
	MaxFramebufferWidth                             uint32
	MaxFramebufferHeight                            uint32
	MaxFramebufferLayers                            uint32
	FramebufferColorSampleCounts                    uint32
	FramebufferDepthSampleCounts                    uint32
	FramebufferStencilSampleCounts                  uint32
	FramebufferNoAttachmentsSampleCounts            uint32
	MaxColorAttachments                             uint32
	SampledImageColorSampleCounts                   uint32
	SampledImageIntegerSampleCounts                 uint32
	SampledImageDepthSampleCounts                   uint32
	SampledImageStencilSampleCounts                 uint32
	StorageImageSampleCounts                        uint32
	MaxSampleMaskWords                              uint32
	TimestampComputeAndGraphics                     uint32
	TimestampPeriod                                 float32
	MaxClipDistances                                uint32
	MaxCullDistances                                uint32
	MaxCombinedClipAndCullDistances                 uint32
	DiscreteQueuePriorities                         uint32
	PointSizeRange                                  [2]float32
	LineWidthRange                                  [2]float32
	PointSizeGranularity                            float32
	LineWidthGranularity                            float32
	StrictLines                                     uint32
	StandardSampleLocations                         uint32
	OptimalBufferCopyOffsetAlignment                uint64
	OptimalBufferCopyRowPitchAlignment              uint64
	NonCoherentAtomSize                             uint64
}
