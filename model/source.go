package model

import (
	"fmt"
	"strings"

	"github.com/mixtune/mixtune/safetensors"
)

// Source is a model directory opened for reading one weight at a time:
// its config and the weight files' headers, checked against each other,
// and no tensor data until Read. LoadQuantized reads every weight through
// it; a merge that writes each weight as soon as it is read holds one at
// a time.
type Source struct {
	Dir    string
	Config Config
	ck     *safetensors.Checkpoint
	shapes map[string][]int // each weight's shape, as config.json implies it
}

// OpenSource reads dir's config.json and checks the weight files' headers
// against it, as Inspect does.
func OpenSource(dir string) (*Source, error) {
	c, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	if err := checkTensors(c, ck); err != nil {
		return nil, fmt.Errorf("load model %s: %w", dir, err)
	}
	shapes := map[string][]int{}
	for _, sp := range Specs(c) {
		shapes[sp.Name] = sp.Shape
	}
	return &Source{Dir: dir, Config: c, ck: ck, shapes: shapes}, nil
}

// Stored names the format each weight has on disk ("BF16", "F32", or
// "NF4"/"FP4" for a bitsandbytes 4-bit one), from the headers, as
// Model.Stored holds it once loaded.
func (s *Source) Stored() map[string]string {
	stored := map[string]string{}
	for _, sp := range Specs(s.Config) {
		if state, q4 := bnbState(s.ck, sp.Name); q4 && s.Config.BnB4 != nil {
			stored[sp.Name] = strings.ToUpper(state[len(sp.Name)+len(bnbStatePrefix):])
			continue
		}
		info, _ := s.ck.Info(sp.Name)
		stored[sp.Name] = info.Dtype
	}
	return stored
}

// Read reads the weight name (one of Specs' names): a bitsandbytes 4-bit
// weight as its 4-bit blob (Q4), every other one converted to fp32 (Data).
// Every part of a 4-bit weight is checked against the others, and every
// fp32 value must be finite; the error names the file and tensor.
func (s *Source) Read(name string) (*Tensor, error) {
	shape, ok := s.shapes[name]
	if !ok {
		return nil, fmt.Errorf("load model %s: no weight %s in a model with this config.json", s.Dir, name)
	}
	if _, q4 := bnbState(s.ck, name); q4 && s.Config.BnB4 != nil {
		qt, err := loadBnB4(s.ck, name, shape)
		if err != nil {
			return nil, fmt.Errorf("load model %s: %w", s.Dir, err)
		}
		return &Tensor{Shape: shape, Q4: qt.Encode()}, nil
	}
	data, _, err := s.ck.Float32(name)
	if err != nil {
		return nil, fmt.Errorf("load model %s: %w", s.Dir, err)
	}
	if i := firstNonFinite(data); i >= 0 {
		return nil, fmt.Errorf("load model %s: tensor %s holds a non-finite value (%v at index %d)", s.Dir, name, data[i], i)
	}
	return &Tensor{Shape: shape, Data: data}, nil
}

// ReadQuantized is Read with a decoder projection that is not 4-bit on
// disk quantized as q says (none when q.Type is 0): the weight as a QLoRA
// run with model.quantize q held it, and as LoadQuantized(dir, FP32, q)
// keeps it.
func (s *Source) ReadQuantized(name string, q Quantization) (*Tensor, error) {
	t, err := s.Read(name)
	if err != nil || t.Q4 != nil || q.Type == 0 || !Quantizable(name) {
		return t, err
	}
	if err := t.quantize(name, q); err != nil {
		return nil, fmt.Errorf("load model %s: %w", s.Dir, err)
	}
	return t, nil
}
