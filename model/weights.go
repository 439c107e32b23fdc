package model

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/quant"
	"github.com/mixtune/mixtune/safetensors"
)

// Tensor is a weight: an fp32 master copy training updates in place, or,
// for a frozen weight kept in 16 bits, its bf16/fp16 bits and no fp32 copy,
// or, for a frozen weight kept in 4 bits, its quantized blob.
type Tensor struct {
	Shape  []int
	Data   []float32  // fp32 values; nil when the weight is kept in 16 or 4 bits
	Bits   []uint16   // 16-bit values, when Data is nil
	Format amp.Format // Bits' format
	// Q4 is a 4-bit block-quantized weight (quant.Tensor.Encode), when
	// Data and Bits are nil.
	Q4 []byte
}

// Float32 returns the values in fp32, converting 16-bit ones, or
// dequantizing 4-bit ones, into a new slice.
func (t *Tensor) Float32() []float32 {
	if t.Data != nil {
		return t.Data
	}
	if t.Q4 != nil {
		q, err := quant.Decode(t.Q4)
		if err != nil { // quantize and the bnb loader wrote it
			panic(fmt.Sprintf("model: 4-bit weight: %v", err))
		}
		return q.Dequantize()
	}
	d := make([]float32, len(t.Bits))
	t.Format.FromBits16Slice(d, t.Bits)
	return d
}

// Bytes is the memory the values take.
func (t *Tensor) Bytes() int { return 4*len(t.Data) + 2*len(t.Bits) + len(t.Q4) }

// Model is a Llama model's config and weights under their HF names.
type Model struct {
	Config  Config
	Weights map[string]*Tensor
	// Stored names the format each tensor had on disk ("BF16", "F32", ...);
	// every one was converted to fp32 when it was loaded, so no mixed
	// dtypes reach the graph.
	Stored map[string]string
}

// Spec names one weight and its shape.
type Spec struct {
	Name  string
	Shape []int
}

// Linear modules of one decoder layer, by their HF short names.
var (
	AttentionModules = []string{"q_proj", "k_proj", "v_proj", "o_proj"}
	MLPModules       = []string{"gate_proj", "up_proj", "down_proj"}
)

// LayerPrefix is the HF name prefix of decoder layer i.
func LayerPrefix(i int) string { return fmt.Sprintf("model.layers.%d.", i) }

// ModulePath is the HF path of a linear module in layer i, e.g.
// "model.layers.3.self_attn.q_proj".
func ModulePath(i int, short string) string {
	for _, m := range AttentionModules {
		if m == short {
			return LayerPrefix(i) + "self_attn." + short
		}
	}
	return LayerPrefix(i) + "mlp." + short
}

// Specs lists the weights of a model with config c in a fixed order.
func Specs(c Config) []Spec {
	var specs []Spec
	eachSpec(c, func(s Spec) bool { specs = append(specs, s); return true })
	return specs
}

// eachSpec calls f on each weight of a model with config c, in Specs'
// order, until f returns false: checking a config against a file stops at
// the first missing tensor rather than listing a million layers first.
func eachSpec(c Config, f func(Spec) bool) {
	d, ff, hd := c.HiddenSize, c.IntermediateSize, c.HeadDimension()
	q, kv := c.NumAttentionHeads*hd, c.NumKeyValueHeads*hd
	if !f(Spec{"model.embed_tokens.weight", []int{c.VocabSize, d}}) {
		return
	}
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := LayerPrefix(i)
		specs := []Spec{{p + "input_layernorm.weight", []int{d}}}
		lin := func(short string, out, in int) {
			path := ModulePath(i, short)
			specs = append(specs, Spec{path + ".weight", []int{out, in}})
			if c.Bias(short) {
				specs = append(specs, Spec{path + ".bias", []int{out}})
			}
		}
		lin("q_proj", q, d)
		lin("k_proj", kv, d)
		lin("v_proj", kv, d)
		lin("o_proj", d, q)
		if c.QKNorm {
			specs = append(specs, Spec{p + "self_attn.q_norm.weight", []int{hd}}, Spec{p + "self_attn.k_norm.weight", []int{hd}})
		}
		specs = append(specs, Spec{p + "post_attention_layernorm.weight", []int{d}})
		lin("gate_proj", ff, d)
		lin("up_proj", ff, d)
		lin("down_proj", d, ff)
		for _, s := range specs {
			if !f(s) {
				return
			}
		}
	}
	if !f(Spec{"model.norm.weight", []int{d}}) {
		return
	}
	if !c.TieWordEmbeddings {
		f(Spec{"lm_head.weight", []int{c.VocabSize, d}})
	}
}

