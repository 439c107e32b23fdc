package model

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/mixtune/mixtune/quant"
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
		qt, kept, err := st.Add(s.Name, t, q)
		if err != nil {
			return st, err
		}
		if !kept {
			t.Data, t.Bits, t.Q4 = nil, nil, qt.Encode()
		}
	}
	return st, nil
}

// Add quantizes weight name, t, 4-bit as q says (Model.Requantize, one
// weight) and adds the error that added to st; a weight already 4-bit of
// q's type, double quantization and block size keeps its codes (kept),
// and counts as Kept. t is left as it is.
func (st *RequantStats) Add(name string, t *Tensor, q Quantization) (qt *quant.Tensor, kept bool, err error) {
	if t.Q4 != nil {
		old, err := quant.Decode(t.Q4)
		if err != nil {
			return nil, false, fmt.Errorf("requantize %s: %w", name, err)
		}
		if old.Type == q.Type && old.Nested == q.Double && old.BlockSize == quant.DefaultBlockSize {
			st.Kept++
			return old, true, nil
		}
	}
	vals := t.Float32()
	qt, err = quant.Quantize(q.Type, vals, t.Shape, quant.Options{Double: q.Double})
	if err != nil {
		return nil, false, fmt.Errorf("requantize %s: %w", name, err)
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
	return qt, false, nil
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
