package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/mixtune/mixtune/amp"
)

// Conversions from fp32, bit for bit as llama.cpp makes them:
//
//   - f16: round to nearest even (GGML_FP32_TO_FP16; numpy's astype(float16)
//     in gguf-py/gguf/quants.py).
//   - bf16: round to nearest even, NaN kept quiet (ggml_compute_fp32_to_bf16
//     in ggml-impl.h; quants.py BF16.quantize_blocks). amp.BF16 rounds the same way.
//   - q8_0: quantize_row_q8_0_ref in ggml/src/ggml-quants.c: per block of 32,
//     amax = max|x|, d = amax/127 and id = 1/d (0 when d is 0) in fp32, the
//     scale stored as fp16(d), each value roundf(x·id) — the product in fp32,
//     rounded half away from zero. The int8 values are computed from the
//     fp32 d, not the fp16 one that is stored (quants.py Q8_0 does the same).

// AppendEncoded appends xs converted to type t; for q8_0 len(xs) must be a
// multiple of 32 (callers check rows with RowBytes first).
func AppendEncoded(dst []byte, t TensorType, xs []float32) []byte {
	switch t {
	case F32:
		for _, x := range xs {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
		}
	case F16, BF16:
		f := amp.FP16
		if t == BF16 {
			f = amp.BF16
		}
		for _, x := range xs {
			dst = binary.LittleEndian.AppendUint16(dst, f.Bits16(x))
		}
	case Q8_0:
		for b := 0; b+QK8_0 <= len(xs); b += QK8_0 {
			dst = appendQ8Block(dst, xs[b:b+QK8_0])
		}
	default:
		panic(fmt.Sprintf("gguf: cannot encode %v", t))
	}
	return dst
}

func appendQ8Block(dst []byte, x []float32) []byte {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, amp.FP16.Bits16(d))
	for _, v := range x {
		p := v * id // one fp32 product, as in C
		dst = append(dst, byte(int8(math.Round(float64(p)))))
	}
	return dst
}

// Decode converts n values of type t from data back to fp32: exact for f32,
// f16 and bf16; for q8_0 each value is its int8 times the block's fp16
// scale, as dequantize_row_q8_0 computes it.
func Decode(t TensorType, data []byte, n int) ([]float32, error) {
	size, err := t.RowBytes(n)
	if err != nil {
		return nil, err
	}
	if len(data) < size {
		return nil, fmt.Errorf("%v data of %d values needs %d bytes, got %d", t, n, size, len(data))
	}
	out := make([]float32, n)
	switch t {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case F16, BF16:
		f := amp.FP16
		if t == BF16 {
			f = amp.BF16
		}
		for i := range out {
			out[i] = f.FromBits16(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case Q8_0:
		for b := 0; b < n/QK8_0; b++ {
			blk := data[b*(2+QK8_0):]
			d := amp.FP16.FromBits16(binary.LittleEndian.Uint16(blk))
			for j := 0; j < QK8_0; j++ {
				out[b*QK8_0+j] = float32(int8(blk[2+j])) * d
			}
		}
	}
	return out, nil
}
