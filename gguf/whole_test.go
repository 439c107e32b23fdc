package gguf

import (
	"fmt"

	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

// The export as it was built before it streamed: the model loaded whole,
// every weight merged and held in fp32, the file built in memory. The
// tests keep it as the reference PlanExport's files must equal byte for
// byte, and for the weights llama.cpp's outputs are compared with.

// Export is what `mixtune export gguf` wrote, built whole: the model
// in modelDir with the adapter in adapterDir (optional) merged in fp32, or
// with asLoRA the adapter alone as a llama.cpp LoRA file.
type Export struct {
	File      *File
	Fallbacks []Fallback
	Vocab     *Vocab // nil for an adapter
	Model     *model.Model
	LoRA      *peft.Adapter // nil without an adapter
	// Weights are the fp32 weights the file holds before conversion, the
	// adapter merged (nil for an adapter file).
	Weights map[string][]float32
}

// Build reads, merges and converts the whole model; see Export.
func Build(modelDir, adapterDir string, asLoRA bool, opt ModelOptions) (*Export, error) {
	_, vocab, err := readHead(modelDir, adapterDir, asLoRA)
	if err != nil {
		return nil, err
	}
	e := &Export{Vocab: vocab}
	if e.Model, err = model.Load(modelDir); err != nil {
		return nil, err
	}
	if err := e.Model.Quantize(opt.Base); err != nil {
		return nil, err
	}
	if adapterDir != "" {
		if e.LoRA, err = peft.Load(adapterDir, peft.BaseOf(e.Model)); err != nil {
			return nil, err
		}
	}
	if asLoRA {
		if e.File, e.Fallbacks, err = Adapter(e.Model.Config, e.LoRA, opt); err != nil {
			return nil, fmt.Errorf("%s: %w", adapterDir, err)
		}
		return e, nil
	}
	if e.Weights, err = MergedWeights(e.Model, e.LoRA); err != nil {
		return nil, err
	}
	if e.File, e.Fallbacks, err = Model(e.Model.Config, e.Weights, e.Vocab, opt); err != nil {
		return nil, fmt.Errorf("%s: %w", modelDir, err)
	}
	return e, nil
}

// MergedWeights is m's weights in fp32 with l merged in, as `mixtune
// generate` merges it (peft.MergedWeights), so that the file computes
// what generate computes. Unadapted weights are shared, not copied.
func MergedWeights(m *model.Model, l *peft.Adapter) (map[string][]float32, error) {
	w, err := peft.MergedWeights(m, l)
	if err != nil {
		return nil, fmt.Errorf("merge the adapter: %w", err)
	}
	return w, nil
}
