package gguf

import (
	"fmt"
	"math"
	"strings"

	"github.com/mixtune/mixtune/model"
)

// Exporting a model: the metadata llama.cpp reads for each family and the
// tensors under llama.cpp's names, as convert_hf_to_gguf.py writes them
// (conversion/base.py TextModel.set_gguf_parameters and prepare_tensors,
// conversion/llama.py LlamaModel, conversion/qwen.py Qwen2Model and
// Qwen3Model; names from gguf-py/gguf/constants.py TENSOR_NAMES) and as
// llama.cpp loads them (src/models/llama.cpp, qwen2.cpp, qwen3.cpp).

// Arch is the llama.cpp architecture of a mixtune family. Mistral is
// "llama": the converter registers MistralForCausalLM under LlamaModel.
// An empty family is llama, as model_type absent is (a random init's).
func Arch(family string) (string, error) {
	switch family {
	case "", model.Llama, model.Mistral:
		return "llama", nil
	case model.Qwen2:
		return "qwen2", nil
	case model.Qwen3:
		return "qwen3", nil
	}
	return "", fmt.Errorf("model family %q is not supported by GGUF export (it writes llama, mistral, qwen2 and qwen3)", family)
}

// permuted reports whether the family's q and k weights are permuted:
// llama.cpp's "llama" architecture rotates interleaved pairs (RoPE "norm"
// mode) where transformers rotates halves, so LlamaModel.permute reorders
// the rows of each head; qwen2 and qwen3 use NEOX mode, the halves, and
// are written as they are.
func permuted(family string) bool {
	return family == "" || family == model.Llama || family == model.Mistral
}

// permuteRows is LlamaModel.permute on a [heads·hd, cols] matrix (cols = 1
// for a bias): reshape to [heads, 2, hd/2, cols], swap axes 1 and 2. Row
// h·hd + 2j + t of the result is row h·hd + t·hd/2 + j of w, so the pair
// (2j, 2j+1) that ggml rotates together is HF's (j, j + hd/2).
func permuteRows(w []float32, heads, cols int) []float32 {
	out := make([]float32, len(w))
	hd := len(w) / cols / heads
	for h := 0; h < heads; h++ {
		for j := 0; j < hd/2; j++ {
			for t := 0; t < 2; t++ {
				src := (h*hd + t*hd/2 + j) * cols
				dst := (h*hd + 2*j + t) * cols
				copy(out[dst:dst+cols], w[src:src+cols])
			}
		}
	}
	return out
}

// ModelOptions choose the export.
type ModelOptions struct {
	// Type is the type of the matrices; vectors and norms stay f32, as the
	// converter keeps them ("Most of the codebase that takes in 1D tensors
	// or norms only handles F32 tensors").
	Type TensorType
	// Name is general.name.
	Name string
	// Base, when its Type is set, is the 4-bit base a QLoRA adapter was
	// trained on: the model is quantized so and dequantized in fp32
	// before the merge.
	Base model.Quantization
}

// Fallback is a tensor written in another type than asked, and why.
type Fallback struct {
	Tensor string
	Type   TensorType
	Reason string
}

// CheckModel refuses a model llama.cpp would compute differently from
// mixtune, naming what is unsupported.
func CheckModel(c model.Config) error {
	if _, err := Arch(c.Family); err != nil {
		return err
	}
	hd := c.HeadDimension()
	switch {
	case c.Family == model.Qwen3 && c.AttentionBias:
		// llama.cpp's qwen3 loads optional q/k/v biases but no o_proj bias
		return fmt.Errorf("qwen3 with attention_bias true (a bias on o_proj) is not supported by GGUF export: llama.cpp's qwen3 has no attention output bias")
	case c.Family == model.Qwen2 && c.NumAttentionHeads*hd != c.HiddenSize:
		return fmt.Errorf("qwen2 with head_dim %d × %d heads ≠ hidden_size %d is not supported by GGUF export: llama.cpp's qwen2 assumes they are equal", hd, c.NumAttentionHeads, c.HiddenSize)
	}
	if rs := c.RopeScaling; rs != nil && rs.Type != "linear" && rs.Type != "llama3" {
		return fmt.Errorf("rope_scaling %s is not supported by GGUF export", rs.Type)
	}
	if rs := c.RopeScaling; rs != nil && rs.Type == "llama3" && !permuted(c.Family) {
		return fmt.Errorf("rope_scaling llama3 on %s is not supported by GGUF export (llama.cpp reads the rope_freqs factors in its llama architecture)", c.Family)
	}
	return nil
}

// WeightSource yields a model's weights in fp32 by HF name (the adapter
// merged, for an export of a merged model), each when its tensor is
// written: model.WeightSource and a merge (peft.MergedSource) are ones.
type WeightSource interface {
	Float32(name string) ([]float32, error)
}

