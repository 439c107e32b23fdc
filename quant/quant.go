// Package quant owns bitsandbytes-compatible 4-bit block quantization: the
// NF4 and FP4 code tables, blockwise absmax scaling with two codes per byte
// (the first value in the high nibble), double quantization of the
// per-block absmax values to 8 bits with bitsandbytes' signed dynamic map,
// and dequantization of any range of elements, which is what a matmul
// needs to widen a weight block by block without a full dequantized copy.
package quant

import (
	"fmt"
	"math"
	"sort"
)

// Type is a 4-bit code table.
type Type int

const (
	// NF4 is the 4-bit NormalFloat of the QLoRA paper: 16 quantiles of the
	// standard normal (bitsandbytes' create_normal_map(offset=0.9677083)),
	// normalized by the largest, so the table is asymmetric.
	NF4 Type = iota + 1
	// FP4 is bitsandbytes' 4-bit float (1 sign, 2 exponent, 1 mantissa bit,
	// bias 3) normalized by its largest magnitude, 12.
	FP4
)

// ParseType reads "nf4" or "fp4".
func ParseType(s string) (Type, error) {
	switch s {
	case "nf4":
		return NF4, nil
	case "fp4":
		return FP4, nil
	}
	return 0, fmt.Errorf("quant: unknown 4-bit type %q (want nf4 or fp4)", s)
}

func (t Type) String() string {
	switch t {
	case NF4:
		return "nf4"
	case FP4:
		return "fp4"
	}
	return fmt.Sprintf("quant.Type(%d)", int(t))
}

// nf4Code is bitsandbytes' NF4 table as float32 (its dDequantizeNF4).
var nf4Code = [16]float32{
	-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
}

// fp4Code is bitsandbytes' get_4bit_type("fp4"): codes 0..7 are the
// magnitudes 0, 0.0625, 8, 12, 4, 6, 2, 3 over 12, codes 8..15 the same
// negated (code 8 is -0).
var fp4Code = func() [16]float32 {
	mag := [8]float64{0, 0.0625, 8, 12, 4, 6, 2, 3}
	var c [16]float32
	for i, m := range mag {
		c[i] = float32(m / 12)
		c[i+8] = float32(-m / 12)
	}
	return c
}()

// fp4Pivots are bitsandbytes' dQuantizeFP4 thresholds on |x|, as written
// there (rounded decimals of the midpoints 7/24, 7/12, 5/6, 5/12, 11/128,
// 5/24 and 1/384 of adjacent magnitudes).
const (
	fp4P1 float32 = 0.29166667
	fp4P2 float32 = 0.583333
	fp4P3 float32 = 0.8333333
	fp4P4 float32 = 0.4166667
	fp4P5 float32 = 0.0859375
	fp4P6 float32 = 0.20833333
	fp4P7 float32 = 0.00260417
)

// Code returns the 16 values of t, indexed by the 4-bit code.
func (t Type) Code() [16]float32 {
	if t == FP4 {
		return fp4Code
	}
	return nf4Code
}

// zeroCode is the code of 0 in t, which a block of zeros takes.
func (t Type) zeroCode() byte {
	if t == FP4 {
		return 0
	}
	return 7
}

// nf4Pivots are the float32 midpoints of adjacent NF4 values: exactly the
// thresholds of bitsandbytes' dQuantizeNF4 decision tree.
var nf4Pivots = func() [15]float32 {
	var p [15]float32
	for i := range p {
		p[i] = float32((float64(nf4Code[i]) + float64(nf4Code[i+1])) / 2)
	}
	return p
}()

// quantize4 returns the code of x, a value already scaled to [-1, 1]. It is
// the nearest table value; a value exactly on a threshold takes the lower
// code for NF4 and the smaller magnitude for FP4, as bitsandbytes' decision
// trees do (they test x > threshold). NaN takes code 0 for NF4 (every test
// fails) and FP4's +0.
func (t Type) quantize4(x float32) byte {
	if t == FP4 {
		var sign byte
		if x < 0 {
			sign = 8
			x = -x
		}
		var c byte
		switch {
		case x > fp4P1:
			switch {
			case x > fp4P2 && x > fp4P3:
				c = 0b0011
			case x > fp4P2:
				c = 0b0010
			case x > fp4P4:
				c = 0b0101
			default:
				c = 0b0100
			}
		case x > fp4P5:
			if x > fp4P6 {
				c = 0b0111
			} else {
				c = 0b0110
			}
		case x > fp4P7:
			c = 0b0001
		}
		return c + sign
	}
	// the number of thresholds x exceeds is its code (the table ascends),
	// found in four steps of a binary search (NaN exceeds none)
	p := &nf4Pivots
	c := 0
	if x > p[7] {
		c = 8
	}
	if x > p[c+3] {
		c += 4
	}
	if x > p[c+1] {
		c += 2
	}
	if x > p[c] {
		c++
	}
	return byte(c)
}

// DynamicMap returns bitsandbytes' create_dynamic_map(signed=True,
// max_exponent_bits=7, total_bits=8), the 8-bit code of double
// quantization: for each decade i = 0..6, the midpoints of 2^i+1 points
// evenly spaced on [0.1, 1], times 10^(i-6), and their negatives; then 0
// and 1; sorted ascending. (The map holds 1 but not -1.) bitsandbytes builds
// the spacing in float32 with torch.linspace; this computes it in float64
// and rounds once, so an entry may differ from bitsandbytes' by an ulp.
// A checkpoint carries its own map (nested_quant_map), which is used as is.
func DynamicMap() [256]float32 {
	data := make([]float64, 0, 256)
	for i := 0; i < 7; i++ {
		n := 1<<i + 1
		scale := math.Pow(10, float64(i-6))
		for j := 0; j+1 < n; j++ {
			lo := 0.1 + 0.9*float64(j)/float64(n-1)
			hi := 0.1 + 0.9*float64(j+1)/float64(n-1)
			m := scale * (lo + hi) / 2
			data = append(data, m, -m)
		}
	}
	data = append(data, 0, 1)
	sort.Float64s(data)
	var c [256]float32
	for i, v := range data {
		c[i] = float32(v)
	}
	return c
}

// nearest8 returns the index of the code value nearest x in the ascending
// code, ties to the lower index.
func nearest8(code *[256]float32, x float32) byte {
	i := sort.Search(256, func(i int) bool { return code[i] >= x })
	switch {
	case i == 0:
		return 0
	case i == 256:
		return 255
	}
	if x-code[i-1] <= code[i]-x {
		return byte(i - 1)
	}
	return byte(i)
}
