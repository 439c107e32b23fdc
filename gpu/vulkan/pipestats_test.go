package vulkan

import (
	"slices"
	"strings"
	"testing"
)

// TestShaderNames: the patterns match the embedded SPIR-V by name.
func TestShaderNames(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    []string // a subset, in order
		none    bool
	}{
		{"gemm_f32.spv", []string{"gemm_f32.spv"}, false},
		{"attention_coop_[df]*_d64_bf16.spv", []string{"attention_coop_dk_d64_bf16.spv", "attention_coop_dkv_d64_bf16.spv", "attention_coop_dq_d64_bf16.spv", "attention_coop_dv_d64_bf16.spv", "attention_coop_fwd_d64_bf16.spv"}, false},
		{"gemm_cm2_128x256_*", []string{"gemm_cm2_128x256_bf16.spv", "gemm_cm2_128x256_fp16.spv"}, false},
		{"no_such_*.spv", nil, true},
	} {
		got, err := ShaderNames(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if tc.none != (len(got) == 0) {
			t.Errorf("%s: %v", tc.pattern, got)
		}
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: %v lacks %s", tc.pattern, got, w)
			}
		}
		if strings.Contains(tc.pattern, "*") && !tc.none && len(got) != len(tc.want) {
			t.Errorf("%s: %v, want %v", tc.pattern, got, tc.want)
		}
	}
	if _, err := ShaderNames("["); err == nil {
		t.Error("a malformed pattern was accepted")
	}
}

// TestPipelineStatistics opens the test device with pipeline statistics:
// where the device offers VK_KHR_pipeline_executable_properties, every
// GEMM and attention kernel the engine builds reports at least one
// statistic; where it does not, opening says so by name, and the test
// skips. A device opened without them refuses Executables.
func TestPipelineStatistics(t *testing.T) {
	e := openTest(t)
	if _, err := e.dev.ShaderExecutables("gemm_f32.spv"); err == nil || !strings.Contains(err.Error(), "PipelineStatistics") {
		t.Errorf("a device without pipeline statistics gave %v", err)
	}
	p := e.dev.Physical
	d, err := e.inst.OpenDeviceWith(p, DeviceOptions{PipelineStatistics: true})
	if !p.HasExtension("VK_KHR_pipeline_executable_properties") {
		if err == nil || !strings.Contains(err.Error(), "VK_KHR_pipeline_executable_properties") {
			t.Fatalf("%s lacks the extension, and opening with statistics gave %v", p.Name, err)
		}
		t.Skipf("%s does not offer VK_KHR_pipeline_executable_properties: no statistics to check", p.Name)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	names, err := ShaderNames("gemm_*.spv")
	must(t, err)
	attn, err := ShaderNames("attention*.spv")
	must(t, err)
	for _, name := range append(names, attn...) {
		es, err := d.ShaderExecutables(name)
		if err != nil {
			if strings.Contains(name, "coop") || strings.Contains(name, "cm2") {
				continue // the device may lack the extension the shader needs
			}
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(es) == 0 || len(es[0].Statistics) == 0 {
			t.Errorf("%s: no statistics: %+v", name, es)
			continue
		}
		t.Logf("%s [%s]: %v", name, es[0].Name, es[0].Statistics)
	}
}