// Model builds the GGUF file of a model with config c and weights w (fp32
// by HF name, adapters already merged) and tokenizer v, every tensor's
// values in hand (Data). It returns the tensors written in another type
// than opt.Type: q8_0 needs rows of a multiple of 32 values, and the
// converter writes a tensor that cannot be quantized as f16 ("falling
// back to F16"), as this does.
func Model(c model.Config, w map[string][]float32, v *Vocab, opt ModelOptions) (*File, []Fallback, error) {
	has := func(name string) bool { _, ok := w[name]; return ok }
	f, fallbacks, err := modelFile(c, mapWeights(w), has, v, opt)
	if err != nil {
		return nil, nil, err
	}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.Fill != nil {
			if t.Data, err = t.Fill(); err != nil {
				return nil, nil, err
			}
			t.Fill = nil
		}
	}
	return f, fallbacks, f.Check()
}

// ModelFrom is Model with the weights taken from src as each tensor is
// written (Tensor.Fill), in file order: the file's metadata, tokenizer
// and tensor headers are all decided now, and writing it holds one
// weight at a time. The names it asks src for are those of
// model.Specs(c).
func ModelFrom(c model.Config, src WeightSource, v *Vocab, opt ModelOptions) (*File, []Fallback, error) {
	names := map[string]bool{}
	for _, s := range model.Specs(c) {
		names[s.Name] = true
	}
	f, fallbacks, err := modelFile(c, src, func(name string) bool { return names[name] }, v, opt)
	if err != nil {
		return nil, nil, err
	}
	return f, fallbacks, f.Check()
}

// mapWeights is weights in memory as a WeightSource.
type mapWeights map[string][]float32

func (w mapWeights) Float32(name string) ([]float32, error) {
	d, ok := w[name]
	if !ok {
		return nil, fmt.Errorf("the model has no tensor %s", name)
	}
	return d, nil
}

