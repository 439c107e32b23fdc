package vulkan

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// Device is a logical VkDevice with one compute queue, its memory
// suballocator and a pipeline cache. Its methods may be called from
// several goroutines (allocation and submission are locked); a Recorder
// belongs to one goroutine.
type Device struct {
	Physical *PhysicalDevice
	inst     *Instance
	h        handle
	family   uint32
	queue    handle
	// timestampBits is the queue family's timestampValidBits: how many
	// low bits of a timestamp count (0: the queue writes none).
	timestampBits uint32
	cache         ndHandle
	mem           physicalDeviceMemoryProperties

	submitMu sync.Mutex // vkQueueSubmit needs the queue externally synchronized
	alloc    *allocator

	// tensorErr is why the device was created without the tensor-core
	// GEMMs' features its physical device offers (nil: with them, or
	// none offered).
	tensorErr error
	// cm2Err is why it was created without VK_NV_cooperative_matrix2's
	// features (the coopmat2 variants) though its device offers them.
	cm2Err error

	// stats: opened with DeviceOptions.PipelineStatistics (NewKernel
	// asks the driver to capture each pipeline's statistics).
	stats bool

	// stageAlways makes Buffer.Write and Read copy through staging
	// buffers even where device memory is mapped (tests the discrete-GPU
	// path on lavapipe).
	stageAlways bool

	fn deviceFuncs
}

// deviceFuncs are the device-level entry points, from vkGetDeviceProcAddr.
type deviceFuncs struct {
	destroyDevice, getDeviceQueue, deviceWaitIdle                                                uintptr
	createBuffer, destroyBuffer, getBufferMemoryRequirements, bindBufferMemory                   uintptr
	allocateMemory, freeMemory, mapMemory, unmapMemory                                           uintptr
	createShaderModule, destroyShaderModule                                                      uintptr
	createDescriptorSetLayout, destroyDescriptorSetLayout                                        uintptr
	createPipelineLayout, destroyPipelineLayout                                                  uintptr
	createPipelineCache, destroyPipelineCache, getPipelineCacheData                              uintptr
	createComputePipelines, destroyPipeline                                                      uintptr
	createDescriptorPool, destroyDescriptorPool, resetDescriptorPool                             uintptr
	allocateDescriptorSets, updateDescriptorSets                                                 uintptr
	createCommandPool, destroyCommandPool, resetCommandPool, allocateCommandBuffers              uintptr
	beginCommandBuffer, endCommandBuffer                                                         uintptr
	cmdBindPipeline, cmdBindDescriptorSets, cmdPushConstants, cmdDispatch, cmdPipelineBarrier    uintptr
	cmdCopyBuffer, cmdFillBuffer                                                                 uintptr
	queueSubmit, createFence, destroyFence, waitForFences, resetFences                           uintptr
	createQueryPool, destroyQueryPool, getQueryPoolResults, cmdResetQueryPool, cmdWriteTimestamp uintptr
	// VK_KHR_pipeline_executable_properties, with DeviceOptions.PipelineStatistics
	getPipelineExecutableProperties, getPipelineExecutableStatistics uintptr
}

// DeviceOptions are choices OpenDeviceWith takes.
type DeviceOptions struct {
	// PipelineCache seeds the device's pipeline cache, as
	// PipelineCacheData returned it (perhaps in an earlier process). The
	// driver checks the data's header and ignores data made by another
	// device or driver version.
	PipelineCache []byte
	// PipelineStatistics enables VK_KHR_pipeline_executable_properties,
	// so that Kernel.Executables reports what the driver's compiler made
	// of each kernel (registers, spills, shared memory: for tuning
	// kernels, vkprobe -stats). An error where the device lacks it.
	PipelineStatistics bool
}

// OpenDevice creates a logical device on p with one queue from the first
// queue family that does compute, and an empty pipeline cache.
func (in *Instance) OpenDevice(p *PhysicalDevice) (*Device, error) { return in.OpenDeviceCache(p, nil) }

// OpenDeviceCache is OpenDevice with the pipeline cache seeded from
// cacheData, as PipelineCacheData returned it (perhaps in an earlier
// process). The driver checks the data's header and ignores data made by
// another device or driver version.
func (in *Instance) OpenDeviceCache(p *PhysicalDevice, cacheData []byte) (*Device, error) {
	return in.OpenDeviceWith(p, DeviceOptions{PipelineCache: cacheData})
}

