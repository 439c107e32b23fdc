package model

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/quant"
	"github.com/mixtune/mixtune/safetensors"
)

// WeightSource yields the weights of a model being written, each when the
// writer reaches it (SaveFrom, SaveBnB4From): a model computed weight by
// weight, such as a merge, is written without being held whole.
type WeightSource interface {
	// Float32 is the fp32 values of a weight written in a float dtype.
	Float32(name string) ([]float32, error)
	// Quantized is a weight written 4-bit, in bitsandbytes' layout.
	Quantized(name string) (*quant.Tensor, error)
}

// modelWeights is a loaded model as a WeightSource.
type modelWeights struct{ m *Model }

func (w modelWeights) Float32(name string) ([]float32, error) {
	t := w.m.Weights[name]
	if t == nil {
		return nil, fmt.Errorf("no weight %s", name)
	}
	return t.Float32(), nil
}

func (w modelWeights) Quantized(name string) (*quant.Tensor, error) {
	t := w.m.Weights[name]
	if t == nil || t.Q4 == nil {
		return nil, fmt.Errorf("weight %s is not 4-bit", name)
	}
	return quant.Decode(t.Q4)
}

// SaveFrom writes a model with config c in the HF layout, as Model.Save
// does (the same bytes), with each weight's values taken from src as its
// turn comes and dropped once written.
func SaveFrom(dir string, c Config, dtype amp.Format, maxShardBytes int64, src WeightSource) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	var ts []safetensors.Tensor
	for _, s := range Specs(c) {
		ts = append(ts, floatTensor(s, dtype, src))
	}
	if err := safetensors.WriteCheckpoint(dir, ts, nil, maxShardBytes); err != nil {
		return fmt.Errorf("save model %s: %w", dir, err)
	}
	return WriteConfig(dir, c, TorchDtype(dtype))
}

// floatTensor is weight s stored in dtype, its values taken from src when
// it is written.
func floatTensor(s Spec, dtype amp.Format, src WeightSource) safetensors.Tensor {
	return safetensors.Tensor{Name: s.Name, Shape: s.Shape, Dtype: dtype, Fill: func() ([]float32, []byte, error) {
		d, err := src.Float32(s.Name)
		return d, nil, err
	}}
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
	layouts := map[string]*quant.Tensor{}
	for name, t := range m.Weights {
		if t.Q4 == nil {
			continue
		}
		q, err := quant.Decode(t.Q4)
		if err != nil {
			return fmt.Errorf("save model %s: %s: %w", dir, name, err)
		}
		layouts[name] = QuantLayout(q)
	}
	return SaveBnB4From(dir, m.Config, dtype, maxShardBytes, modelWeights{m}, layouts)
}

// QuantLayout is q's description without its values: what SaveBnB4From
// needs to lay out a 4-bit weight before its values exist.
func QuantLayout(q *quant.Tensor) *quant.Tensor {
	l := *q
	l.Packed, l.Absmax, l.AbsmaxCodes, l.NestedAbsmax = nil, nil, nil, nil
	return &l
}

