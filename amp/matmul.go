package amp

import (
	"fmt"
	"strings"
)

// BF16Matmul says where the products a policy puts in bf16 run.
type BF16Matmul uint8

const (
	// BF16Auto runs them on the CPU's bf16 units where it has them, else
	// emulates them.
	BF16Auto BF16Matmul = iota
	// BF16Emulate rounds the operands to bf16 and multiplies them in the
	// fp32 kernels, summing in fp32 in the kernel's order: the same bits
	// on every CPU a backend runs the same kernel on.
	BF16Emulate
	// BF16Hardware runs them as bf16×bf16→fp32 GEMMs (VDPBF16PS, AMX),
	// an error where no bf16 GEMM runs.
	BF16Hardware
)

func (m BF16Matmul) String() string {
	switch m {
	case BF16Emulate:
		return "emulate"
	case BF16Hardware:
		return "hardware"
	}
	return "auto"
}

// MarshalText writes auto, emulate or hardware.
func (m BF16Matmul) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads auto, emulate or hardware.
func (m *BF16Matmul) UnmarshalText(b []byte) error {
	switch strings.ToLower(strings.TrimSpace(string(b))) {
	case "auto":
		*m = BF16Auto
	case "emulate":
		*m = BF16Emulate
	case "hardware":
		*m = BF16Hardware
	default:
		return fmt.Errorf("must be auto (hardware where the CPU has bf16 units), emulate or hardware, got %q", b)
	}
	return nil
}