// OpenDeviceWith is OpenDevice with options.
func (in *Instance) OpenDeviceWith(p *PhysicalDevice, o DeviceOptions) (*Device, error) {
	if p == nil || p.h == 0 {
		return nil, fmt.Errorf("vulkan: OpenDevice: no physical device")
	}
	if o.PipelineStatistics && !p.HasExtension("VK_KHR_pipeline_executable_properties") {
		return nil, fmt.Errorf("vulkan: %s does not offer VK_KHR_pipeline_executable_properties (pipeline statistics)", p.Name)
	}
	cacheData := o.PipelineCache
	var n uint32
	call(in.getPhysicalDeviceQueueFamilies, p.h, uintptr(unsafe.Pointer(&n)), 0)
	if n == 0 {
		return nil, fmt.Errorf("vulkan: %s has no queue families", p.Name)
	}
	fams := make([]queueFamilyProperties, n)
	call(in.getPhysicalDeviceQueueFamilies, p.h, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&fams[0])))
	family := -1
	for i, f := range fams[:n] {
		if f.QueueFlags&queueComputeBit != 0 && f.QueueCount > 0 {
			family = i
			break
		}
	}
	if family < 0 {
		return nil, fmt.Errorf("vulkan: %s has no compute queue", p.Name)
	}
	prio := new(float32)
	*prio = 1
	qci := &deviceQueueCreateInfo{SType: stDeviceQueueCreateInfo, QueueFamilyIndex: uint32(family), QueueCount: 1, PQueuePriorities: prio}
	d := &Device{Physical: p, inst: in, family: uint32(family), timestampBits: fams[family].TimestampValidBits, stats: o.PipelineStatistics}
	tensor := p.tensorAny(RoundFP16) || p.tensorAny(RoundBF16)
	cm2 := tensor && p.cm2Any()
	r := createDevice(in, p, qci, tensor, cm2, d.stats, &d.h)
	if cm2 && Result(int32(r)) != Success {
		// Refused with VK_NV_cooperative_matrix2: the coopmat1 variants
		// still run.
		d.cm2Err = fmt.Errorf("vkCreateDevice with VK_NV_cooperative_matrix2's features: %w", check("vkCreateDevice", r))
		r = createDevice(in, p, qci, true, false, d.stats, &d.h)
	}
	if tensor && Result(int32(r)) != Success {
		// A driver that refuses the cooperative-matrix features still
		// runs everything else: without them, on the fp32 GEMM.
		d.tensorErr = fmt.Errorf("vkCreateDevice with the cooperative-matrix features: %w", check("vkCreateDevice", r))
		r = createDevice(in, p, qci, false, false, d.stats, &d.h)
	}
	if err := check("vkCreateDevice", r); err != nil {
		return nil, fmt.Errorf("vulkan: %s: %w", p.Name, err)
	}
	get := func(name string) uintptr {
		s := cstr(name)
		return call(in.getDeviceProcAddr, d.h, uintptr(unsafe.Pointer(s)))
	}
	f := &d.fn
	procs := []procEntry{
		{"vkDestroyDevice", &f.destroyDevice}, {"vkGetDeviceQueue", &f.getDeviceQueue}, {"vkDeviceWaitIdle", &f.deviceWaitIdle},
		{"vkCreateBuffer", &f.createBuffer}, {"vkDestroyBuffer", &f.destroyBuffer},
		{"vkGetBufferMemoryRequirements", &f.getBufferMemoryRequirements}, {"vkBindBufferMemory", &f.bindBufferMemory},
		{"vkAllocateMemory", &f.allocateMemory}, {"vkFreeMemory", &f.freeMemory},
		{"vkMapMemory", &f.mapMemory}, {"vkUnmapMemory", &f.unmapMemory},
		{"vkCreateShaderModule", &f.createShaderModule}, {"vkDestroyShaderModule", &f.destroyShaderModule},
		{"vkCreateDescriptorSetLayout", &f.createDescriptorSetLayout}, {"vkDestroyDescriptorSetLayout", &f.destroyDescriptorSetLayout},
		{"vkCreatePipelineLayout", &f.createPipelineLayout}, {"vkDestroyPipelineLayout", &f.destroyPipelineLayout},
		{"vkCreatePipelineCache", &f.createPipelineCache}, {"vkDestroyPipelineCache", &f.destroyPipelineCache},
		{"vkGetPipelineCacheData", &f.getPipelineCacheData},
		{"vkCreateComputePipelines", &f.createComputePipelines}, {"vkDestroyPipeline", &f.destroyPipeline},
		{"vkCreateDescriptorPool", &f.createDescriptorPool}, {"vkDestroyDescriptorPool", &f.destroyDescriptorPool},
		{"vkResetDescriptorPool", &f.resetDescriptorPool},
		{"vkAllocateDescriptorSets", &f.allocateDescriptorSets}, {"vkUpdateDescriptorSets", &f.updateDescriptorSets},
		{"vkCreateCommandPool", &f.createCommandPool}, {"vkDestroyCommandPool", &f.destroyCommandPool},
		{"vkResetCommandPool", &f.resetCommandPool}, {"vkAllocateCommandBuffers", &f.allocateCommandBuffers},
		{"vkBeginCommandBuffer", &f.beginCommandBuffer}, {"vkEndCommandBuffer", &f.endCommandBuffer},
		{"vkCmdBindPipeline", &f.cmdBindPipeline}, {"vkCmdBindDescriptorSets", &f.cmdBindDescriptorSets},
		{"vkCmdPushConstants", &f.cmdPushConstants}, {"vkCmdDispatch", &f.cmdDispatch},
		{"vkCmdPipelineBarrier", &f.cmdPipelineBarrier}, {"vkCmdCopyBuffer", &f.cmdCopyBuffer}, {"vkCmdFillBuffer", &f.cmdFillBuffer},
		{"vkQueueSubmit", &f.queueSubmit}, {"vkCreateFence", &f.createFence}, {"vkDestroyFence", &f.destroyFence},
		{"vkWaitForFences", &f.waitForFences}, {"vkResetFences", &f.resetFences},
		{"vkCreateQueryPool", &f.createQueryPool}, {"vkDestroyQueryPool", &f.destroyQueryPool},
		{"vkGetQueryPoolResults", &f.getQueryPoolResults}, {"vkCmdResetQueryPool", &f.cmdResetQueryPool},
		{"vkCmdWriteTimestamp", &f.cmdWriteTimestamp},
	}
	if d.stats {
		procs = append(procs, procEntry{"vkGetPipelineExecutablePropertiesKHR", &f.getPipelineExecutableProperties},
			procEntry{"vkGetPipelineExecutableStatisticsKHR", &f.getPipelineExecutableStatistics})
	}
	err := resolve("device "+p.Name, get, procs)
	if err != nil {
		if f.destroyDevice != 0 {
			call(f.destroyDevice, d.h, 0)
		}
		return nil, err
	}
	call(f.getDeviceQueue, d.h, uintptr(family), 0, uintptr(unsafe.Pointer(&d.queue)))
	call(in.getPhysicalDeviceMemoryProps, p.h, uintptr(unsafe.Pointer(&d.mem)))
	pci := &pipelineCacheCreateInfo{SType: stPipelineCacheCreateInfo}
	if len(cacheData) > 0 {
		pci.InitialDataSize, pci.PInitialData = uintptr(len(cacheData)), unsafe.Pointer(&cacheData[0])
	}
	if err := check("vkCreatePipelineCache", call(f.createPipelineCache, d.h, uintptr(unsafe.Pointer(pci)), 0, uintptr(unsafe.Pointer(&d.cache)))); err != nil {
		call(f.destroyDevice, d.h, 0)
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	d.alloc = newAllocator(d)
	return d, nil
}