// SaveBnB4From writes a model with config c as Model.SaveBnB4 does (the
// same bytes), with each weight taken from src as its turn comes: the
// weights in layouts 4-bit (src.Quantized), as each layout (QuantLayout)
// describes them, the others in dtype (src.Float32). The layouts must be
// known before anything is written, since the quant state's JSON, whose
// length the header holds, includes the double quantization's offset; a
// weight src gives with another layout is an error.
func SaveBnB4From(dir string, c Config, dtype amp.Format, maxShardBytes int64, src WeightSource, layouts map[string]*quant.Tensor) error {
	var ts []safetensors.Tensor
	var first *quant.Tensor
	// The parts of one 4-bit weight are written one after the other (in
	// name order), so one quantized weight is kept, for its next part.
	var curName string
	var cur *quant.Tensor
	get := func(name string) (*quant.Tensor, error) {
		if name == curName {
			return cur, nil
		}
		q, err := src.Quantized(name)
		if err != nil {
			return nil, err
		}
		if got, want := quantState(q, TorchDtype(dtype)), quantState(layouts[name], TorchDtype(dtype)); got != want {
			return nil, fmt.Errorf("quantized as %s, laid out as %s", got, want)
		}
		curName, cur = name, q
		return q, nil
	}
	for _, s := range Specs(c) {
		l := layouts[s.Name]
		if l == nil {
			ts = append(ts, floatTensor(s, dtype, src))
			continue
		}
		if first == nil {
			first = l
		} else if l.Type != first.Type || l.Nested != first.Nested || l.BlockSize != first.BlockSize || (l.Nested && l.NestedBlock != first.NestedBlock) {
			return fmt.Errorf("save model %s: %s is %v (double quantization %v, blocks of %d), %v before it: one quantization_config cannot describe both",
				dir, s.Name, l.Type, l.Nested, l.BlockSize, first.Type)
		}
		ts = append(ts, bnbTensors(s.Name, l, TorchDtype(dtype), get)...)
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
	return writeConfig(dir, c, TorchDtype(dtype), qc)
}

// bnbTensors are the tensors of the 4-bit weight name, laid out as l, in
// bitsandbytes' layout (SaveBnB4), their values taken from get(name) when
// written; dtype is the torch dtype it dequantizes to.
func bnbTensors(name string, l *quant.Tensor, dtype string, get func(string) (*quant.Tensor, error)) []safetensors.Tensor {
	part := func(suffix string, shape []int, bytes bool, values func(q *quant.Tensor) ([]float32, []byte)) safetensors.Tensor {
		return safetensors.Tensor{Name: name + suffix, Shape: shape, Dtype: amp.FP32, Bytes: bytes, Fill: func() ([]float32, []byte, error) {
			q, err := get(name)
			if err != nil {
				return nil, nil, err
			}
			f, b := values(q)
			return f, b, nil
		}}
	}
	nb := l.Blocks()
	ts := []safetensors.Tensor{
		part("", []int{(l.Numel() + 1) / 2, 1}, true, func(q *quant.Tensor) ([]float32, []byte) { return nil, q.Packed }),
		part(".quant_map", []int{16}, false, func(q *quant.Tensor) ([]float32, []byte) { return q.Code[:], nil }),
	}
	if l.Nested {
		ts = append(ts,
			part(".absmax", []int{nb}, true, func(q *quant.Tensor) ([]float32, []byte) { return nil, q.AbsmaxCodes }),
			part(".nested_absmax", []int{(nb + l.NestedBlock - 1) / l.NestedBlock}, false, func(q *quant.Tensor) ([]float32, []byte) { return q.NestedAbsmax, nil }),
			part(".nested_quant_map", []int{256}, false, func(q *quant.Tensor) ([]float32, []byte) { return q.NestedCode[:], nil }))
	} else {
		ts = append(ts, part(".absmax", []int{nb}, false, func(q *quant.Tensor) ([]float32, []byte) { return q.Absmax, nil }))
	}
	state := quantState(l, dtype)
	return append(ts, part(bnbStatePrefix+l.Type.String(), []int{len(state)}, true, func(q *quant.Tensor) ([]float32, []byte) {
		return nil, []byte(quantState(q, dtype))
	}))
}

// quantState is the JSON of q's bitsandbytes quant state: QuantState.as_dict's
// non-tensor entries in its order, as Python's json.dumps writes them.
func quantState(q *quant.Tensor, dtype string) string {
	shape := "["
	for i, d := range q.Shape {
		if i > 0 {
			shape += ", "
		}
		shape += strconv.Itoa(d)
	}
	state := fmt.Sprintf(`{"quant_type": %q, "blocksize": %d, "dtype": %q, "shape": %s]`, q.Type.String(), q.BlockSize, dtype, shape)
	if q.Nested {
		state += fmt.Sprintf(`, "nested_blocksize": %d, "nested_dtype": "float32", "nested_offset": %s`,
			q.NestedBlock, pyFloat(float64(q.Offset)))
	}
	return state + "}"
}
