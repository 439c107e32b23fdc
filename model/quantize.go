package model

import (
	"fmt"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/quant"
)

// Quantization says how a frozen base keeps its decoder layers' linear
// weights in 4 bits (QLoRA).
type Quantization struct {
	Type   quant.Type // 0: not quantized
	Double bool       // double quantization of the per-block absmax values
}

// Quantizable reports whether weight name is quantized by a 4-bit base: the
// decoder layers' linear projections, which hold nearly all of a model's
// parameters. Norm vectors are tiny and scale every activation (4-bit
// error there shifts whole layers); the embedding is read by row gather,
// not a product, and the LM head's error lands directly on the logits, so
// both stay in the base dtype, as bitsandbytes and PEFT leave them.
func Quantizable(name string) bool {
	if !strings.HasPrefix(name, "model.layers.") || !strings.HasSuffix(name, ".weight") {
		return false
	}
	for _, short := range append(AttentionModules, MLPModules...) {
		if strings.HasSuffix(name, "."+short+".weight") {
			return true
		}
	}
	return false
}

// store keeps t (fp32 values just read) as the base wants it: 4-bit when q
// quantizes it, else 16-bit values of base, else fp32.
func (t *Tensor) store(name string, base amp.Format, q Quantization) error {
	if q.Type == 0 || !Quantizable(name) {
		t.compact(base)
		return nil
	}
	return t.quantize(name, q)
}

func (t *Tensor) quantize(name string, q Quantization) error {
	blob, err := quant.QuantizeBlob(q.Type, t.Float32(), t.Shape, quant.Options{Double: q.Double})
	if err != nil {
		return fmt.Errorf("quantize %s: %w", name, err)
	}
	t.Data, t.Bits, t.Q4 = nil, nil, blob
	return nil
}

// Quantize keeps the quantizable weights of m 4-bit as q says (a randomly
// initialized base: a loaded one is quantized tensor by tensor by
// LoadQuantized).
func (m *Model) Quantize(q Quantization) error {
	if q.Type == 0 {
		return nil
	}
	for name, t := range m.Weights {
		if Quantizable(name) && t.Q4 == nil {
			if err := t.quantize(name, q); err != nil {
				return err
			}
		}
	}
	return nil
}
