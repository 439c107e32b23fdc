package vulkan

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// mirrors pairs every Go mirror with its C structure.
var mirrors = []struct {
	c      string
	mirror any
}{
	{"VkApplicationInfo", applicationInfo{}},
	{"VkInstanceCreateInfo", instanceCreateInfo{}},
	{"VkExtensionProperties", extensionProperties{}},
	{"VkPhysicalDeviceSparseProperties", physicalDeviceSparseProperties{}},
	{"VkPhysicalDeviceLimits", physicalDeviceLimits{}},
	{"VkPhysicalDeviceProperties", physicalDeviceProperties{}},
	{"VkPhysicalDeviceProperties2", physicalDeviceProperties2{}},
	{"VkPhysicalDeviceIDProperties", physicalDeviceIDProperties{}},
	{"VkConformanceVersion", conformanceVersion{}},
	{"VkPhysicalDeviceDriverProperties", physicalDeviceDriverProperties{}},
	{"VkPhysicalDeviceSubgroupProperties", physicalDeviceSubgroupProperties{}},
	{"VkPhysicalDevicePCIBusInfoPropertiesEXT", physicalDevicePCIBusInfoPropertiesEXT{}},
	{"VkPhysicalDeviceFeatures2", physicalDeviceFeatures2{}},
	{"VkPhysicalDeviceShaderFloat16Int8Features", physicalDeviceShaderFloat16Int8Features{}},
	{"VkPhysicalDeviceVulkanMemoryModelFeatures", physicalDeviceVulkanMemoryModelFeatures{}},
	{"VkPhysicalDeviceCooperativeMatrixFeaturesNV", physicalDeviceCooperativeMatrixFeaturesNV{}},
	{"VkCooperativeMatrixPropertiesNV", cooperativeMatrixPropertiesNV{}},
	{"VkMemoryType", memoryType{}},
	{"VkMemoryHeap", memoryHeap{}},
	{"VkPhysicalDeviceMemoryProperties", physicalDeviceMemoryProperties{}},
	{"VkExtent3D", extent3D{}},
	{"VkQueueFamilyProperties", queueFamilyProperties{}},
	{"VkDeviceQueueCreateInfo", deviceQueueCreateInfo{}},
	{"VkDeviceCreateInfo", deviceCreateInfo{}},
	{"VkBufferCreateInfo", bufferCreateInfo{}},
	{"VkMemoryRequirements", memoryRequirements{}},
	{"VkMemoryAllocateInfo", memoryAllocateInfo{}},
	{"VkShaderModuleCreateInfo", shaderModuleCreateInfo{}},
	{"VkPipelineCacheCreateInfo", pipelineCacheCreateInfo{}},
	{"VkDescriptorSetLayoutBinding", descriptorSetLayoutBinding{}},
	{"VkDescriptorSetLayoutCreateInfo", descriptorSetLayoutCreateInfo{}},
	{"VkPushConstantRange", pushConstantRange{}},
	{"VkPipelineLayoutCreateInfo", pipelineLayoutCreateInfo{}},
	{"VkPipelineShaderStageCreateInfo", pipelineShaderStageCreateInfo{}},
	{"VkComputePipelineCreateInfo", computePipelineCreateInfo{}},
	{"VkDescriptorPoolSize", descriptorPoolSize{}},
	{"VkDescriptorPoolCreateInfo", descriptorPoolCreateInfo{}},
	{"VkDescriptorSetAllocateInfo", descriptorSetAllocateInfo{}},
	{"VkDescriptorBufferInfo", descriptorBufferInfo{}},
	{"VkWriteDescriptorSet", writeDescriptorSet{}},
	{"VkCommandPoolCreateInfo", commandPoolCreateInfo{}},
	{"VkCommandBufferAllocateInfo", commandBufferAllocateInfo{}},
	{"VkCommandBufferBeginInfo", commandBufferBeginInfo{}},
	{"VkMemoryBarrier", memoryBarrier{}},
	{"VkBufferCopy", bufferCopy{}},
	{"VkSubmitInfo", submitInfo{}},
	{"VkFenceCreateInfo", fenceCreateInfo{}},
	{"VkQueryPoolCreateInfo", queryPoolCreateInfo{}},
	{"VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR", physicalDevicePipelineExecutablePropertiesFeaturesKHR{}},
	{"VkPipelineInfoKHR", pipelineInfoKHR{}},
	{"VkPipelineExecutablePropertiesKHR", pipelineExecutablePropertiesKHR{}},
	{"VkPipelineExecutableInfoKHR", pipelineExecutableInfoKHR{}},
	{"VkPipelineExecutableStatisticKHR", pipelineExecutableStatisticKHR{}},
}

// newerMirrors are structures newer than Debian's vulkan_core.h
// (1.3.239): checked when the header at hand has them (point
// MIXTUNE_VULKAN_INCLUDE at a newer Vulkan-Headers include directory).
var newerMirrors = []struct {
	c      string
	mirror any
}{
	{"VkPhysicalDeviceCooperativeMatrixFeaturesKHR", physicalDeviceCooperativeMatrixFeaturesKHR{}},
	{"VkCooperativeMatrixPropertiesKHR", cooperativeMatrixPropertiesKHR{}},
	{"VkPhysicalDeviceShaderBfloat16FeaturesKHR", physicalDeviceShaderBfloat16FeaturesKHR{}},
	{"VkPhysicalDeviceCooperativeMatrix2FeaturesNV", physicalDeviceCooperativeMatrix2FeaturesNV{}},
	{"VkPhysicalDeviceCooperativeMatrix2PropertiesNV", physicalDeviceCooperativeMatrix2PropertiesNV{}},
	{"VkCooperativeMatrixFlexibleDimensionsPropertiesNV", cooperativeMatrixFlexibleDimensionsPropertiesNV{}},
}

