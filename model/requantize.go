package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/quant"
	"github.com/mixtune/mixtune/safetensors"
)

// RequantStats are the error statistics of quantizing a model's merged
// weights back to 4 bits (Model.Requantize): the error each value takes,
// dequantized value minus the fp32 value it was quantized from.
type RequantStats struct {
	Type   quant.Type
	Double bool
	// Tensors were quantized here, from their fp32 values; Kept were
	// already 4-bit of this type and block size (projections no adapter
	// touched, still the codes of the base a QLoRA run trained on) and keep
	// their codes: no added error.
	Tensors, Kept int
	Values        int64   // values quantized
	SumSqErr      float64 // Σ error²
	SumSq         float64 // Σ value²
	MaxErr        float64 // the largest |error|
	// MaxOfAbsmax is the largest |error| over its block's absmax (the
	// block's largest |value|, before double quantization).
	MaxOfAbsmax float64
}

// RMSE is the root mean square error over the values quantized.
func (s RequantStats) RMSE() float64 {
	if s.Values == 0 {
		return 0
	}
	return math.Sqrt(s.SumSqErr / float64(s.Values))
}

// RelRMSE is RMSE over the root mean square of the values quantized.
func (s RequantStats) RelRMSE() float64 {
	if s.SumSq == 0 {
		return 0
	}
	return math.Sqrt(s.SumSqErr / s.SumSq)
}

// Requantize keeps every quantizable weight of m (the decoder projections:
// Quantizable) 4-bit as q says, each quantized from its fp32 values (a
// merged projection, or any not yet 4-bit), with the block size
// bitsandbytes uses by default, and returns the error that added. A weight
// already 4-bit of q's type, double quantization and block size keeps its
// codes.
func (m *Model) Requantize(q Quantization) (RequantStats, error) {
	st := RequantStats{Type: q.Type, Double: q.Double}
	if q.Type == 0 {
		return st, fmt.Errorf("requantize: no 4-bit type")
	}
	for _, s := range Specs(m.Config) {
		t := m.Weights[s.Name]
		if t == nil || !Quantizable(s.Name) {
			continue
		}
		if t.Q4 != nil {
			old, err := quant.Decode(t.Q4)
			if err != nil {
				return st, fmt.Errorf("requantize %s: %w", s.Name, err)
			}
			if old.Type == q.Type && old.Nested == q.Double && old.BlockSize == quant.DefaultBlockSize {
				st.Kept++
				continue
			}
		}
		vals := t.Float32()
		qt, err := quant.Quantize(q.Type, vals, t.Shape, quant.Options{Double: q.Double})
		if err != nil {
			return st, fmt.Errorf("requantize %s: %w", s.Name, err)
		}
		back := qt.Dequantize()
		for b := 0; b < qt.Blocks(); b++ {
			lo, hi := b*qt.BlockSize, min((b+1)*qt.BlockSize, len(vals))
			var absmax, maxErr float64
			for i := lo; i < hi; i++ {
				v := float64(vals[i])
				d := math.Abs(float64(back[i]) - v)
				absmax, maxErr = max(absmax, math.Abs(v)), max(maxErr, d)
				st.SumSqErr += d * d
				st.SumSq += v * v
			}
			st.MaxErr = max(st.MaxErr, maxErr)
			if absmax > 0 {
				st.MaxOfAbsmax = max(st.MaxOfAbsmax, maxErr/absmax)
			}
		}
		st.Values += int64(len(vals))
		st.Tensors++
		t.Data, t.Bits, t.Q4 = nil, nil, qt.Encode()
	}
	return st, nil
}