// modelFile lays out the file of Model and ModelFrom: every tensor's
// values are a Fill that asks src for its weight (has tells which it
// has) and permutes q's and k's rows.
func modelFile(c model.Config, src WeightSource, has func(name string) bool, v *Vocab, opt ModelOptions) (*File, []Fallback, error) {
	if err := CheckModel(c); err != nil {
		return nil, nil, err
	}
	if err := v.Check(c.VocabSize); err != nil {
		return nil, nil, err
	}
	arch, _ := Arch(c.Family)
	hd := c.HeadDimension()
	f := &File{}
	a := func(key string, val any) { f.KV = append(f.KV, KV{arch + "." + key, val}) }
	f.KV = append(f.KV,
		KV{"general.architecture", arch},
		KV{"general.type", "model"},
		KV{"general.name", opt.Name},
		KV{"general.file_type", opt.Type.FileType()},
		KV{"general.quantization_version", uint32(2)}, // GGML_QNT_VERSION
	)
	a("vocab_size", uint32(c.VocabSize))
	a("context_length", uint32(c.MaxPositionEmbeddings))
	a("embedding_length", uint32(c.HiddenSize))
	a("block_count", uint32(c.NumHiddenLayers))
	a("feed_forward_length", uint32(c.IntermediateSize))
	a("attention.head_count", uint32(c.NumAttentionHeads))
	a("attention.head_count_kv", uint32(c.NumKeyValueHeads))
	a("rope.freq_base", float32(c.RopeTheta))
	a("attention.layer_norm_rms_epsilon", float32(c.RMSNormEps))
	// head_dim: llama.cpp defaults it to hidden/heads; written always so a
	// model whose head_dim differs (qwen3) is read right
	a("attention.key_length", uint32(hd))
	a("attention.value_length", uint32(hd))
	if arch == "llama" {
		a("rope.dimension_count", uint32(hd)) // LlamaModel.set_gguf_parameters
	}
	if rs := c.RopeScaling; rs != nil && rs.Type == "linear" {
		a("rope.scaling.type", "linear")
		a("rope.scaling.factor", float32(rs.Factor))
	}
	f.KV = append(f.KV, v.KV()...)

	var fallbacks []Fallback
	type fill = func() ([]float32, error)
	add := func(name string, shape []int, values fill, matrix bool) {
		t := F32
		if matrix {
			t = opt.Type
			if _, err := t.RowBytes(shape[len(shape)-1]); err != nil {
				fallbacks = append(fallbacks, Fallback{name, F16, err.Error()})
				t = F16
			}
		}
		f.Tensors = append(f.Tensors, Tensor{Name: name, Shape: shape, Type: t, Fill: values})
	}
	var missing []string
	must := func(name string) fill {
		if !has(name) {
			missing = append(missing, name)
		}
		return func() ([]float32, error) { return src.Float32(name) }
	}
	// permute is values with its rows permuted for heads heads of cols
	// columns, when the family's q and k are
	permute := func(values fill, heads, cols int) fill {
		if heads == 0 || !permuted(c.Family) {
			return values
		}
		return func() ([]float32, error) {
			d, err := values()
			if err != nil {
				return nil, err
			}
			return permuteRows(d, heads, cols), nil
		}
	}
	if rs := c.RopeScaling; rs != nil && rs.Type == "llama3" {
		f.Tensors = append(f.Tensors, Tensor{Name: "rope_freqs.weight", Shape: []int{hd / 2}, Type: F32, Data: llama3Factors(c)})
	}
	add("token_embd.weight", []int{c.VocabSize, c.HiddenSize}, must("model.embed_tokens.weight"), true)
	kvDim := c.NumKeyValueHeads * hd
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := model.LayerPrefix(i)
		blk := fmt.Sprintf("blk.%d.", i)
		add(blk+"attn_norm.weight", []int{c.HiddenSize}, must(p+"input_layernorm.weight"), false)
		for _, m := range []struct {
			short, gg string
			out, in   int
			heads     int // for the permutation; 0 for none
		}{
			{"q_proj", "attn_q", c.NumAttentionHeads * hd, c.HiddenSize, c.NumAttentionHeads},
			{"k_proj", "attn_k", kvDim, c.HiddenSize, c.NumKeyValueHeads},
			{"v_proj", "attn_v", kvDim, c.HiddenSize, 0},
			{"o_proj", "attn_output", c.HiddenSize, c.NumAttentionHeads * hd, 0},
		} {
			add(blk+m.gg+".weight", []int{m.out, m.in}, permute(must(model.ModulePath(i, m.short)+".weight"), m.heads, m.in), true)
			if c.Bias(m.short) {
				add(blk+m.gg+".bias", []int{m.out}, permute(must(model.ModulePath(i, m.short)+".bias"), m.heads, 1), false)
			}
		}
		if c.QKNorm {
			add(blk+"attn_q_norm.weight", []int{hd}, must(p+"self_attn.q_norm.weight"), false)
			add(blk+"attn_k_norm.weight", []int{hd}, must(p+"self_attn.k_norm.weight"), false)
		}
		add(blk+"ffn_norm.weight", []int{c.HiddenSize}, must(p+"post_attention_layernorm.weight"), false)
		for _, m := range []struct {
			short, gg string
			out, in   int
		}{
			{"gate_proj", "ffn_gate", c.IntermediateSize, c.HiddenSize},
			{"up_proj", "ffn_up", c.IntermediateSize, c.HiddenSize},
			{"down_proj", "ffn_down", c.HiddenSize, c.IntermediateSize},
		} {
			add(blk+m.gg+".weight", []int{m.out, m.in}, must(model.ModulePath(i, m.short)+".weight"), true)
			if c.Bias(m.short) {
				add(blk+m.gg+".bias", []int{m.out}, must(model.ModulePath(i, m.short)+".bias"), false)
			}
		}
	}
	add("output_norm.weight", []int{c.HiddenSize}, must("model.norm.weight"), false)
	if !c.TieWordEmbeddings {
		// tied: no output tensor, llama.cpp reuses token_embd
		add("output.weight", []int{c.VocabSize, c.HiddenSize}, must("lm_head.weight"), true)
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("the model has no tensor %s", strings.Join(missing, ", "))
	}
	return f, fallbacks, nil
}

// llama3Factors are the rope_freqs.weight values convert_hf_to_gguf writes
// for rope_scaling llama3 (LlamaModel.generate_extra_tensors): per
// frequency, 1 for short wavelengths, factor for long ones, and between
// them 1/((1−s)/factor + s). llama.cpp divides each frequency by its
// factor, which is transformers' smoothed inv_freq.
func llama3Factors(c model.Config) []float32 {
	rs := c.RopeScaling
	hd := c.HeadDimension()
	lowWavelen := float64(rs.OriginalMaxPositionEmbeddings) / rs.LowFreqFactor
	highWavelen := float64(rs.OriginalMaxPositionEmbeddings) / rs.HighFreqFactor
	out := make([]float32, hd/2)
	for i := range out {
		// freqs in fp32 as torch computes them: base ** (arange/dim)
		freq := float32(1 / math.Pow(c.RopeTheta, float64(float32(2*i)/float32(hd))))
		wavelen := 2 * math.Pi / float64(freq)
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = float32(rs.Factor)
		default:
			smooth := (float64(rs.OriginalMaxPositionEmbeddings)/wavelen - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
			out[i] = float32(1 / ((1-smooth)/rs.Factor + smooth))
		}
	}
	return out
}