// PipelineCacheData is the pipeline cache's contents, to be saved and
// given to OpenDeviceCache so later runs skip shader compilation.
func (d *Device) PipelineCacheData() ([]byte, error) {
	for range 3 { // the cache can grow between the two calls
		var n uintptr
		if err := check("vkGetPipelineCacheData", call(d.fn.getPipelineCacheData, d.h, uintptr(d.cache), uintptr(unsafe.Pointer(&n)), 0)); err != nil {
			return nil, fmt.Errorf("vulkan: %w", err)
		}
		if n == 0 {
			return nil, nil
		}
		data := make([]byte, n)
		r := call(d.fn.getPipelineCacheData, d.h, uintptr(d.cache), uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&data[0])))
		if Result(int32(r)) == Incomplete {
			continue
		}
		if err := check("vkGetPipelineCacheData", r); err != nil {
			return nil, fmt.Errorf("vulkan: %w", err)
		}
		return data[:n], nil
	}
	return nil, fmt.Errorf("vulkan: vkGetPipelineCacheData: the cache kept growing")
}

// WaitIdle waits until the device has finished all submitted work.
func (d *Device) WaitIdle() error {
	d.submitMu.Lock()
	defer d.submitMu.Unlock()
	if err := check("vkDeviceWaitIdle", call(d.fn.deviceWaitIdle, d.h)); err != nil {
		return fmt.Errorf("vulkan: %w", err)
	}
	return nil
}

// Close waits for the device, frees its memory and destroys it. Buffers,
// kernels and recorders made from it must not be used afterwards.
func (d *Device) Close() {
	if d.h == 0 {
		return
	}
	call(d.fn.deviceWaitIdle, d.h)
	d.alloc.close()
	call(d.fn.destroyPipelineCache, d.h, uintptr(d.cache), 0)
	call(d.fn.destroyDevice, d.h, 0)
	d.h = 0
}