// SaveBnB4 writes m as Save does, but with its 4-bit weights in
// bitsandbytes' layout, as transformers saves a model loaded with
// BitsAndBytesConfig(load_in_4bit=True) and as LoadQuantized reads it:
// weight (uint8 codes, two to a byte, shape [(n+1)/2, 1]), weight.absmax
// (uint8 codes with double quantization, else float32),
// weight.quant_map, weight.nested_absmax and weight.nested_quant_map, and
// weight.quant_state.bitsandbytes__<type> (the JSON of
// QuantState.as_dict(packed=True)); config.json gets the
// quantization_config transformers writes. The other weights are stored
// in dtype, which is also the quantized weights' dtype and compute dtype
// in the quant states and config. Every 4-bit weight must share one type,
// block size and double quantization.
func (m *Model) SaveBnB4(dir string, dtype amp.Format, maxShardBytes int64) error {
	var ts []safetensors.Tensor
	var first *quant.Tensor
	for _, s := range Specs(m.Config) {
		w := m.Weights[s.Name]
		if w.Q4 == nil {
			ts = append(ts, safetensors.Tensor{Name: s.Name, Shape: w.Shape, Data: w.Float32(), Dtype: dtype})
			continue
		}
		q, err := quant.Decode(w.Q4)
		if err != nil {
			return fmt.Errorf("save model %s: %s: %w", dir, s.Name, err)
		}
		if first == nil {
			first = q
		} else if q.Type != first.Type || q.Nested != first.Nested || q.BlockSize != first.BlockSize || (q.Nested && q.NestedBlock != first.NestedBlock) {
			return fmt.Errorf("save model %s: %s is %v (double quantization %v, blocks of %d), %v before it: one quantization_config cannot describe both",
				dir, s.Name, q.Type, q.Nested, q.BlockSize, first.Type)
		}
		ts = append(ts, bnbTensors(s.Name, q, TorchDtype(dtype))...)
	}
	if first == nil {
		return fmt.Errorf("save model %s: no 4-bit weight to write in bitsandbytes' layout", dir)
	}
	if err := safetensors.WriteCheckpoint(dir, ts, nil, maxShardBytes); err != nil {
		return fmt.Errorf("save model %s: %w", dir, err)
	}
	qc, err := json.Marshal(map[string]any{
		"quant_method": "bitsandbytes", "load_in_4bit": true, "load_in_8bit": false,
		"_load_in_4bit": true, "_load_in_8bit": false,
		"bnb_4bit_quant_type": first.Type.String(), "bnb_4bit_use_double_quant": first.Nested,
		"bnb_4bit_compute_dtype": TorchDtype(dtype), "bnb_4bit_quant_storage": "uint8",
		"llm_int8_enable_fp32_cpu_offload": false, "llm_int8_has_fp16_weight": false,
		"llm_int8_skip_modules": nil, "llm_int8_threshold": json.Number("6.0"),
	})
	if err != nil {
		return err
	}
	return writeConfig(dir, m.Config, TorchDtype(dtype), qc)
}

// bnbTensors are q's tensors under weight name in bitsandbytes' layout
// (SaveBnB4); dtype is the torch dtype it dequantizes to.
func bnbTensors(name string, q *quant.Tensor, dtype string) []safetensors.Tensor {
	f32 := func(suffix string, vs []float32) safetensors.Tensor {
		return safetensors.Tensor{Name: name + suffix, Shape: []int{len(vs)}, Data: vs, Dtype: amp.FP32}
	}
	ts := []safetensors.Tensor{
		{Name: name, Shape: []int{len(q.Packed), 1}, U8: q.Packed},
		f32(".quant_map", q.Code[:]),
	}
	// QuantState.as_dict's non-tensor entries in its order, as Python's
	// json.dumps writes them
	shape := "["
	for i, d := range q.Shape {
		if i > 0 {
			shape += ", "
		}
		shape += strconv.Itoa(d)
	}
	state := fmt.Sprintf(`{"quant_type": %q, "blocksize": %d, "dtype": %q, "shape": %s]`, q.Type.String(), q.BlockSize, dtype, shape)
	if q.Nested {
		ts = append(ts, safetensors.Tensor{Name: name + ".absmax", Shape: []int{len(q.AbsmaxCodes)}, U8: q.AbsmaxCodes},
			f32(".nested_absmax", q.NestedAbsmax), f32(".nested_quant_map", q.NestedCode[:]))
		state += fmt.Sprintf(`, "nested_blocksize": %d, "nested_dtype": "float32", "nested_offset": %s`,
			q.NestedBlock, pyFloat(float64(q.Offset)))
	} else {
		ts = append(ts, f32(".absmax", q.Absmax))
	}
	state += "}"
	return append(ts, safetensors.Tensor{Name: name + bnbStatePrefix + q.Type.String(), Shape: []int{len(state)}, U8: []byte(state)})
}

// pyFloat is Python's repr of a float: the shortest digits that read back
// as x, with a ".0" on an integral value.
func pyFloat(x float64) string {
	s := strconv.FormatFloat(x, 'g', -1, 64)
	if !math.IsInf(x, 0) && !math.IsNaN(x) && !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}
