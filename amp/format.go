// Package amp knows numeric precision: the floating-point formats mixtune
// computes and stores in (fp32, bf16, fp16), how a float32 rounds into each of
// them, and how their bits are read and written.
//
// Low-precision values are emulated: they live in float32 memory but hold only
// values the narrower format can represent, so that a CPU run overflows,
// underflows and loses digits exactly where a GPU run would.
package amp

import (
	"fmt"
	"math"
	"strings"

	"github.com/x448/float16"
)

// Format is a floating-point storage or compute format.
type Format uint8

const (
	FP32 Format = iota // IEEE 754 binary32
	BF16               // bfloat16: fp32's exponent range, 8 significant bits
	FP16               // IEEE 754 binary16: max 65504, subnormals down to 2^-24
)

// ParseFormat reads a format name as configs and checkpoints spell it.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "fp32", "float32", "f32":
		return FP32, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "float16", "f16", "half":
		return FP16, nil
	}
	return FP32, fmt.Errorf("unknown precision %q (want fp32, bf16 or fp16)", s)
}

func (f Format) String() string {
	switch f {
	case FP32:
		return "fp32"
	case BF16:
		return "bf16"
	case FP16:
		return "fp16"
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// Bytes is the storage size of one value.
func (f Format) Bytes() int {
	if f == FP32 {
		return 4
	}
	return 2
}

// Round returns the value of format f nearest to x, ties to even. fp16
// overflows to ±Inf and keeps subnormals; NaN stays NaN in every format.
func (f Format) Round(x float32) float32 {
	switch f {
	case BF16:
		return roundBF16(x)
	case FP16:
		return roundFP16(x)
	}
	return x
}

// RoundSlice rounds every element of xs to f in place. It is a no-op for FP32.
func (f Format) RoundSlice(xs []float32) {
	switch f {
	case BF16:
		roundBF16Slice(xs)
	case FP16:
		roundFP16Slice(xs)
	}
}

// roundBF16 is bf16FromBits(bf16Bits(x)) without leaving float32 bits.
func roundBF16(x float32) float32 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return math.Float32frombits(u&0xffff0000 | 0x00400000) // NaN stays NaN
	}
	return math.Float32frombits((u + 0x7fff + (u>>16)&1) & 0xffff0000)
}

// roundFP16 is x rounded to the nearest fp16 value, ties to even, kept in
// float32: what float16.Fromfloat32(x).Float32() computes (see
// TestRoundFP16MatchesReference), an order of magnitude faster. Normal
// fp16 values keep 10 mantissa bits; below 2^-14 fp16 is subnormal with a
// fixed quantum of 2^-24, and adding 0.5 to the magnitude puts the value
// where float32's own round-to-nearest-even lands exactly on that quantum.
func roundFP16(x float32) float32 {
	u := math.Float32bits(x)
	abs := u & 0x7fffffff
	switch {
	case abs > 0x7f800000: // NaN
		return math.Float32frombits(u | 0x00400000)
	case abs >= 0x477ff000: // >= 65520, rounds past 65504 (or is Inf)
		return math.Float32frombits(u&0x80000000 | 0x7f800000)
	case abs >= 0x38800000: // >= 2^-14: normal in fp16
		return math.Float32frombits((u + 0xfff + (u>>13)&1) &^ 0x1fff)
	}
	m := math.Float32frombits(abs)
	r := (m + 0.5) - 0.5
	return math.Float32frombits(math.Float32bits(r) | u&0x80000000)
}

// Bits16 encodes x in a 16-bit format (BF16 or FP16), rounding to nearest even.
func (f Format) Bits16(x float32) uint16 {
	if f == FP16 {
		return uint16(float16.Fromfloat32(x))
	}
	return bf16Bits(x)
}

// FromBits16 decodes a 16-bit value of format f (BF16 or FP16) exactly.
func (f Format) FromBits16(b uint16) float32 {
	if f == FP16 {
		return float16.Frombits(b).Float32()
	}
	return bf16FromBits(b)
}

// bf16Bits rounds x to bfloat16 with round-to-nearest-even on the 16 dropped
// bits. NaN is kept a NaN: rounding could otherwise carry a NaN payload into
// the exponent and turn it into Inf.
func bf16Bits(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040 // quiet NaN, sign kept
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func bf16FromBits(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }
