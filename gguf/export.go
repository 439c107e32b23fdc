package gguf

import (
	"fmt"
	"path/filepath"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

// Plan is what `mixtune export gguf` writes, read, checked and laid out:
// the model in a directory with an adapter (optional) merged in fp32, or
// the adapter alone as a llama.cpp LoRA file. The file's metadata,
// tokenizer and tensor headers (hence every offset) are decided, and
// every input checked that can be without its weights' values: the
// model's config and weight headers, the tokenizer, the adapter. A
// model's weights are read, dequantized if 4-bit, merged and converted
// one at a time as the file is written (Tensor.Fill), so that writing
// holds about the largest weight in fp32 and the adapter, not the model;
// a weight found bad then stops the write with a *DataError.
type Plan struct {
	File      *File
	Fallbacks []Fallback
	Vocab     *Vocab // nil for an adapter
	Config    model.Config
	LoRA      *peft.Adapter // nil without an adapter
}

// PlanExport reads and checks modelDir and adapterDir (optional) and lays
// out the file; see Plan. Its errors are all about the input (a
// directory, a tensor, a field), and nothing is written: the caller
// writes the file.
func PlanExport(modelDir, adapterDir string, asLoRA bool, opt ModelOptions) (*Plan, error) {
	cfg, vocab, err := readHead(modelDir, adapterDir, asLoRA)
	if err != nil {
		return nil, err
	}
	p := &Plan{Config: cfg, Vocab: vocab}
	base, err := openBase(modelDir, adapterDir, opt.Base, p)
	if err != nil {
		return nil, err
	}
	if asLoRA {
		if p.File, p.Fallbacks, err = Adapter(cfg, p.LoRA, opt); err != nil {
			return nil, fmt.Errorf("%s: %w", adapterDir, err)
		}
		return p, nil
	}
	// merged in fp32 and checked finite there, as generate merges
	if p.File, p.Fallbacks, err = ModelFrom(cfg, peft.MergedSource(base, p.LoRA, amp.FP32), p.Vocab, opt); err != nil {
		return nil, fmt.Errorf("%s: %w", modelDir, err)
	}
	return p, nil
}

// readHead reads and checks modelDir's config and, unless asLoRA, its
// tokenizer: before the weights, so that a refusal costs no loading.
func readHead(modelDir, adapterDir string, asLoRA bool) (model.Config, *Vocab, error) {
	if asLoRA && adapterDir == "" {
		return model.Config{}, nil, fmt.Errorf("a LoRA export needs an adapter")
	}
	cfg, err := model.ReadConfig(modelDir)
	if err != nil {
		return cfg, nil, err
	}
	if err := CheckModel(cfg); err != nil {
		return cfg, nil, fmt.Errorf("%s: %w", modelDir, err)
	}
	if asLoRA {
		return cfg, nil, nil
	}
	v, err := LoadVocab(modelDir, cfg.VocabSize, cfg.BOSTokenID, cfg.EOSTokenID, cfg.PadTokenID)
	return cfg, v, err
}

// openBase opens the model in modelDir for reading one weight at a time
// and loads the adapter in adapterDir (if any) into p.LoRA; it returns
// the function that reads each base weight as the adapter trained on it
// (quantized as q says: the 4-bit base of a QLoRA run). An adapter
// trained against the residual of its base (pissa or olora saved
// unconverted) needs every adapted base weight to load, so for it the
// base is loaded whole.
func openBase(modelDir, adapterDir string, q model.Quantization, p *Plan) (func(name string) (*model.Tensor, error), error) {
	src, err := model.OpenSource(modelDir)
	if err != nil {
		return nil, err
	}
	if adapterDir == "" {
		return func(name string) (*model.Tensor, error) { return src.ReadQuantized(name, q) }, nil
	}
	acfg, err := peft.ReadConfig(adapterDir)
	if err != nil {
		return nil, fmt.Errorf("load adapter: %w", err)
	}
	if !acfg.ResidualInit() {
		var read func(name string) (*model.Tensor, error)
		p.LoRA, read, err = peft.OpenStreaming(src, adapterDir, q)
		return read, err
	}
	m, err := model.Load(modelDir)
	if err != nil {
		return nil, err
	}
	if err := m.Quantize(q); err != nil {
		return nil, err
	}
	if p.LoRA, err = peft.Load(adapterDir, peft.BaseOf(m)); err != nil {
		return nil, err
	}
	return func(name string) (*model.Tensor, error) {
		if t := m.Weights[name]; t != nil {
			return t, nil
		}
		return nil, fmt.Errorf("load model %s: no weight %s", modelDir, name)
	}, nil
}

// DefaultName is general.name when none is given: the model directory's
// name, and the adapter directory's after a dash.
func DefaultName(modelDir, adapterDir string) string {
	name := filepath.Base(filepath.Clean(modelDir))
	if adapterDir != "" {
		name += "-" + filepath.Base(filepath.Clean(adapterDir))
	}
	return name
}