// New initializes a model as HF's LlamaPreTrainedModel does: linear and
// embedding weights from N(0, initializer_range²), norm weights 1. Each
// tensor draws from its own stream, keyed by seed and name, so adding a
// tensor never changes the others.
func New(c Config, seed uint64) (*Model, error) { return NewAs(c, seed, amp.FP32) }

// NewAs is New with the matrices kept as 16-bit values of base unless
// base is fp32, each converted as soon as it is drawn: a 1B-parameter
// model never holds its fp32 weights all at once (see Compact).
func NewAs(c Config, seed uint64, base amp.Format) (*Model, error) {
	return NewQuantized(c, seed, base, Quantization{})
}

// NewQuantized is NewAs with the decoder projections kept 4-bit as q says,
// each quantized as soon as it is drawn. No fp32 copy of a weight kept in
// fewer bits is made: a 16-bit one is drawn straight into its bits (the
// same values as drawing it in fp32 and compacting it), a 4-bit one into
// an fp32 scratch that its worker reuses and quantized from there in
// place (quant.QuantizeBlob); so the peak is the model as kept plus one
// projection in fp32 per worker, and nearly nothing is left for the
// collector.
//
// Tensors are drawn on up to GOMAXPROCS goroutines (at most
// maxQuantizeWorkers while quantizing, each holding a scratch): each draws
// from its own stream, so the weights are the same for any number.
func NewQuantized(c Config, seed uint64, base amp.Format, q Quantization) (*Model, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	std := c.InitializerRange
	if std == 0 {
		std = 0.02
	}
	specs := Specs(c)
	tensors := make([]*Tensor, len(specs))
	errs := make([]error, len(specs))
	workers := runtime.GOMAXPROCS(0)
	if q.Type != 0 {
		workers = min(workers, maxQuantizeWorkers)
	}
	workers = max(1, min(workers, len(specs)))
	largest := 0 // the largest weight drawn into a scratch, which each worker sizes for it at once
	for _, s := range specs {
		if q.Type != 0 && Quantizable(s.Name) {
			largest = max(largest, numel(s.Shape))
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var scratch []float32 // the values of a weight being quantized: made once, of the largest's size
			for i := range next {
				tensors[i], errs[i] = drawTensor(specs[i], seed, std, base, q, largest, &scratch)
			}
		}()
	}
	for i := range specs {
		next <- i
	}
	close(next)
	wg.Wait()
	m := &Model{Config: c, Weights: map[string]*Tensor{}, Stored: map[string]string{}}
	for i, s := range specs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		m.Weights[s.Name] = tensors[i]
	}
	return m, nil
}

// maxQuantizeWorkers bounds the goroutines drawing 4-bit weights, each
// with one projection's fp32 scratch (235 MB at Llama-3.1-8B's FFN).
const maxQuantizeWorkers = 4

// drawTensor draws weight s from its own stream, keyed by seed and its
// name, kept as NewQuantized says; scratch is the caller's fp32 buffer for
// weights quantized from their draw, made with room for largest values
// the first time one is.
func drawTensor(s Spec, seed uint64, std float64, base amp.Format, q Quantization, largest int, scratch *[]float32) (*Tensor, error) {
	n := numel(s.Shape)
	t := &Tensor{Shape: s.Shape}
	switch {
	case strings.HasSuffix(s.Name, ".bias"): // zero, as nn.Linear's after HF's _init_weights
		t.Data = make([]float32, n)
		return t, nil
	case strings.HasSuffix(s.Name, "norm.weight"):
		t.Data = make([]float32, n)
		for i := range t.Data {
			t.Data[i] = 1
		}
		return t, nil
	}
	h := fnv.New64a()
	h.Write([]byte(s.Name))
	rng := rand.New(rand.NewPCG(seed, h.Sum64()))
	switch {
	case q.Type != 0 && Quantizable(s.Name):
		if cap(*scratch) < n {
			*scratch = make([]float32, max(n, largest))
		}
		vals := (*scratch)[:n]
		for i := range vals {
			vals[i] = float32(rng.NormFloat64() * std)
		}
		blob, err := quant.QuantizeBlob(q.Type, vals, s.Shape, quant.Options{Double: q.Double})
		if err != nil {
			return nil, fmt.Errorf("quantize %s: %w", s.Name, err)
		}
		t.Q4 = blob
	case base != amp.FP32 && len(s.Shape) == 2: // what compact keeps of the fp32 draw
		t.Bits, t.Format = make([]uint16, n), base
		for i := range t.Bits {
			t.Bits[i] = base.Bits16(float32(rng.NormFloat64() * std))
		}
	default:
		t.Data = make([]float32, n)
		for i := range t.Data {
			t.Data[i] = float32(rng.NormFloat64() * std)
		}
	}
	return t, nil
}

