package vulkan

import (
	"fmt"
	"io/fs"
	"math"
	"unsafe"
)

// Pipeline statistics (VK_KHR_pipeline_executable_properties): what the
// driver's compiler made of a kernel, in its own words: registers, spills,
// shared memory, instruction counts. Kernels on a GPU are tuned by these
// (a kernel that holds too many registers runs few workgroups at once);
// a device opened with DeviceOptions.PipelineStatistics captures them for
// every kernel it builds, and vkprobe -stats prints them.

// Executable is one executable of a pipeline (a compute pipeline has one)
// and the driver's statistics of it.
type Executable struct {
	Name, Description string
	SubgroupSize      uint32
	Statistics        []Statistic
}

// Statistic is one named value, in the type the driver reported it: bool,
// int64, uint64 or float64.
type Statistic struct {
	Name, Description string
	Value             any
}

func (s Statistic) String() string { return fmt.Sprintf("%s %v", s.Name, s.Value) }

const (
	stPhysicalDevicePipelineExecutableFeatures = 1000269000
	stPipelineInfoKHR                          = 1000269001
	stPipelineExecutablePropertiesKHR          = 1000269002
	stPipelineExecutableInfoKHR                = 1000269003
	stPipelineExecutableStatisticKHR           = 1000269004
	// VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
	pipelineCreateCaptureStatistics = 0x40

	statisticBool32  = 0
	statisticInt64   = 1
	statisticUint64  = 2
	statisticFloat64 = 3
)

type physicalDevicePipelineExecutablePropertiesFeaturesKHR struct {
	SType                  uint32
	PNext                  unsafe.Pointer
	PipelineExecutableInfo uint32
}

type pipelineInfoKHR struct {
	SType    uint32
	PNext    unsafe.Pointer
	Pipeline ndHandle
}

type pipelineExecutablePropertiesKHR struct {
	SType        uint32
	PNext        unsafe.Pointer
	Stages       uint32
	Name         [maxDescriptionSize]byte
	Description  [maxDescriptionSize]byte
	SubgroupSize uint32
}

type pipelineExecutableInfoKHR struct {
	SType           uint32
	PNext           unsafe.Pointer
	Pipeline        ndHandle
	ExecutableIndex uint32
}

type pipelineExecutableStatisticKHR struct {
	SType       uint32
	PNext       unsafe.Pointer
	Name        [maxDescriptionSize]byte
	Description [maxDescriptionSize]byte
	Format      uint32
	Value       uint64 // VkPipelineExecutableStatisticValueKHR: a union of 8 bytes
}

// value is the statistic's value in its format's Go type.
func (s *pipelineExecutableStatisticKHR) value() any {
	switch s.Format {
	case statisticBool32:
		return uint32(s.Value) != 0
	case statisticInt64:
		return int64(s.Value)
	case statisticUint64:
		return s.Value
	case statisticFloat64:
		return math.Float64frombits(s.Value)
	}
	return fmt.Sprintf("format %d: %#x", s.Format, s.Value)
}

// Executables returns the driver's statistics of the kernel's pipeline.
// The device must have been opened with DeviceOptions.PipelineStatistics.
func (k *Kernel) Executables() ([]Executable, error) {
	d := k.d
	if !d.stats {
		return nil, fmt.Errorf("vulkan: %s: the device was opened without pipeline statistics (DeviceOptions.PipelineStatistics)", k.name)
	}
	f := &d.fn
	pi := &pipelineInfoKHR{SType: stPipelineInfoKHR, Pipeline: k.pipeline}
	var n uint32
	if err := check("vkGetPipelineExecutablePropertiesKHR", call(f.getPipelineExecutableProperties, d.h, uintptr(unsafe.Pointer(pi)), uintptr(unsafe.Pointer(&n)), 0)); err != nil {
		return nil, fmt.Errorf("vulkan: %s: %w", k.name, err)
	}
	if n == 0 {
		return nil, nil
	}
	props := make([]pipelineExecutablePropertiesKHR, n)
	for i := range props {
		props[i].SType = stPipelineExecutablePropertiesKHR
	}
	if err := check("vkGetPipelineExecutablePropertiesKHR", call(f.getPipelineExecutableProperties, d.h, uintptr(unsafe.Pointer(pi)), uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&props[0])))); err != nil {
		return nil, fmt.Errorf("vulkan: %s: %w", k.name, err)
	}
	var out []Executable
	for i, p := range props[:n] {
		e := Executable{Name: gostr(p.Name[:]), Description: gostr(p.Description[:]), SubgroupSize: p.SubgroupSize}
		ei := &pipelineExecutableInfoKHR{SType: stPipelineExecutableInfoKHR, Pipeline: k.pipeline, ExecutableIndex: uint32(i)}
		var m uint32
		if err := check("vkGetPipelineExecutableStatisticsKHR", call(f.getPipelineExecutableStatistics, d.h, uintptr(unsafe.Pointer(ei)), uintptr(unsafe.Pointer(&m)), 0)); err != nil {
			return nil, fmt.Errorf("vulkan: %s: %w", k.name, err)
		}
		if m > 0 {
			stats := make([]pipelineExecutableStatisticKHR, m)
			for j := range stats {
				stats[j].SType = stPipelineExecutableStatisticKHR
			}
			if err := check("vkGetPipelineExecutableStatisticsKHR", call(f.getPipelineExecutableStatistics, d.h, uintptr(unsafe.Pointer(ei)), uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&stats[0])))); err != nil {
				return nil, fmt.Errorf("vulkan: %s: %w", k.name, err)
			}
			for _, s := range stats[:m] {
				e.Statistics = append(e.Statistics, Statistic{Name: gostr(s.Name[:]), Description: gostr(s.Description[:]), Value: s.value()})
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// ShaderNames lists the embedded SPIR-V files whose names match pattern
// (path.Match syntax: "attention_coop_[df]*_d64_bf16.spv", the fwd, dq, dkv, dk and dv kernels).
func ShaderNames(pattern string) ([]string, error) {
	m, err := fs.Glob(shaderFS, "shaders/"+pattern)
	if err != nil {
		return nil, fmt.Errorf("vulkan: shader pattern %q: %w", pattern, err)
	}
	for i := range m {
		m[i] = m[i][len("shaders/"):]
	}
	return m, nil
}

// ShaderExecutables builds the embedded SPIR-V file name as a kernel
// (with the most storage buffers and push-constant bytes any of the
// package's kernels binds, which every one of them fits) and returns the
// driver's statistics of it. The device must have been opened with
// DeviceOptions.PipelineStatistics.
func (d *Device) ShaderExecutables(name string) ([]Executable, error) {
	code, err := spirv(name)
	if err != nil {
		return nil, err
	}
	k, err := d.NewKernel(KernelSpec{Name: name, SPIRV: code, Buffers: maxKernelBuffers, PushSize: 128})
	if err != nil {
		return nil, err
	}
	defer k.Close()
	return k.Executables()
}

// maxKernelBuffers is the most storage buffers a kernel of the package
// binds (the attention kernels' ten).
const maxKernelBuffers = 10
