package model

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/mixtune/mixtune/quant"
	"github.com/mixtune/mixtune/safetensors"
)

// BnB4Config is a bitsandbytes 4-bit checkpoint's quantization_config.
type BnB4Config struct {
	QuantType    string // bnb_4bit_quant_type: nf4 or fp4
	DoubleQuant  bool   // bnb_4bit_use_double_quant
	ComputeDtype string // bnb_4bit_compute_dtype, as written (the run's precision decides mixtune's)
}

// parseQuantization reads quantization_config, refusing every method but
// bitsandbytes' 4-bit one.
func parseQuantization(raw json.RawMessage) (*BnB4Config, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return nil, nil
	}
	var q struct {
		QuantMethod  string `json:"quant_method"`
		LoadIn4bit   bool   `json:"load_in_4bit"`
		LoadIn8bit   bool   `json:"load_in_8bit"`
		QuantType    string `json:"bnb_4bit_quant_type"`
		DoubleQuant  bool   `json:"bnb_4bit_use_double_quant"`
		ComputeDtype string `json:"bnb_4bit_compute_dtype"`
		Storage      string `json:"bnb_4bit_quant_storage"`
	}
	if err := json.Unmarshal(raw, &q); err != nil {
		return nil, fmt.Errorf("quantization_config: %w", err)
	}
	switch {
	case q.QuantMethod != "bitsandbytes":
		return nil, fmt.Errorf("quantization_config: quant_method %q is not supported (mixtune loads bitsandbytes 4-bit checkpoints)", q.QuantMethod)
	case q.LoadIn8bit || !q.LoadIn4bit:
		return nil, fmt.Errorf("quantization_config: only bitsandbytes 4-bit checkpoints (load_in_4bit: true) are supported, not 8-bit ones")
	case q.QuantType != "nf4" && q.QuantType != "fp4":
		return nil, fmt.Errorf("quantization_config: bnb_4bit_quant_type %q is not nf4 or fp4", q.QuantType)
	case q.Storage != "" && q.Storage != "uint8":
		return nil, fmt.Errorf("quantization_config: bnb_4bit_quant_storage %q is not supported (uint8 only)", q.Storage)
	}
	return &BnB4Config{QuantType: q.QuantType, DoubleQuant: q.DoubleQuant, ComputeDtype: q.ComputeDtype}, nil
}

// bnbStatePrefix begins the name of a quantized weight's packed state.
const bnbStatePrefix = ".quant_state.bitsandbytes__"

// bnbParts are the tensors beside a quantized weight's codes.
var bnbParts = []string{".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map"}

// bnbState returns the name of weight's packed quant state tensor, if the
// checkpoint holds one.
func bnbState(ck *safetensors.Checkpoint, weight string) (string, bool) {
	for _, t := range []string{"nf4", "fp4"} {
		if _, ok := ck.Info(weight + bnbStatePrefix + t); ok {
			return weight + bnbStatePrefix + t, true
		}
	}
	return "", false
}

// isBnBPartOf reports whether name is a companion tensor of one of the
// weights in want (its quant state, absmax, maps).
func isBnBPartOf(name string, want map[string]bool) bool {
	if i := strings.Index(name, bnbStatePrefix); i > 0 {
		return want[name[:i]]
	}
	for _, p := range bnbParts {
		if w, ok := strings.CutSuffix(name, p); ok {
			return want[w]
		}
	}
	return false
}

// bnbQuantState is the JSON of weight.quant_state.bitsandbytes__<type>.
type bnbQuantState struct {
	QuantType       string   `json:"quant_type"`
	BlockSize       int      `json:"blocksize"`
	Dtype           string   `json:"dtype"`
	Shape           []int    `json:"shape"`
	NestedBlockSize int      `json:"nested_blocksize"`
	NestedDtype     string   `json:"nested_dtype"`
	NestedOffset    *float64 `json:"nested_offset"`
}

