package vulkan

import (
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unsafe"
)

// Instance is a VkInstance with the instance-level entry points it needs.
type Instance struct {
	lib     *Library
	h       handle
	version uint32 // the API version asked for

	destroyInstance                  uintptr
	enumeratePhysicalDevices         uintptr
	getPhysicalDeviceProperties2     uintptr
	getPhysicalDeviceFeatures2       uintptr
	getPhysicalDeviceMemoryProps     uintptr
	getPhysicalDeviceQueueFamilies   uintptr
	enumerateDeviceExtensionProperty uintptr
	createDevice                     uintptr
	getDeviceProcAddr                uintptr
}

// NewInstance creates a Vulkan instance on lib, asking for the loader's
// version capped at 1.3. Vulkan 1.1 is the minimum (for
// vkGetPhysicalDeviceProperties2).
func NewInstance(lib *Library, appName string) (*Instance, error) {
	if lib == nil || lib.gipa == 0 {
		return nil, fmt.Errorf("vulkan: NewInstance: library not loaded")
	}
	v := lib.Version()
	if v < apiVersion(1, 1, 0) {
		return nil, fmt.Errorf("vulkan: loader %s speaks Vulkan %s; 1.1 is needed: %w", lib.name, versionString(v), ErrNoDevice)
	}
	if v > apiVersion(1, 3, 0) {
		v = apiVersion(1, 3, 0)
	}
	app := &applicationInfo{
		SType:            stApplicationInfo,
		PApplicationName: cstr(appName),
		PEngineName:      cstr("mixtune"),
		ApiVersion:       v,
	}
	ci := &instanceCreateInfo{SType: stInstanceCreateInfo, PApplicationInfo: app}
	// MoltenVK (macOS) is a "portability" driver: the loader lists it only
	// when the application enables VK_KHR_portability_enumeration.
	exts, err := lib.instanceExtensions()
	if err != nil {
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	for _, e := range exts {
		if e == "VK_KHR_portability_enumeration" {
			names := []*byte{cstr(e)}
			ci.Flags |= instanceCreateEnumeratePortability
			ci.EnabledExtensionCount, ci.PpEnabledExtensionNames = 1, &names[0]
		}
	}
	in := &Instance{lib: lib, version: v}
	if err := check("vkCreateInstance", call(lib.createInstance, uintptr(unsafe.Pointer(ci)), 0, uintptr(unsafe.Pointer(&in.h)))); err != nil {
		if e, ok := err.(*Error); ok && e.Result == ErrorIncompatibleDriver {
			return nil, fmt.Errorf("vulkan: %w (no driver: %v)", ErrNoDevice, err)
		}
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	get := func(n string) uintptr { return lib.instanceProc(in.h, n) }
	err = resolve("instance", get, []procEntry{
		{"vkDestroyInstance", &in.destroyInstance},
		{"vkEnumeratePhysicalDevices", &in.enumeratePhysicalDevices},
		{"vkGetPhysicalDeviceProperties2", &in.getPhysicalDeviceProperties2},
		{"vkGetPhysicalDeviceFeatures2", &in.getPhysicalDeviceFeatures2},
		{"vkGetPhysicalDeviceMemoryProperties", &in.getPhysicalDeviceMemoryProps},
		{"vkGetPhysicalDeviceQueueFamilyProperties", &in.getPhysicalDeviceQueueFamilies},
		{"vkEnumerateDeviceExtensionProperties", &in.enumerateDeviceExtensionProperty},
		{"vkCreateDevice", &in.createDevice},
		{"vkGetDeviceProcAddr", &in.getDeviceProcAddr},
	})
	if err != nil {
		if in.destroyInstance != 0 {
			call(in.destroyInstance, in.h, 0)
		}
		return nil, err
	}
	return in, nil
}

// Close destroys the instance. Devices opened from it must be closed first.
func (in *Instance) Close() {
	if in.h != 0 {
		call(in.destroyInstance, in.h, 0)
		in.h = 0
	}
}

// DeviceType is VkPhysicalDeviceType.
type DeviceType uint32

// The physical device types.
const (
	TypeOther DeviceType = iota
	TypeIntegratedGPU
	TypeDiscreteGPU
	TypeVirtualGPU
	TypeCPU
)

func (t DeviceType) String() string {
	switch t {
	case TypeIntegratedGPU:
		return "integrated GPU"
	case TypeDiscreteGPU:
		return "discrete GPU"
	case TypeVirtualGPU:
		return "virtual GPU"
	case TypeCPU:
		return "CPU"
	}
	return "other"
}

// PhysicalDevice describes one Vulkan device: what device selection and
// kernel selection need to know about it.
type PhysicalDevice struct {
	Index         int // position in vkEnumeratePhysicalDevices' order
	Name          string
	VendorID      uint32
	DeviceID      uint32
	Type          DeviceType
	APIVersion    uint32 // packed; see VersionString
	DriverVersion uint32 // packed the vendor's way; see DriverVersionString
	DriverID      uint32 // VkDriverId, 0 when unknown
	DriverName    string // VkPhysicalDeviceDriverProperties.driverName
	DriverInfo    string
	UUID          [16]byte // deviceUUID: NVIDIA's is the CUDA/NVML GPU UUID
	PCIBusID      string   // "0000:01:00.0" with VK_EXT_pci_bus_info, else ""

	DeviceLocalBytes        uint64 // the largest device-local heap
	SubgroupSize            uint32
	MaxSharedMemory         uint32 // maxComputeSharedMemorySize, bytes
	MaxStorageBufferRange   uint32
	MaxWorkgroupInvocations uint32
	MaxWorkgroupCount       [3]uint32
	MaxPushConstants        uint32
	MinStorageBufferAlign   uint64
	TimestampPeriod         float32 // nanoseconds per timestamp tick

	ShaderFloat16        bool // shaderFloat16 (VkPhysicalDeviceShaderFloat16Int8Features)
	CooperativeMatrixKHR bool // VK_KHR_cooperative_matrix
	CooperativeMatrixNV  bool // VK_NV_cooperative_matrix
	CooperativeMatrix2NV bool // VK_NV_cooperative_matrix2
	ShaderBFloat16       bool // VK_KHR_shader_bfloat16

	// The features the tensor-core GEMMs need, each reported on (Vulkan
	// 1.2 devices only: their structures are core there): the Vulkan
	// memory model (cooperative-matrix shaders use it), the
	// cooperativeMatrix feature of VK_NV_cooperative_matrix and of
	// VK_KHR_cooperative_matrix, and VK_KHR_shader_bfloat16's bf16 type
	// with bf16 cooperative matrices.
	VulkanMemoryModel, CoopMatNVFeature, CoopMatKHRFeature, BFloat16CoopMat bool
	// CoopMatShapes are the cooperative-matrix shapes the device lists,
	// from vkGetPhysicalDeviceCooperativeMatrixPropertiesNV and ...KHR.
	CoopMatShapes []CoopMatShape
	// CoopMat2 is what VK_NV_cooperative_matrix2 offers (Vulkan 1.3
	// devices), for the workgroup-scope GEMM (gemm_cm2.comp).
	CoopMat2 CoopMat2Support

	Extensions []string // sorted

	h      handle
	core12 bool // the device and the instance speak Vulkan 1.2
	core13 bool // ... and 1.3 (SPIR-V 1.6, which gemm_cm2.comp is)
}

// CoopMat2Support is a device's VK_NV_cooperative_matrix2: the features
// the workgroup-scope GEMM uses, each reported on, the extension's limits
// and the workgroup-scope shapes it lists.
type CoopMat2Support struct {
	WorkgroupScope, FlexibleDimensions, TensorAddressing, PerElementOperations bool
	MaxWorkgroupSize, MaxDimension, ReservedSharedMemory                       uint32
	Shapes                                                                     []CoopMat2Shape
}

// A CoopMat2Shape is one flexible-dimension multiply VK_NV_cooperative_matrix2
// lists: M, N and K any multiples of the granularities (up to MaxDimension),
// for a workgroup of WorkgroupInvocations at scope Scope (2: workgroup).
type CoopMat2Shape struct {
	MGranularity, NGranularity, KGranularity uint32
	A, B, C, Result                          ComponentType
	Scope                                    uint32
	WorkgroupInvocations                     uint32
}

// Vendor names the vendor from its PCI id.
func (p *PhysicalDevice) Vendor() string {
	switch p.VendorID {
	case 0x10de:
		return "NVIDIA"
	case 0x1002:
		return "AMD"
	case 0x8086:
		return "Intel"
	case 0x13b5:
		return "ARM"
	case 0x5143:
		return "Qualcomm"
	case 0x106b:
		return "Apple"
	case 0x10005:
		return "Mesa"
	}
	return fmt.Sprintf("0x%04x", p.VendorID)
}

// UUIDString formats UUID as NVIDIA does: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func (p *PhysicalDevice) UUIDString() string {
	h := hex.EncodeToString(p.UUID[:])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// VersionString is the device's Vulkan version, as major.minor.patch.
func (p *PhysicalDevice) VersionString() string { return versionString(p.APIVersion) }

// DriverVersionString decodes DriverVersion: NVIDIA packs 10.8.8.6 bits,
// the others (Mesa included) the Vulkan version layout.
func (p *PhysicalDevice) DriverVersionString() string {
	v := p.DriverVersion
	if p.VendorID == 0x10de {
		return fmt.Sprintf("%d.%d.%d.%d", v>>22&0x3ff, v>>14&0xff, v>>6&0xff, v&0x3f)
	}
	return versionString(v)
}

// HasExtension reports whether the device offers the named extension.
func (p *PhysicalDevice) HasExtension(name string) bool {
	i := sort.SearchStrings(p.Extensions, name)
	return i < len(p.Extensions) && p.Extensions[i] == name
}

// PhysicalDevices lists the instance's devices with their properties. With
// none, the error wraps ErrNoDevice.
func (in *Instance) PhysicalDevices() ([]*PhysicalDevice, error) {
	var n uint32
	if err := check("vkEnumeratePhysicalDevices", call(in.enumeratePhysicalDevices, in.h, uintptr(unsafe.Pointer(&n)), 0)); err != nil {
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	if n == 0 {
		return nil, fmt.Errorf("vulkan: the loader found %w (is an ICD installed? VK_DRIVER_FILES selects one)", ErrNoDevice)
	}
	hs := make([]handle, n)
	if err := check("vkEnumeratePhysicalDevices", call(in.enumeratePhysicalDevices, in.h, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&hs[0])))); err != nil {
		return nil, fmt.Errorf("vulkan: %w", err)
	}
	devs := make([]*PhysicalDevice, 0, n)
	for i, h := range hs[:n] {
		p, err := in.describe(h)
		if err != nil {
			return nil, fmt.Errorf("vulkan: device %d: %w", i, err)
		}
		p.Index = i
		devs = append(devs, p)
	}
	return devs, nil
}

// describe queries one physical device.
func (in *Instance) describe(h handle) (*PhysicalDevice, error) {
	p := &PhysicalDevice{h: h}
	exts, err := in.deviceExtensions(h)
	if err != nil {
		return nil, err
	}
	p.Extensions = exts

	// Properties2 with the structures the device can fill chained behind it.
	props := &physicalDeviceProperties2{SType: stPhysicalDeviceProperties2}
	// Ask for the core version first: the driver and fp16 structures need 1.2 or their extensions.
	call(in.getPhysicalDeviceProperties2, h, uintptr(unsafe.Pointer(props)))
	api := props.Properties.ApiVersion
	// Core 1.2 structures need both the device and the instance at 1.2.
	core12 := min(api, in.version) >= apiVersion(1, 2, 0)
	id := &physicalDeviceIDProperties{SType: stPhysicalDeviceIDProperties}
	sub := &physicalDeviceSubgroupProperties{SType: stPhysicalDeviceSubgroupProps, PNext: unsafe.Pointer(id)}
	props.PNext = unsafe.Pointer(sub)
	drv := &physicalDeviceDriverProperties{SType: stPhysicalDeviceDriverProps}
	if core12 || p.HasExtension("VK_KHR_driver_properties") {
		drv.PNext = props.PNext
		props.PNext = unsafe.Pointer(drv)
	}
	pci := &physicalDevicePCIBusInfoPropertiesEXT{SType: stPhysicalDevicePCIBusInfo}
	hasPCI := p.HasExtension("VK_EXT_pci_bus_info")
	if hasPCI {
		pci.PNext = props.PNext
		props.PNext = unsafe.Pointer(pci)
	}
	call(in.getPhysicalDeviceProperties2, h, uintptr(unsafe.Pointer(props)))

	pp := &props.Properties
	p.Name = gostr(pp.DeviceName[:])
	p.VendorID, p.DeviceID = pp.VendorID, pp.DeviceID
	p.Type = DeviceType(pp.DeviceType)
	p.APIVersion, p.DriverVersion = pp.ApiVersion, pp.DriverVersion
	p.DriverID = drv.DriverID
	p.DriverName, p.DriverInfo = gostr(drv.DriverName[:]), gostr(drv.DriverInfo[:])
	p.UUID = id.DeviceUUID
	if hasPCI {
		p.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.%x", pci.PciDomain, pci.PciBus, pci.PciDevice, pci.PciFunction)
	}
	p.SubgroupSize = sub.SubgroupSize
	lim := &pp.Limits
	p.MaxSharedMemory = lim.MaxComputeSharedMemorySize
	p.MaxStorageBufferRange = lim.MaxStorageBufferRange
	p.MaxWorkgroupInvocations = lim.MaxComputeWorkGroupInvocations
	p.MaxWorkgroupCount = lim.MaxComputeWorkGroupCount
	p.MaxPushConstants = lim.MaxPushConstantsSize
	p.MinStorageBufferAlign = lim.MinStorageBufferOffsetAlignment
	p.TimestampPeriod = lim.TimestampPeriod

	var mem physicalDeviceMemoryProperties
	call(in.getPhysicalDeviceMemoryProps, h, uintptr(unsafe.Pointer(&mem)))
	for _, heap := range mem.MemoryHeaps[:min(mem.MemoryHeapCount, maxMemoryHeaps)] {
		if heap.Flags&memoryHeapDeviceLocal != 0 && heap.Size > p.DeviceLocalBytes {
			p.DeviceLocalBytes = heap.Size
		}
	}

	if core12 || p.HasExtension("VK_KHR_shader_float16_int8") {
		f16 := &physicalDeviceShaderFloat16Int8Features{SType: stPhysicalDeviceFloat16Int8}
		feats := &physicalDeviceFeatures2{SType: stPhysicalDeviceFeatures2, PNext: unsafe.Pointer(f16)}
		call(in.getPhysicalDeviceFeatures2, h, uintptr(unsafe.Pointer(feats)))
		p.ShaderFloat16 = f16.ShaderFloat16 != 0
	}
	p.CooperativeMatrixKHR = p.HasExtension("VK_KHR_cooperative_matrix")
	p.CooperativeMatrixNV = p.HasExtension("VK_NV_cooperative_matrix")
	p.CooperativeMatrix2NV = p.HasExtension("VK_NV_cooperative_matrix2")
	p.ShaderBFloat16 = p.HasExtension("VK_KHR_shader_bfloat16")
	p.core12 = core12
	p.core13 = min(api, in.version) >= apiVersion(1, 3, 0)
	if core12 {
		in.describeCoopMat(p)
	}
	return p, nil
}

// A CoopMatShape is one cooperative-matrix multiply the device runs:
// D (M×N, type Result) = A (M×K) · B (K×N) + C, at scope Scope.
type CoopMatShape struct {
	M, N, K         uint32
	A, B, C, Result ComponentType
	Scope           uint32 // VkScopeKHR: 3 is subgroup
	KHR             bool   // listed by VK_KHR_cooperative_matrix (else VK_NV_cooperative_matrix)
}

// ComponentType is a VkComponentTypeKHR (the NV values are the same).
type ComponentType uint32

// The component types the GEMMs use.
const (
	ComponentFP16 ComponentType = 0
	ComponentFP32 ComponentType = 1
	ComponentBF16 ComponentType = 1000141000
)

func (c ComponentType) String() string {
	switch c {
	case ComponentFP16:
		return "fp16"
	case ComponentFP32:
		return "fp32"
	case ComponentBF16:
		return "bf16"
	}
	return fmt.Sprintf("type%d", uint32(c))
}

func (s CoopMatShape) String() string {
	ext := "NV"
	if s.KHR {
		ext = "KHR"
	}
	return fmt.Sprintf("%dx%dx%d %s·%s+%s→%s (%s)", s.M, s.N, s.K, s.A, s.B, s.C, s.Result, ext)
}

// scopeSubgroup is VK_SCOPE_SUBGROUP_KHR; scopeWorkgroup VK_SCOPE_WORKGROUP_KHR.
const (
	scopeSubgroup  = 3
	scopeWorkgroup = 2
)

// HasCoopMat reports whether the device lists the subgroup-scope shape
// M×N×K with A and B of type ab and C and the result fp32, through the
// KHR extension (khr) or the NV one.
func (p *PhysicalDevice) HasCoopMat(khr bool, m, n, k uint32, ab ComponentType) bool {
	for _, s := range p.CoopMatShapes {
		if s.KHR == khr && s.M == m && s.N == n && s.K == k && s.A == ab && s.B == ab &&
			s.C == ComponentFP32 && s.Result == ComponentFP32 && s.Scope == scopeSubgroup {
			return true
		}
	}
	return false
}

// describeCoopMat fills p's cooperative-matrix features and shapes.
func (in *Instance) describeCoopMat(p *PhysicalDevice) {
	mm := &physicalDeviceVulkanMemoryModelFeatures{SType: stPhysicalDeviceMemoryModelFeatures}
	feats := &physicalDeviceFeatures2{SType: stPhysicalDeviceFeatures2, PNext: unsafe.Pointer(mm)}
	nv := &physicalDeviceCooperativeMatrixFeaturesNV{SType: stPhysicalDeviceCoopMatFeaturesNV}
	if p.CooperativeMatrixNV {
		nv.PNext, feats.PNext = feats.PNext, unsafe.Pointer(nv)
	}
	khr := &physicalDeviceCooperativeMatrixFeaturesKHR{SType: stPhysicalDeviceCoopMatFeaturesKHR}
	if p.CooperativeMatrixKHR {
		khr.PNext, feats.PNext = feats.PNext, unsafe.Pointer(khr)
	}
	bf := &physicalDeviceShaderBfloat16FeaturesKHR{SType: stPhysicalDeviceBFloat16FeaturesKHR}
	if p.ShaderBFloat16 {
		bf.PNext, feats.PNext = feats.PNext, unsafe.Pointer(bf)
	}
	cm2 := &physicalDeviceCooperativeMatrix2FeaturesNV{SType: stPhysicalDeviceCoopMat2FeaturesNV}
	hasCM2 := p.CooperativeMatrix2NV && p.core13
	if hasCM2 {
		cm2.PNext, feats.PNext = feats.PNext, unsafe.Pointer(cm2)
	}
	call(in.getPhysicalDeviceFeatures2, p.h, uintptr(unsafe.Pointer(feats)))
	if hasCM2 {
		in.describeCoopMat2(p, cm2)
	}
	p.VulkanMemoryModel = mm.VulkanMemoryModel != 0
	p.CoopMatNVFeature = nv.CooperativeMatrix != 0
	p.CoopMatKHRFeature = khr.CooperativeMatrix != 0
	p.BFloat16CoopMat = bf.ShaderBFloat16Type != 0 && bf.ShaderBFloat16CooperativeMatrix != 0

	if p.CoopMatNVFeature {
		nvs := listCoopMat(in, p.h, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV",
			func(c *cooperativeMatrixPropertiesNV) { c.SType = stCooperativeMatrixPropertiesNV })
		for _, c := range nvs {
			p.CoopMatShapes = append(p.CoopMatShapes, CoopMatShape{M: c.MSize, N: c.NSize, K: c.KSize,
				A: ComponentType(c.AType), B: ComponentType(c.BType), C: ComponentType(c.CType), Result: ComponentType(c.DType), Scope: c.Scope})
		}
	}
	if p.CoopMatKHRFeature {
		khrs := listCoopMat(in, p.h, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
			func(c *cooperativeMatrixPropertiesKHR) { c.SType = stCooperativeMatrixPropertiesKHR })
		for _, c := range khrs {
			p.CoopMatShapes = append(p.CoopMatShapes, CoopMatShape{M: c.MSize, N: c.NSize, K: c.KSize,
				A: ComponentType(c.AType), B: ComponentType(c.BType), C: ComponentType(c.CType), Result: ComponentType(c.ResultType),
				Scope: c.Scope, KHR: true})
		}
	}
}

// describeCoopMat2 fills p.CoopMat2 from the features the device
// reported (cm2), its properties and its flexible-dimension shapes.
func (in *Instance) describeCoopMat2(p *PhysicalDevice, cm2 *physicalDeviceCooperativeMatrix2FeaturesNV) {
	c := &p.CoopMat2
	c.WorkgroupScope = cm2.CooperativeMatrixWorkgroupScope != 0
	c.FlexibleDimensions = cm2.CooperativeMatrixFlexibleDimensions != 0
	c.TensorAddressing = cm2.CooperativeMatrixTensorAddressing != 0
	c.PerElementOperations = cm2.CooperativeMatrixPerElementOperations != 0
	props := &physicalDeviceCooperativeMatrix2PropertiesNV{SType: stPhysicalDeviceCoopMat2PropertiesNV}
	p2 := &physicalDeviceProperties2{SType: stPhysicalDeviceProperties2, PNext: unsafe.Pointer(props)}
	call(in.getPhysicalDeviceProperties2, p.h, uintptr(unsafe.Pointer(p2)))
	c.MaxWorkgroupSize = props.CooperativeMatrixWorkgroupScopeMaxWorkgroupSize
	c.MaxDimension = props.CooperativeMatrixFlexibleDimensionsMaxDimension
	c.ReservedSharedMemory = props.CooperativeMatrixWorkgroupScopeReservedSharedMemory
	if !c.FlexibleDimensions {
		return
	}
	shapes := listCoopMat(in, p.h, "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV",
		func(s *cooperativeMatrixFlexibleDimensionsPropertiesNV) { s.SType = stCoopMatFlexibleDimensionsPropsNV })
	for _, s := range shapes {
		c.Shapes = append(c.Shapes, CoopMat2Shape{MGranularity: s.MGranularity, NGranularity: s.NGranularity, KGranularity: s.KGranularity,
			A: ComponentType(s.AType), B: ComponentType(s.BType), C: ComponentType(s.CType), Result: ComponentType(s.ResultType),
			Scope: s.Scope, WorkgroupInvocations: s.WorkgroupInvocations})
	}
}

// listCoopMat calls the instance function fn, a
// vkGetPhysicalDeviceCooperativeMatrix*Properties*(device, count, props),
// with structures whose sType init sets: nil when the function is missing
// or fails.
func listCoopMat[T any](in *Instance, h handle, fn string, init func(*T)) []T {
	f := in.lib.instanceProc(in.h, fn)
	if f == 0 {
		return nil
	}
	var n uint32
	if call(f, h, uintptr(unsafe.Pointer(&n)), 0) != 0 || n == 0 {
		return nil
	}
	ps := make([]T, n)
	for i := range ps {
		init(&ps[i])
	}
	if Result(int32(call(f, h, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&ps[0]))))) < 0 {
		return nil
	}
	return ps[:min(int(n), len(ps))]
}

