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

// RoundTo writes src rounded to f into dst (dst[i] = f.Round(src[i]), for
// len(src) values; dst may be src): a copy and a rounding in one pass.
func (f Format) RoundTo(dst, src []float32) {
	dst = dst[:len(src)]
	switch f {
	case FP32:
		copy(dst, src)
	case BF16:
		n, _ := roundBF16Fast(dst, src, 0)
		n += roundBF16To8(dst[n:], src[n:])
		for i := n; i < len(src); i++ {
			dst[i] = roundBF16(src[i])
		}
	case FP16:
		n, _ := roundFP16Fast(dst, src, 0)
		n += roundFP16To8(dst[n:], src[n:])
		for i := n; i < len(src); i++ {
			dst[i] = roundFP16(src[i])
		}
	}
}

// RoundCount is RoundTo that also returns f.Underflows(src), counted in
// the same pass: what rounding a gradient does.
func (f Format) RoundCount(dst, src []float32) int {
	if len(src) == 0 {
		return 0
	}
	dst = dst[:len(src)]
	switch f {
	case FP32:
		copy(dst, src)
		return 0
	case BF16:
		n, under := roundBF16Fast(dst, src, bf16Underflow)
		// where the CPU lacks AVX-512: counted, then rounded, eight at a
		// time in AVX2 (counted first: dst may be src)
		under += countUnderflow(src[n:], bf16Underflow)
		n += roundBF16To8(dst[n:], src[n:])
		for i := n; i < len(src); i++ {
			dst[i] = roundBF16(src[i])
		}
		return under
	case FP16:
		n, under := roundFP16Fast(dst, src, fp16Underflow)
		under += countUnderflow(src[n:], fp16Underflow)
		n += roundFP16To8(dst[n:], src[n:])
		for i := n; i < len(src); i++ {
			dst[i] = roundFP16(src[i])
		}
		return under
	}
	copy(dst, src) // no other format exists; rounding to an unknown one keeps the values
	return 0
}

const (
	fp16Underflow = 0x33000000 // 2^-25
	bf16Underflow = 0x00008000 // 2^-134, a float32 subnormal
)

// Underflows counts the nonzero values of xs that f rounds to zero: the
// gradient values fp16 loses without loss scaling. Zero for FP32. A value
// underflows when its magnitude is at most half the smallest subnormal of
// f (the tie goes to the even neighbour, zero): 2^-25 for fp16, 2^-134 for
// bf16.
func (f Format) Underflows(xs []float32) int {
	var limit uint32
	switch f {
	case FP16:
		limit = fp16Underflow
	case BF16:
		limit = bf16Underflow
	default:
		return 0
	}
	return countUnderflow(xs, limit)
}

// countUnderflowScalar counts the values whose magnitude bits a satisfy
// 0 < a <= limit. That holds exactly when a-1 < limit (a-1 wraps for
// zero), and the borrow of (a-1) - limit in 64 bits is that comparison
// without a branch, which random gradient signs would mispredict.
func countUnderflowScalar(xs []float32, limit uint32) int {
	n := uint64(0)
	for _, x := range xs {
		a := math.Float32bits(x) & 0x7fffffff
		n += (uint64(a-1) - uint64(limit)) >> 63
	}
	return int(n)
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
// float32: what float16.Fromfloat32(x).Float32() computes, an order of
// magnitude faster (TestRoundExhaustive and TestReferencesAgree check it
// against references independent of this recipe). Normal
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

// BF16Bits is BF16.Bits16(x), small enough for the compiler to inline
// into a loop that converts many values (a GEMM's packing).
func BF16Bits(x float32) uint16 { return bf16Bits(x) }

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

// Bits16Slice encodes float32 values as 16-bit values of f (BF16 or
// FP16): dst[i] = f.Bits16(src[i]), for len(src) values, rounding to
// nearest even. bf16 GEMMs that read bits call it on their fp32 operands
// per product, so it avoids per-value calls.
func (f Format) Bits16Slice(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	if n := narrow16Fast(f, dst, src); n > 0 {
		dst, src = dst[n:], src[n:]
	}
	if f == FP16 {
		for i, x := range src {
			dst[i] = uint16(float16.Fromfloat32(x))
		}
		return
	}
	for i, x := range src {
		dst[i] = bf16Bits(x)
	}
}

// FromBits16Slice widens 16-bit values of f to float32: dst[i] =
// f.FromBits16(src[i]), for len(src) values (exact: every fp16 and bf16
// value is a float32). Matmuls over 16-bit weights call it per block, so
// it avoids per-value calls.
func (f Format) FromBits16Slice(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	if n := widen16Fast(f, dst, src); n > 0 {
		dst, src = dst[n:], src[n:]
	}
	if f == FP16 {
		for i, h := range src {
			dst[i] = fp16FromBits(h)
		}
		return
	}
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}

// fp16FromBits is float16.Frombits(h).Float32() by moving the fields:
// the exponent is rebased from fp16's bias 15 to float32's 127; Inf and
// NaN (exponent 31) go to exponent 255, NaN quieted; a subnormal m·2^-24 is made exact
// in float32 by building 2^-14·(1 + m/1024) and subtracting 2^-14.
func fp16FromBits(h uint16) float32 {
	o := uint32(h&0x7fff) << 13 // exponent and mantissa, float32-aligned
	exp := o & 0x0f800000
	o += (127 - 15) << 23
	switch exp {
	case 0x0f800000: // Inf or NaN; a NaN comes out quiet, as float16 makes it
		o += (128 - 16) << 23
		if o&0x007fffff != 0 {
			o |= 0x00400000
		}
	case 0: // zero or subnormal
		o += 1 << 23
		o = math.Float32bits(math.Float32frombits(o) - 0x1p-14)
	}
	return math.Float32frombits(o | uint32(h&0x8000)<<16)
}

// MarshalText writes the format's name, so configs and JSON records spell
// it as a person would.
func (f Format) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText reads a format name as ParseFormat does.
func (f *Format) UnmarshalText(b []byte) error {
	g, err := ParseFormat(string(b))
	if err != nil {
		return err
	}
	*f = g
	return nil
}