// loadBnB4 reads the 4-bit weight name of shape want from ck, checking
// every part against the others, and returns it as a quant.Tensor.
func loadBnB4(ck *safetensors.Checkpoint, name string, want []int) (*quant.Tensor, error) {
	stateName, ok := bnbState(ck, name)
	if !ok {
		return nil, fmt.Errorf("tensor %s: no %snf4 or fp4 tensor beside it", name, bnbStatePrefix)
	}
	where := func(tensor string) string { return fmt.Sprintf("%s: tensor %s", ck.File(tensor), tensor) }
	raw := func(tensor, dtype string) ([]byte, error) {
		if _, ok := ck.Info(tensor); !ok {
			return nil, fmt.Errorf("%s: missing (a bitsandbytes 4-bit weight needs it)", where(tensor))
		}
		b, info, err := ck.Raw(tensor)
		if err != nil {
			return nil, err
		}
		if info.Dtype != dtype {
			return nil, fmt.Errorf("%s: dtype %s, want %s", where(tensor), info.Dtype, dtype)
		}
		return b, nil
	}
	floats := func(tensor string, n int) ([]float32, error) {
		b, err := raw(tensor, "F32")
		if err != nil {
			return nil, err
		}
		if len(b) != 4*n {
			return nil, fmt.Errorf("%s: %d values, want %d", where(tensor), len(b)/4, n)
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out, nil
	}
	sb, err := raw(stateName, "U8")
	if err != nil {
		return nil, err
	}
	var st bnbQuantState
	if err := json.Unmarshal(sb, &st); err != nil {
		return nil, fmt.Errorf("%s: not the JSON of a bitsandbytes quant state: %w", where(stateName), err)
	}
	typ, err := quant.ParseType(st.QuantType)
	if err != nil || !strings.HasSuffix(stateName, "__"+st.QuantType) {
		return nil, fmt.Errorf("%s: quant_type %q does not match the tensor's name", where(stateName), st.QuantType)
	}
	if !sameShape(st.Shape, want) {
		return nil, fmt.Errorf("%s: shape %v, config.json implies %v", where(stateName), st.Shape, want)
	}
	if st.BlockSize <= 0 || st.BlockSize%2 != 0 {
		return nil, fmt.Errorf("%s: blocksize %d is not a positive even number", where(stateName), st.BlockSize)
	}
	q := &quant.Tensor{Type: typ, Shape: want, BlockSize: st.BlockSize, Nested: st.NestedOffset != nil}
	if q.Packed, err = raw(name, "U8"); err != nil {
		return nil, err
	}
	if len(q.Packed) != (q.Numel()+1)/2 {
		return nil, fmt.Errorf("%s: %d bytes of 4-bit codes for %d values", where(name), len(q.Packed), q.Numel())
	}
	code, err := floats(name+".quant_map", 16)
	if err != nil {
		return nil, err
	}
	q.Code = [16]float32(code)
	if !finite(code) {
		return nil, fmt.Errorf("%s: a non-finite value", where(name+".quant_map"))
	}
	nb := q.Blocks()
	if !q.Nested {
		if q.Absmax, err = floats(name+".absmax", nb); err != nil {
			return nil, err
		}
		if !finite(q.Absmax) {
			return nil, fmt.Errorf("%s: a non-finite value", where(name+".absmax"))
		}
		return q, q.Check()
	}
	if st.NestedBlockSize <= 0 {
		return nil, fmt.Errorf("%s: nested_blocksize %d is not positive", where(stateName), st.NestedBlockSize)
	}
	q.NestedBlock, q.Offset = st.NestedBlockSize, float32(*st.NestedOffset)
	if q.AbsmaxCodes, err = raw(name+".absmax", "U8"); err != nil {
		return nil, err
	}
	if len(q.AbsmaxCodes) != nb {
		return nil, fmt.Errorf("%s: %d quantized absmax values for %d blocks of %d", where(name+".absmax"), len(q.AbsmaxCodes), nb, q.BlockSize)
	}
	if q.NestedAbsmax, err = floats(name+".nested_absmax", (nb+q.NestedBlock-1)/q.NestedBlock); err != nil {
		return nil, err
	}
	nested, err := floats(name+".nested_quant_map", 256)
	if err != nil {
		return nil, err
	}
	q.NestedCode = [256]float32(nested)
	if !finite(q.NestedAbsmax) || !finite(q.NestedCode[:]) || !finite([]float32{q.Offset}) {
		return nil, fmt.Errorf("%s: a non-finite nested absmax, map value or offset", where(name))
	}
	return q, q.Check()
}

func finite(xs []float32) bool { return firstNonFinite(xs) < 0 }