// newerEnums are the values of newer enumerants the package spells out,
// checked like newerMirrors.
var newerEnums = []struct {
	c string
	v int64
}{
	{"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR", stPhysicalDeviceCoopMatFeaturesKHR},
	{"VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR", stCooperativeMatrixPropertiesKHR},
	{"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR", stPhysicalDeviceBFloat16FeaturesKHR},
	{"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV", stPhysicalDeviceCoopMat2FeaturesNV},
	{"VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_FLEXIBLE_DIMENSIONS_PROPERTIES_NV", stCoopMatFlexibleDimensionsPropsNV},
	{"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_PROPERTIES_NV", stPhysicalDeviceCoopMat2PropertiesNV},
	{"VK_COMPONENT_TYPE_BFLOAT16_KHR", int64(ComponentBF16)},
	{"VK_COMPONENT_TYPE_FLOAT16_KHR", int64(ComponentFP16)},
	{"VK_COMPONENT_TYPE_FLOAT32_KHR", int64(ComponentFP32)},
	{"VK_SCOPE_WORKGROUP_KHR", scopeWorkgroup},
	{"VK_SCOPE_SUBGROUP_KHR", scopeSubgroup},
	{"VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR", stPhysicalDevicePipelineExecutableFeatures},
	{"VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR", stPipelineInfoKHR},
	{"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_PROPERTIES_KHR", stPipelineExecutablePropertiesKHR},
	{"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR", stPipelineExecutableInfoKHR},
	{"VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR", stPipelineExecutableStatisticKHR},
	{"VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR", pipelineCreateCaptureStatistics},
	{"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR", statisticBool32},
	{"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR", statisticInt64},
	{"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR", statisticUint64},
	{"VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR", statisticFloat64},
}

// cField is a Go mirror's field name as C spells it: the first letter
// lower-cased, except the cooperative-matrix sizes, types and
// granularities (MSize…KSize, AType…DType, ResultType, MGranularity…),
// which C capitalises.
func cField(goName string) string {
	if len(goName) == 5 && goName != "SType" && (strings.HasSuffix(goName, "Size") || strings.HasSuffix(goName, "Type")) {
		return goName
	}
	if goName == "ResultType" || goName == "MGranularity" || goName == "NGranularity" || goName == "KGranularity" {
		return goName
	}
	return strings.ToLower(goName[:1]) + goName[1:]
}

// TestStructLayouts compiles a C program against vulkan_core.h that prints
// the size of every mirrored structure and the offset and size of each
// field, and compares them with the Go mirrors'.
func TestStructLayouts(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to compile the layout check")
	}
	var header, include string
	dirs := []string{"/usr/include", "/usr/local/include"}
	if d := os.Getenv("MIXTUNE_VULKAN_INCLUDE"); d != "" {
		dirs = append(dirs, d) // the last found wins
	}
	for _, dir := range dirs {
		if p := filepath.Join(dir, "vulkan", "vulkan_core.h"); fileExists(p) {
			header, include = p, dir
		}
	}
	if header == "" {
		t.Skip("no vulkan/vulkan_core.h (Debian: libvulkan-dev) to check the struct layouts against")
	}
	var src bytes.Buffer
	src.WriteString("#include <stdio.h>\n#include <stddef.h>\n#include <vulkan/vulkan_core.h>\nint main(void) {\n")
	text, err := os.ReadFile(header)
	if err != nil {
		t.Fatal(err)
	}
	checked := mirrors
	for _, m := range newerMirrors {
		if bytes.Contains(text, []byte("typedef struct "+m.c+" {")) {
			checked = append(checked, m)
		} else {
			t.Logf("%s: not in %s, not checked", m.c, header)
		}
	}
	want := map[string]uint64{} // "T" → size, "T.f" → offset, "T.f#" → size; an enumerant → its value
	for _, e := range newerEnums {
		if bytes.Contains(text, []byte(" "+e.c+" = ")) {
			fmt.Fprintf(&src, "\tprintf(\"%s %%lld\\n\", (long long)%s);\n", e.c, e.c)
			want[e.c] = uint64(e.v)
		}
	}
	for _, m := range checked {
		ty := reflect.TypeOf(m.mirror)
		fmt.Fprintf(&src, "\tprintf(\"%s %%zu\\n\", sizeof(%s));\n", m.c, m.c)
		want[m.c] = uint64(ty.Size())
		for i := range ty.NumField() {
			f := ty.Field(i)
			cf := cField(f.Name)
			fmt.Fprintf(&src, "\tprintf(\"%s.%s %%zu\\n\", offsetof(%s, %s));\n", m.c, cf, m.c, cf)
			fmt.Fprintf(&src, "\tprintf(\"%s.%s# %%zu\\n\", sizeof(((%s *)0)->%s));\n", m.c, cf, m.c, cf)
			want[m.c+"."+cf] = uint64(f.Offset)
			want[m.c+"."+cf+"#"] = uint64(f.Type.Size())
		}
	}
	src.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	cfile, bin := filepath.Join(dir, "layout.c"), filepath.Join(dir, "layout")
	if err := os.WriteFile(cfile, src.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-I", include, "-o", bin, cfile).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name, val, _ := strings.Cut(sc.Text(), " ")
		n, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			t.Fatalf("layout program printed %q", sc.Text())
		}
		if w, ok := want[name]; !ok {
			t.Errorf("layout program printed unknown %q", name)
		} else if w != n {
			t.Errorf("%s: C says %d, the Go mirror %d", name, n, w)
		}
		got++
	}
	if got != len(want) {
		t.Errorf("checked %d sizes and offsets; want %d", got, len(want))
	}
	t.Logf("%d structures, %d sizes and offsets checked against %s", len(checked), got, header)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
