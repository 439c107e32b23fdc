// Package cpufeat reports the CPU's bf16 units: AVX512_BF16 (VDPBF16PS)
// and AMX-BF16 with the permission the OS must grant before a process may
// use AMX tiles. A Features value is detected once at start and passed
// to what dispatches on it, so tests can override it.
package cpufeat

import (
	"strings"

	"golang.org/x/sys/cpu"
)

// Features are the bf16 capabilities of the CPU a process runs on.
type Features struct {
	AVX512F    bool // AVX-512 Foundation, with the OS saving its registers
	AVX512BF16 bool // VDPBF16PS and VCVTNE2PS2BF16
	AMXBF16    bool // CPUID reports AMX-TILE and AMX-BF16
	// AMXPermitted says the OS granted this process the AMX tile state
	// (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)).
	AMXPermitted bool
}

// Detect reads CPUID and, where the CPU has AMX, asks the OS for the
// permission to use it (a process-wide grant, as oneDNN asks for it).
func Detect() Features {
	f := Features{
		AVX512F:    cpu.X86.HasAVX512F,
		AVX512BF16: cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16,
		AMXBF16:    cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16,
	}
	if f.AMXBF16 {
		f.AMXPermitted = requestAMX() == nil
	}
	return f
}

// AMX says whether AMX-BF16 may run: the CPU has it and the OS allows it.
func (f Features) AMX() bool { return f.AMXBF16 && f.AMXPermitted }

// BF16Units says whether the CPU multiplies bf16 values in hardware.
func (f Features) BF16Units() bool { return f.AVX512BF16 || f.AMX() }

// String lists the capabilities for the banner: "avx512_bf16 amx_bf16",
// "amx_bf16 (not permitted by the OS)", or "none".
func (f Features) String() string {
	var s []string
	if f.AVX512BF16 {
		s = append(s, "avx512_bf16")
	}
	switch {
	case f.AMX():
		s = append(s, "amx_bf16")
	case f.AMXBF16:
		s = append(s, "amx_bf16 (not permitted by the OS)")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}

// Names lists the capabilities as run.json's cpu_features spell them.
func (f Features) Names() []string {
	var s []string
	if f.AVX512BF16 {
		s = append(s, "avx512bf16")
	}
	if f.AMXBF16 {
		s = append(s, "amxbf16")
		if f.AMXPermitted {
			s = append(s, "amx_permitted")
		}
	}
	return s
}