// NumParams counts the model's weights.
func (m *Model) NumParams() int {
	n := 0
	for _, t := range m.Weights {
		n += numel(t.Shape)
	}
	return n
}

// Compact keeps the matrices named by frozen (embeddings, projections, the
// LM head; never the norm vectors, which are tiny) as 16-bit values of
// format f and drops their fp32 copies, halving their memory. A weight
// loaded from 16-bit storage of the same format keeps its exact value; an
// fp32 one is rounded to nearest even.
func (m *Model) Compact(f amp.Format, frozen func(name string) bool) {
	for name, t := range m.Weights {
		if frozen(name) {
			t.compact(f)
		}
	}
}

// compact keeps t, if it is an fp32 matrix, as 16-bit values of f (fp32:
// leaves it).
func (t *Tensor) compact(f amp.Format) {
	if f == amp.FP32 || t.Data == nil || len(t.Shape) != 2 {
		return
	}
	t.Bits = make([]uint16, len(t.Data))
	for i, v := range t.Data {
		t.Bits[i] = f.Bits16(v)
	}
	t.Data, t.Format = nil, f
}

// WeightBytes is the memory the model's weights take.
func (m *Model) WeightBytes() int {
	n := 0
	for _, t := range m.Weights {
		n += t.Bytes()
	}
	return n
}

// Inspect reads dir's config.json and checks the weight files' headers
// against it: every tensor the config implies is there with its shape, and
// nothing else is. It reads no tensor data, so it is the check to run
// before allocating anything.
func Inspect(dir string) (Config, error) {
	c, err := ReadConfig(dir)
	if err != nil {
		return Config{}, err
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return Config{}, fmt.Errorf("load model %s: %w", dir, err)
	}
	if err := checkTensors(c, ck); err != nil {
		return Config{}, fmt.Errorf("load model %s: %w", dir, err)
	}
	return c, nil
}

// checkTensors compares a checkpoint's tensor names and shapes with the
// weights config c implies.
func checkTensors(c Config, ck *safetensors.Checkpoint) error {
	want := map[string]bool{}
	var problem error
	eachSpec(c, func(s Spec) bool {
		info, ok := ck.Info(s.Name)
		state, q4 := bnbState(ck, s.Name)
		if q4 && c.BnB4 == nil {
			problem = fmt.Errorf("tensor %s is bitsandbytes 4-bit (%s is in %s), but config.json has no quantization_config", s.Name, state, ck.File(state))
			return false
		}
		if q4 {
			want[s.Name] = true // its shape is its quant state's, which loadBnB4 checks
			for _, part := range []string{"", ".absmax", ".quant_map"} {
				if _, ok := ck.Info(s.Name + part); !ok {
					problem = fmt.Errorf("missing tensor %s beside %s (%s)", s.Name+part, state, ck.File(state))
				}
			}
			return problem == nil
		}
		switch {
		case !ok:
			problem = fmt.Errorf("missing tensor %s", s.Name)
			if n := storedLayers(ck); strings.HasPrefix(s.Name, "model.layers.") && n < c.NumHiddenLayers {
				problem = fmt.Errorf("config.json has num_hidden_layers %d, but the weights hold %d layers (missing tensor %s)", c.NumHiddenLayers, n, s.Name)
			}
		case !sameShape(info.Shape, s.Shape):
			problem = fmt.Errorf("tensor %s has shape %v, config.json implies %v", s.Name, info.Shape, s.Shape)
		}
		want[s.Name] = true
		return problem == nil
	})
	if problem != nil {
		return problem
	}
	for _, name := range ck.Names() {
		switch {
		case want[name]:
		case c.BnB4 != nil && isBnBPartOf(name, want):
		case strings.HasSuffix(name, "rotary_emb.inv_freq"):
			// Old checkpoints store the rotary frequencies, sometimes in
			// 16 bits; mixtune always recomputes them in fp32.
		case name == "lm_head.weight" && c.TieWordEmbeddings:
			// Tied: the head is the embedding, as in HF.
		default:
			fam := c.Family
			if fam == "" {
				fam = Llama
			}
			return fmt.Errorf("unexpected tensor %s: not part of a %s model with this config.json", name, fam)
		}
	}
	return nil
}

