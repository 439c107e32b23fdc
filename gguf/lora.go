package gguf

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

// Exporting a LoRA adapter as llama.cpp's adapter file (--lora), as
// convert_lora_to_gguf.py writes it and src/llama-adapter.cpp reads it:
// general.type "adapter", adapter.type "lora", adapter.lora.alpha, and for
// each adapted matrix W (named as in the model file) W.lora_a = A [r, in]
// and W.lora_b = B [out, r]. llama.cpp adds scale·B·(A·x) with scale =
// alpha / r, r read from lora_b; the base model's q/k permutation applies
// to B's rows (the output dimension), as the converter's LoraTorchTensor
// permutes them.

var moduleNames = map[string]string{
	"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
	"gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down",
}

// TensorName is the GGUF name of the weight of the HF module at path,
// e.g. model.layers.3.self_attn.q_proj → blk.3.attn_q.weight.
func TensorName(path string) (string, error) {
	rest, ok := strings.CutPrefix(path, "model.layers.")
	if ok {
		num, tail, _ := strings.Cut(rest, ".")
		i, err := strconv.Atoi(num)
		short := tail[strings.LastIndex(tail, ".")+1:]
		if gg, known := moduleNames[short]; err == nil && known && model.ModulePath(i, short) == path {
			return fmt.Sprintf("blk.%d.%s.weight", i, gg), nil
		}
	}
	return "", fmt.Errorf("module %s has no GGUF name", path)
}

// Alpha is adapter.lora.alpha for an adapter whose branch is scaled by
// c.Scaling(): llama.cpp scales by alpha/r, so rsLoRA's α/√r is written
// as alpha α·√r.
func Alpha(c peft.Config) float32 {
	if c.UseRSLoRA {
		return float32(c.Alpha * math.Sqrt(float64(c.R)))
	}
	return float32(c.Alpha)
}

// Adapter builds the GGUF adapter file of LoRA l for a base model with
// config c. DoRA has no llama.cpp adapter form (it rescales each row of
// the merged weight), so it is refused: merge it into a model export.
func Adapter(c model.Config, l *peft.Adapter, opt ModelOptions) (*File, []Fallback, error) {
	if err := CheckModel(c); err != nil {
		return nil, nil, err
	}
	if l.Config.UseDoRA {
		return nil, nil, fmt.Errorf("a DoRA adapter has no llama.cpp adapter form (llama.cpp adds B·A, DoRA also rescales each row); export the model with the adapter merged instead")
	}
	arch, _ := Arch(c.Family)
	f := &File{KV: []KV{
		{"general.architecture", arch},
		{"general.type", "adapter"},
		{"general.name", opt.Name},
		{"adapter.type", "lora"},
		{"adapter.lora.alpha", Alpha(l.Config)},
	}}
	if len(l.Config.ModulesToSave) > 0 {
		return nil, nil, fmt.Errorf("the adapter replaces %v whole (modules_to_save), which a llama.cpp adapter cannot carry; export the model with the adapter merged instead", l.Config.ModulesToSave)
	}
	var fallbacks []Fallback
	hd := c.HeadDimension()
	alpha := float64(Alpha(l.Config))
	for _, m := range l.Modules {
		r := m.R
		// llama.cpp scales each module by the one alpha over its rank
		if s := alpha / float64(r); math.Abs(s-m.Scaling) > 1e-6*m.Scaling {
			return nil, nil, fmt.Errorf("%s has scaling %g (from rank_pattern or alpha_pattern), which llama.cpp's alpha/r with the adapter's one alpha %g cannot express; export the model with the adapter merged instead", m.Path, m.Scaling, alpha)
		}
		name, err := TensorName(m.Path)
		if err != nil {
			return nil, nil, err
		}
		b := m.B
		if permuted(c.Family) {
			switch {
			case strings.HasSuffix(m.Path, ".q_proj"):
				b = permuteRows(b, m.Out/hd, r)
			case strings.HasSuffix(m.Path, ".k_proj"):
				b = permuteRows(b, m.Out/hd, r)
			}
		}
		for _, t := range []Tensor{
			{Name: name + ".lora_a", Shape: []int{r, m.In}, Type: opt.Type, Data: m.A},
			{Name: name + ".lora_b", Shape: []int{m.Out, r}, Type: opt.Type, Data: b},
		} {
			if _, err := t.Type.RowBytes(t.Shape[1]); err != nil {
				fallbacks = append(fallbacks, Fallback{t.Name, F16, err.Error()})
				t.Type = F16
			}
			f.Tensors = append(f.Tensors, t)
		}
	}
	return f, fallbacks, f.Check()
}