// createDevice calls vkCreateDevice for p with the queue qci, the
// extensions p needs and, with tensor, the tensor-core GEMMs' extensions
// and features (tensorFP16, tensorBF16 of any tile), with cm2
// VK_NV_cooperative_matrix2's (tensorCM2), and with stats
// VK_KHR_pipeline_executable_properties', into h.
func createDevice(in *Instance, p *PhysicalDevice, qci *deviceQueueCreateInfo, tensor, cm2, stats bool, h *handle) uintptr {
	dci := &deviceCreateInfo{SType: stDeviceCreateInfo, QueueCreateInfoCount: 1, PQueueCreateInfos: qci}
	var names []*byte
	if p.HasExtension("VK_KHR_portability_subset") { // must be enabled where offered (MoltenVK)
		names = append(names, cstr("VK_KHR_portability_subset"))
	}
	mm := &physicalDeviceVulkanMemoryModelFeatures{SType: stPhysicalDeviceMemoryModelFeatures, VulkanMemoryModel: 1}
	f16 := &physicalDeviceShaderFloat16Int8Features{SType: stPhysicalDeviceFloat16Int8, ShaderFloat16: 1}
	nv := &physicalDeviceCooperativeMatrixFeaturesNV{SType: stPhysicalDeviceCoopMatFeaturesNV, CooperativeMatrix: 1}
	khr := &physicalDeviceCooperativeMatrixFeaturesKHR{SType: stPhysicalDeviceCoopMatFeaturesKHR, CooperativeMatrix: 1}
	bf := &physicalDeviceShaderBfloat16FeaturesKHR{SType: stPhysicalDeviceBFloat16FeaturesKHR, ShaderBFloat16Type: 1, ShaderBFloat16CooperativeMatrix: 1}
	cm := &physicalDeviceCooperativeMatrix2FeaturesNV{SType: stPhysicalDeviceCoopMat2FeaturesNV, CooperativeMatrixWorkgroupScope: 1,
		CooperativeMatrixFlexibleDimensions: 1, CooperativeMatrixTensorAddressing: 1, CooperativeMatrixPerElementOperations: 1}
	if tensor {
		mm.PNext, dci.PNext = dci.PNext, unsafe.Pointer(mm)
		// Each extension and feature structure once, for whichever
		// variants need it.
		var cm2f16, cm2bf16 bool
		for _, t := range cm2Tiles() {
			cm2f16 = cm2f16 || (cm2 && p.tensorCM2(t, RoundFP16))
			cm2bf16 = cm2bf16 || (cm2 && p.tensorCM2(t, RoundBF16))
		}
		nvFP16, khrBF16 := p.coop1Any(RoundFP16), p.coop1Any(RoundBF16)
		if nvFP16 {
			names = append(names, cstr("VK_NV_cooperative_matrix"))
			nv.PNext, dci.PNext = dci.PNext, unsafe.Pointer(nv)
		}
		if nvFP16 || cm2f16 {
			f16.PNext, dci.PNext = dci.PNext, unsafe.Pointer(f16)
		}
		if khrBF16 || cm2f16 || cm2bf16 {
			names = append(names, cstr("VK_KHR_cooperative_matrix"))
			khr.PNext, dci.PNext = dci.PNext, unsafe.Pointer(khr)
		}
		if khrBF16 || cm2bf16 {
			names = append(names, cstr("VK_KHR_shader_bfloat16"))
			bf.PNext, dci.PNext = dci.PNext, unsafe.Pointer(bf)
		}
		if cm2f16 || cm2bf16 {
			names = append(names, cstr("VK_NV_cooperative_matrix2"))
			cm.PNext, dci.PNext = dci.PNext, unsafe.Pointer(cm)
		}
	}
	pe := &physicalDevicePipelineExecutablePropertiesFeaturesKHR{SType: stPhysicalDevicePipelineExecutableFeatures, PipelineExecutableInfo: 1}
	if stats {
		names = append(names, cstr("VK_KHR_pipeline_executable_properties"))
		pe.PNext, dci.PNext = dci.PNext, unsafe.Pointer(pe)
	}
	if len(names) > 0 {
		dci.EnabledExtensionCount, dci.PpEnabledExtensionNames = uint32(len(names)), &names[0]
	}
	r := call(in.createDevice, p.h, uintptr(unsafe.Pointer(dci)), 0, uintptr(unsafe.Pointer(h)))
	runtime.KeepAlive(names) // dci points at them through unsafe.Pointers only
	runtime.KeepAlive([]any{mm, f16, nv, khr, bf, cm, pe, qci})
	return r
}