// deviceExtensions lists the device's extension names, sorted.
func (in *Instance) deviceExtensions(h handle) ([]string, error) {
	for range 3 { // the count can change between the two calls
		var n uint32
		if err := check("vkEnumerateDeviceExtensionProperties", call(in.enumerateDeviceExtensionProperty, h, 0, uintptr(unsafe.Pointer(&n)), 0)); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		props := make([]extensionProperties, n)
		r := call(in.enumerateDeviceExtensionProperty, h, 0, uintptr(unsafe.Pointer(&n)), uintptr(unsafe.Pointer(&props[0])))
		if Result(int32(r)) == Incomplete {
			continue
		}
		if err := check("vkEnumerateDeviceExtensionProperties", r); err != nil {
			return nil, err
		}
		names := make([]string, 0, n)
		for _, e := range props[:n] {
			names = append(names, gostr(e.ExtensionName[:]))
		}
		sort.Strings(names)
		return names, nil
	}
	return nil, fmt.Errorf("vkEnumerateDeviceExtensionProperties: the list kept changing")
}

// Select picks one of devs by spec: a decimal index into devs, a UUID
// ("GPU-…" or bare hex, dashes optional; a unique prefix is enough) or a
// PCI bus id ("0000:01:00.0", or without the domain "01:00.0").
func Select(devs []*PhysicalDevice, spec string) (*PhysicalDevice, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, fmt.Errorf("vulkan: empty device selector")
	}
	if i, err := strconv.Atoi(spec); err == nil {
		if i < 0 || i >= len(devs) {
			return nil, fmt.Errorf("vulkan: device index %d out of range (%d devices)", i, len(devs))
		}
		return devs[i], nil
	}
	var found []*PhysicalDevice
	if strings.Count(spec, ":") >= 1 && strings.Contains(spec, ".") {
		for _, d := range devs {
			if d.PCIBusID != "" && (strings.EqualFold(d.PCIBusID, spec) || strings.EqualFold(d.PCIBusID[5:], spec)) {
				found = append(found, d)
			}
		}
	} else {
		want := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(strings.TrimPrefix(spec, "GPU-"), "gpu-"), "-", ""))
		if want == "" {
			return nil, fmt.Errorf("vulkan: empty UUID in device selector %q", spec)
		}
		for _, d := range devs {
			if strings.HasPrefix(hex.EncodeToString(d.UUID[:]), want) {
				found = append(found, d)
			}
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("vulkan: no device matches %q", spec)
	case 1:
		return found[0], nil
	}
	return nil, fmt.Errorf("vulkan: %d devices match %q; give more of the UUID", len(found), spec)
}
