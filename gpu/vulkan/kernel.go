package vulkan

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// KernelSpec describes a compute shader: SPIR-V whose entry point is
// "main", reading Buffers storage buffers at set 0, bindings 0..Buffers-1,
// and PushSize bytes of push constants.
type KernelSpec struct {
	Name     string // for errors
	SPIRV    []byte
	Buffers  int
	PushSize int
}

// Kernel is a compute pipeline with its layouts.
type Kernel struct {
	d        *Device
	name     string
	module   ndHandle
	setLay   ndHandle
	layout   ndHandle
	pipeline ndHandle
	buffers  int
	pushSize int
}

const spirvMagic = 0x07230203

// spirvWords copies SPIR-V bytes into 4-byte-aligned words (go:embed gives
// a []byte with no alignment promise).
func spirvWords(b []byte) ([]uint32, error) {
	if len(b) < 20 || len(b)%4 != 0 {
		return nil, fmt.Errorf("SPIR-V is %d bytes: not a whole number of words, or shorter than its header", len(b))
	}
	w := make([]uint32, len(b)/4)
	for i := range w {
		w[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	if w[0] != spirvMagic {
		return nil, fmt.Errorf("SPIR-V magic is %#08x, want %#08x (wrong file or endianness)", w[0], spirvMagic)
	}
	return w, nil
}

// NewKernel builds the compute pipeline for spec through the device's
// pipeline cache.
func (d *Device) NewKernel(spec KernelSpec) (*Kernel, error) {
	wrap := func(err error) error { return fmt.Errorf("vulkan: kernel %s: %w", spec.Name, err) }
	if spec.Buffers < 0 || spec.Buffers > 32 {
		return nil, wrap(fmt.Errorf("%d buffers; 0 to 32 are supported", spec.Buffers))
	}
	if spec.PushSize < 0 || spec.PushSize%4 != 0 || uint32(spec.PushSize) > d.Physical.MaxPushConstants {
		return nil, wrap(fmt.Errorf("push constants of %d bytes: need a multiple of 4 up to %d", spec.PushSize, d.Physical.MaxPushConstants))
	}
	words, err := spirvWords(spec.SPIRV)
	if err != nil {
		return nil, wrap(err)
	}
	k := &Kernel{d: d, name: spec.Name, buffers: spec.Buffers, pushSize: spec.PushSize}
	ok := false
	defer func() {
		if !ok {
			k.Close()
		}
	}()
	f := &d.fn
	smci := &shaderModuleCreateInfo{SType: stShaderModuleCreateInfo, CodeSize: uintptr(4 * len(words)), PCode: &words[0]}
	if err := check("vkCreateShaderModule", call(f.createShaderModule, d.h, uintptr(unsafe.Pointer(smci)), 0, uintptr(unsafe.Pointer(&k.module)))); err != nil {
		return nil, wrap(err)
	}
	bindings := make([]descriptorSetLayoutBinding, max(spec.Buffers, 1))
	for i := range spec.Buffers {
		bindings[i] = descriptorSetLayoutBinding{Binding: uint32(i), DescriptorType: descriptorTypeStorageBuffer, DescriptorCount: 1, StageFlags: shaderStageCompute}
	}
	dslci := &descriptorSetLayoutCreateInfo{SType: stDescriptorSetLayoutCreate, BindingCount: uint32(spec.Buffers), PBindings: &bindings[0]}
	if err := check("vkCreateDescriptorSetLayout", call(f.createDescriptorSetLayout, d.h, uintptr(unsafe.Pointer(dslci)), 0, uintptr(unsafe.Pointer(&k.setLay)))); err != nil {
		return nil, wrap(err)
	}
	pcr := &pushConstantRange{StageFlags: shaderStageCompute, Size: uint32(spec.PushSize)}
	plci := &pipelineLayoutCreateInfo{SType: stPipelineLayoutCreateInfo, SetLayoutCount: 1, PSetLayouts: &k.setLay}
	if spec.PushSize > 0 {
		plci.PushConstantRangeCount, plci.PPushConstantRanges = 1, pcr
	}
	if err := check("vkCreatePipelineLayout", call(f.createPipelineLayout, d.h, uintptr(unsafe.Pointer(plci)), 0, uintptr(unsafe.Pointer(&k.layout)))); err != nil {
		return nil, wrap(err)
	}
	cpci := &computePipelineCreateInfo{
		SType: stComputePipelineCreateInfo,
		Stage: pipelineShaderStageCreateInfo{
			SType: stPipelineShaderStageCreate, Stage: shaderStageCompute, Module: k.module, PName: cstr("main"),
		},
		Layout:            k.layout,
		BasePipelineIndex: -1,
	}
	if d.stats {
		cpci.Flags = pipelineCreateCaptureStatistics
	}
	if err := check("vkCreateComputePipelines", call(f.createComputePipelines, d.h, uintptr(d.cache), 1, uintptr(unsafe.Pointer(cpci)), 0, uintptr(unsafe.Pointer(&k.pipeline)))); err != nil {
		return nil, wrap(err)
	}
	ok = true
	return k, nil
}

// Name is the kernel's name.
func (k *Kernel) Name() string { return k.name }

// Close destroys the pipeline and its layouts. No submitted work may still use it.
func (k *Kernel) Close() {
	d, f := k.d, &k.d.fn
	if k.pipeline != 0 {
		call(f.destroyPipeline, d.h, uintptr(k.pipeline), 0)
	}
	if k.layout != 0 {
		call(f.destroyPipelineLayout, d.h, uintptr(k.layout), 0)
	}
	if k.setLay != 0 {
		call(f.destroyDescriptorSetLayout, d.h, uintptr(k.setLay), 0)
	}
	if k.module != 0 {
		call(f.destroyShaderModule, d.h, uintptr(k.module), 0)
	}
	k.pipeline, k.layout, k.setLay, k.module = 0, 0, 0, 0
}