// storedLayers is one more than the highest layer number the checkpoint
// has tensors for.
func storedLayers(ck *safetensors.Checkpoint) int {
	n := 0
	for _, name := range ck.Names() {
		var i int
		if _, err := fmt.Sscanf(name, "model.layers.%d.", &i); err == nil && i+1 > n {
			n = i + 1
		}
	}
	return n
}

// Load reads an HF model directory: config.json and model.safetensors, or
// shards listed in model.safetensors.index.json. F32, BF16, F16 and F64
// weights are converted to fp32 here, once. The headers are checked
// against the config before any tensor is read, and every value must be
// finite: a NaN in a base weight is reported here, by tensor, rather than
// later as a diverged loss.
func Load(dir string) (*Model, error) { return LoadAs(dir, amp.FP32) }

// LoadAs is Load with the matrices kept as 16-bit values of base unless
// base is fp32, each converted as soon as it is read, so that loading
// holds one tensor in fp32 at a time and not the whole model (see
// Compact).
func LoadAs(dir string, base amp.Format) (*Model, error) {
	return LoadQuantized(dir, base, Quantization{})
}

// LoadQuantized is LoadAs with the decoder layers' linear weights kept
// 4-bit as q says (none when q.Type is 0), each quantized as soon as it is
// read: the peak is the quantized model plus one tensor in fp32.
func LoadQuantized(dir string, base amp.Format, q Quantization) (*Model, error) {
	src, err := OpenSource(dir)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: src.Config, Weights: map[string]*Tensor{}, Stored: src.Stored()}
	for _, s := range Specs(src.Config) {
		t, err := src.Read(s.Name)
		if err != nil {
			return nil, err
		}
		m.Weights[s.Name] = t
		if t.Q4 != nil { // published 4-bit: kept as it is
			continue
		}
		data := t.Data
		if err := t.store(s.Name, base, q); err != nil {
			return nil, fmt.Errorf("load model %s: %w", dir, err)
		}
		if t.Data == nil && 4*len(data) >= 64<<20 {
			// A weight kept in 16 or 4 bits leaves its file bytes and its
			// fp32 values behind, several times what it keeps. Collected
			// now, they are at most one tensor's worth; left to the
			// collector's pace (GOGC=100), such garbage could reach the
			// size of the whole model loaded so far, doubling the peak.
			data = nil
			runtime.GC()
		}
	}
	return m, nil
}

// firstNonFinite is the index of the first NaN or ±Inf in xs, or -1.
func firstNonFinite(xs []float32) int {
	for i, x := range xs {
		if x-x != 0 { // NaN - NaN and Inf - Inf are NaN; every finite x gives 0
			return i
		}
	}
	return -1
}

// StoredDtypes summarizes the on-disk formats, e.g. "BF16×34, F32×2".
func (m *Model) StoredDtypes() string {
	count := map[string]int{}
	for _, d := range m.Stored {
		count[d]++
	}
	keys := make([]string, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, count[k])
	}
	return strings.Join(parts, ", ")
}

// TorchDtype is the HF name of a storage format.
func TorchDtype(f amp.Format) string {
	switch f {
	case amp.BF16:
		return "bfloat16"
	case amp.FP16:
		return "float16"
	}
	return "float32"
}

// Save writes the model in the HF layout with weights stored in dtype,
// sharded when larger than maxShardBytes (0: one file).
func (m *Model) Save(dir string, dtype amp.Format, maxShardBytes int64) error {
	return SaveFrom(dir, m.Config, dtype, maxShardBytes, modelWeights{m})
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
