package cpufeat

import (
	"slices"
	"testing"

	"golang.org/x/sys/cpu"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		f     Features
		want  string
		names []string
		units bool
	}{
		{Features{}, "none", nil, false},
		{Features{AVX512F: true}, "none", nil, false},
		{Features{AVX512F: true, AVX512BF16: true}, "avx512_bf16", []string{"avx512bf16"}, true},
		{Features{AMXBF16: true}, "amx_bf16 (not permitted by the OS)", []string{"amxbf16"}, false},
		{Features{AVX512F: true, AVX512BF16: true, AMXBF16: true, AMXPermitted: true}, "avx512_bf16 amx_bf16", []string{"avx512bf16", "amxbf16", "amx_permitted"}, true},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("%+v: String() = %q, want %q", tc.f, got, tc.want)
		}
		if got := tc.f.Names(); !slices.Equal(got, tc.names) {
			t.Errorf("%+v: Names() = %q, want %q", tc.f, got, tc.names)
		}
		if got := tc.f.BF16Units(); got != tc.units {
			t.Errorf("%+v: BF16Units() = %v, want %v", tc.f, got, tc.units)
		}
	}
}

// TestDetectMatchesCPUID holds Detect to what x/sys/cpu read from CPUID,
// and logs what this machine has.
func TestDetectMatchesCPUID(t *testing.T) {
	f := Detect()
	t.Logf("this CPU: %s", f)
	if f.AVX512BF16 != (cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16) {
		t.Errorf("AVX512BF16 = %v, CPUID says avx512f %v avx512bf16 %v", f.AVX512BF16, cpu.X86.HasAVX512F, cpu.X86.HasAVX512BF16)
	}
	if f.AMXBF16 != (cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16) {
		t.Errorf("AMXBF16 = %v, CPUID says amx-tile %v amx-bf16 %v", f.AMXBF16, cpu.X86.HasAMXTile, cpu.X86.HasAMXBF16)
	}
	if f.AMXPermitted && !f.AMXBF16 {
		t.Errorf("AMX permitted on a CPU without AMX")
	}
}
