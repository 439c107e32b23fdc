// Package train wires mixtune's parts into a fine-tuning run: it reads a
// recipe (YAML), builds the model, adapter, data, optimizer and schedule
// from it, runs the training loop, and writes the run directory.
package train

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/gpu/vulkan"
	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/internal/yamlconf"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/quant"
)

// Config is a training recipe as its YAML file spells it, parsed into
// types at load (formats, modes, kinds): nothing later reads a string
// back. configs/reference.yaml documents every field;
// TestReferenceDocumentsEveryField keeps the two in step.
type Config struct {
	Name      string     `yaml:"name"`
	Seed      uint64     `yaml:"seed"`
	OutputDir string     `yaml:"output_dir"`
	Precision amp.Format `yaml:"precision"`
	AMP       AMPConfig  `yaml:"amp"`

	Device            device.Spec   `yaml:"device"`
	Devices           []device.Spec `yaml:"devices"`
	DevicePolicy      device.Policy `yaml:"device_policy"`
	MinFreeMemory     device.Size   `yaml:"min_free_memory"`
	PrecisionFallback bool          `yaml:"precision_fallback"`
	AllowCPUFallback  bool          `yaml:"allow_cpu_fallback"`

	Model     ModelConfig     `yaml:"model"`
	Data      DataConfig      `yaml:"data"`
	Adapter   AdapterConfig   `yaml:"adapter"`
	Train     LoopConfig      `yaml:"train"`
	Optimizer OptimizerConfig `yaml:"optimizer"`
	Schedule  ScheduleConfig  `yaml:"schedule"`
	Task      TaskConfig      `yaml:"task"`
	Compute   ComputeConfig   `yaml:"compute"`
	// Preference holds the preference objectives' parameters
	// (train.objective); nil, and left out of the resolved recipe, for
	// the defaults.
	Preference *PreferenceConfig `yaml:"preference,omitempty"`
	// Logging is left out of the YAML while zero, so that a recipe
	// written before it existed resolves, and hashes, as it did.
	Logging LoggingConfig `yaml:"logging,omitempty"`
}

// LoggingConfig chooses where metrics go besides metrics.jsonl.
type LoggingConfig struct {
	// TensorBoard writes every metrics.jsonl number (and task accuracy)
	// as scalars to RUN/tensorboard/events.out.tfevents.*.
	TensorBoard bool `yaml:"tensorboard,omitempty"`
}

// AMPConfig tunes mixed precision: loss scaling and the op lists.
type AMPConfig struct {
	LossScaling     amp.ScalingMode `yaml:"loss_scaling"`
	BF16Matmul      amp.BF16Matmul  `yaml:"bf16_matmul"`
	InitScale       float64         `yaml:"init_scale"`
	GrowthFactor    float64         `yaml:"growth_factor"`
	BackoffFactor   float64         `yaml:"backoff_factor"`
	GrowthInterval  int             `yaml:"growth_interval"`
	MinScale        float64         `yaml:"min_scale"`
	MaxScale        float64         `yaml:"max_scale"`
	LowPrecisionOps []string        `yaml:"low_precision_ops"`
	FP32Ops         []string        `yaml:"fp32_ops"`
	PromoteOps      []string        `yaml:"promote_ops"`
}

// ModelInit says where the base model's weights come from.
type ModelInit string

const (
	InitPretrained ModelInit = "pretrained" // model.path
	InitRandom     ModelInit = "random"     // model.architecture, seeded
)

// UnmarshalText reads pretrained or random.
func (k *ModelInit) UnmarshalText(b []byte) error {
	switch s := ModelInit(b); s {
	case InitPretrained, InitRandom:
		*k = s
		return nil
	}
	return fmt.Errorf("must be pretrained or random, got %q", b)
}

// MarshalText writes pretrained or random.
func (k ModelInit) MarshalText() ([]byte, error) { return []byte(k), nil }

// ModelConfig chooses the base model.
type ModelConfig struct {
	Path         string        `yaml:"path"`
	Init         ModelInit     `yaml:"init"`
	Architecture *Architecture `yaml:"architecture,omitempty"`
	SaveDtype    amp.Format    `yaml:"save_dtype"`
	BaseDtype    amp.Format    `yaml:"base_dtype"`
	// Quantize keeps the frozen base's decoder projections 4-bit (QLoRA);
	// DoubleQuant, unset, means true. Both are left out of the resolved
	// YAML when unset, so recipes written before them hash the same.
	Quantize    BaseQuantization `yaml:"quantize,omitempty"`
	DoubleQuant *bool            `yaml:"double_quant,omitempty"`
}

// BaseQuantization is model.quantize: none (the zero value), nf4 or fp4.
type BaseQuantization string

// UnmarshalText reads none, nf4 or fp4.
func (q *BaseQuantization) UnmarshalText(b []byte) error {
	switch s := string(b); s {
	case "none", "":
		*q = ""
		return nil
	case "nf4", "fp4":
		*q = BaseQuantization(s)
		return nil
	}
	return fmt.Errorf("must be none, nf4 or fp4, got %q", b)
}

// MarshalText writes none, nf4 or fp4.
func (q BaseQuantization) MarshalText() ([]byte, error) {
	if q == "" {
		return []byte("none"), nil
	}
	return []byte(q), nil
}

// Quantization is how the base keeps its projections (model.Quantization's
// Type is 0 for none).
func (m ModelConfig) Quantization() model.Quantization {
	if m.Quantize == "" {
		return model.Quantization{}
	}
	t, _ := quant.ParseType(string(m.Quantize)) // UnmarshalText admitted only nf4 and fp4
	return model.Quantization{Type: t, Double: m.DoubleQuant == nil || *m.DoubleQuant}
}

// Architecture defines a model trained from random initialisation, in HF's
// config.json terms. Fields left out take the defaults of
// configs/reference.yaml (SetDefaults).
type Architecture struct {
	HiddenSize            int     `yaml:"hidden_size"`
	IntermediateSize      int     `yaml:"intermediate_size"`
	NumHiddenLayers       int     `yaml:"num_hidden_layers"`
	NumAttentionHeads     int     `yaml:"num_attention_heads"`
	NumKeyValueHeads      int     `yaml:"num_key_value_heads"`
	HeadDim               int     `yaml:"head_dim"`
	MaxPositionEmbeddings int     `yaml:"max_position_embeddings"`
	RMSNormEps            float64 `yaml:"rms_norm_eps"`
	RopeTheta             float64 `yaml:"rope_theta"`
	TieWordEmbeddings     bool    `yaml:"tie_word_embeddings"`
	InitializerRange      float64 `yaml:"initializer_range"`
}

// SetDefaults fills an architecture section before the recipe's own keys
// are read into it (the config decoder calls it when it allocates one).
func (a *Architecture) SetDefaults() {
	*a = Architecture{HiddenSize: 256, IntermediateSize: 688, NumHiddenLayers: 4, NumAttentionHeads: 8,
		MaxPositionEmbeddings: 256, RMSNormEps: 1e-5, RopeTheta: 10000, InitializerRange: 0.02}
}

// DataConfig says what to train and validate on, and how its text
// becomes tokens.
type DataConfig struct {
	Train           string       `yaml:"train"`
	Validation      string       `yaml:"validation"`
	ValidationSplit float64      `yaml:"validation_split"`
	SeqLen          int          `yaml:"seq_len"`
	Mode            data.Mode    `yaml:"mode"`
	Shuffle         bool         `yaml:"shuffle"`
	Tokenizer       string       `yaml:"tokenizer"`
	ChatTemplate    string       `yaml:"chat_template"`
	LossOn          data.LossOn  `yaml:"loss_on"`
	PromptFormat    PromptFormat `yaml:"prompt_format"`
	Cache           bool         `yaml:"cache"`
	// MaxRowBytes caps the text of one row (see data.Format.MaxRowBytes).
	MaxRowBytes device.Size `yaml:"max_row_bytes"`
}

// PromptFormat says how Alpaca rows are rendered: through the chat
// template (chat), or with the Stanford Alpaca prompt (alpaca).
type PromptFormat string

const (
	PromptChat   PromptFormat = "chat"
	PromptAlpaca PromptFormat = "alpaca"
)

// UnmarshalText reads chat or alpaca.
func (p *PromptFormat) UnmarshalText(b []byte) error {
	switch s := PromptFormat(b); s {
	case PromptChat, PromptAlpaca:
		*p = s
		return nil
	}
	return fmt.Errorf("must be chat or alpaca, got %q", b)
}

// MarshalText writes chat or alpaca.
func (p PromptFormat) MarshalText() ([]byte, error) { return []byte(p), nil }

// LoopConfig shapes the training loop.
type LoopConfig struct {
	Steps           int `yaml:"steps"`
	BatchSize       int `yaml:"batch_size"`
	GradAccum       int `yaml:"grad_accum"`
	EvalEvery       int `yaml:"eval_every"`
	EvalBatches     int `yaml:"eval_batches"`
	LogEvery        int `yaml:"log_every"`
	CheckpointEvery int `yaml:"checkpoint_every"`
	KeepCheckpoints int `yaml:"keep_checkpoints"`
	// Objective is sft (stored as "") or a preference objective.
	Objective Objective `yaml:"objective,omitempty"`
}

// OptimizerKind names the optimizer.
type OptimizerKind string

const (
	AdamW OptimizerKind = "adamw"
	SGD   OptimizerKind = "sgd"
)

// UnmarshalText reads adamw or sgd.
func (k *OptimizerKind) UnmarshalText(b []byte) error {
	switch s := OptimizerKind(b); s {
	case AdamW, SGD:
		*k = s
		return nil
	}
	return fmt.Errorf("must be adamw or sgd, got %q", b)
}

// MarshalText writes adamw or sgd.
func (k OptimizerKind) MarshalText() ([]byte, error) { return []byte(k), nil }

// OptimizerConfig chooses the optimizer and gradient clipping.
type OptimizerConfig struct {
	Name        OptimizerKind `yaml:"name"`
	LR          float64       `yaml:"lr"`
	WeightDecay float64       `yaml:"weight_decay"`
	Beta1       float64       `yaml:"beta1"`
	Beta2       float64       `yaml:"beta2"`
	Eps         float64       `yaml:"eps"`
	Momentum    float64       `yaml:"momentum"`
	Nesterov    bool          `yaml:"nesterov"`
	GradClip    float64       `yaml:"grad_clip"`
}

// ScheduleConfig shapes the learning rate over steps.
type ScheduleConfig struct {
	Kind        optim.ScheduleKind `yaml:"kind"`
	WarmupSteps int                `yaml:"warmup_steps"`
	MinLR       float64            `yaml:"min_lr"`
}

// TaskConfig is the generation benchmark: exact match of greedy answers.
type TaskConfig struct {
	EvalFile     string `yaml:"eval_file"`
	MaxNewTokens int    `yaml:"max_new_tokens"`
	Limit        int    `yaml:"limit"`
	Before       bool   `yaml:"before"`
	After        bool   `yaml:"after"`
}

// ComputeConfig chooses the matmul backend and thread count.
type ComputeConfig struct {
	// Device picks the engine: auto, cpu or gpu (the Vulkan engine).
	Device ComputeDevice `yaml:"device,omitempty"`
	// VulkanDevice names the Vulkan device directly: an index in
	// Vulkan's order, a UUID or a PCI bus id ("" follows device:).
	VulkanDevice string `yaml:"vulkan_device,omitempty"`
	// ShareGPU lets several ranks of a data-parallel job on one host
	// compute on the same GPU (each its own device context); without it a
	// job with more ranks than selected GPUs is refused.
	ShareGPU bool `yaml:"share_gpu,omitempty"`
	// ScalarGEMM keeps the Vulkan engine's products on its scalar fp32
	// GEMM where the device has tensor-core ones for the policy's 16-bit
	// operands (to compare; the values differ only in summation order).
	ScalarGEMM bool `yaml:"scalar_gemm,omitempty"`
	// NoSplitK keeps every Vulkan product in one pass over K: no split-K
	// for the products with few tiles of C and a long K (the LoRA
	// adapters' thin ones), to compare (only the fp32 summation order
	// differs).
	NoSplitK bool `yaml:"no_split_k,omitempty"`
	// Narrow16 narrows the fp32 operands of the Vulkan engine's 16-bit
	// products to 16-bit memory once before each product, so the
	// tensor-core kernel's K steps only copy (vulkan.KernelOptions;
	// the same bits, to compare speed).
	Narrow16 bool `yaml:"narrow_16bit_operands,omitempty"`
	// NoRecordAhead records each run of the Vulkan engine's graph into
	// one command buffer, submitted at its end; by default the engine
	// hands the device every 128 commands while it records the rest (the
	// same results; to compare).
	NoRecordAhead bool `yaml:"no_record_ahead,omitempty"`
	// SplitDKV says whether the tensor-core attention's dK/dV kernel runs
	// as two, one for dK and one for dV (vulkan.KernelOptions.SplitDKV):
	// auto (the default) times both at the run's attention and takes the
	// faster; true or false fixes it. The same bits either way.
	SplitDKV SplitDKV `yaml:"split_dkv,omitempty"`
	// GemmTile names the tensor-core tile of the Vulkan engine's 16-bit
	// products (vulkan.CoopTileNames), or "auto" ("", the default): the
	// fastest the device runs at the run's own products, timed once per
	// device, driver and shapes and cached (MIXTUNE_GPU_CALIBRATE), kept on
	// a resume. Tiles sum in different orders: the choice is in run.json.
	GemmTile string    `yaml:"gemm_tile,omitempty"`
	BLAS     blas.Kind `yaml:"blas"`
	Threads  int       `yaml:"threads"`
	// ActivationCheckpointing keeps only each decoder layer's input for
	// the backward pass and recomputes the layer there: activation memory
	// of one layer instead of all, for one more forward pass per step.
	ActivationCheckpointing bool `yaml:"activation_checkpointing"`
}

// Defaults is the recipe every config file starts from.
func Defaults() Config {
	return Config{
		Name: "run", Seed: 0, OutputDir: "runs", Precision: amp.FP32, DevicePolicy: device.PolicyTotal, AllowCPUFallback: true,
		AMP:   AMPConfig{LossScaling: amp.ScalingAuto, InitScale: 65536, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2000},
		Model: ModelConfig{Init: InitPretrained, SaveDtype: amp.BF16, BaseDtype: amp.FP32},
		Data: DataConfig{ValidationSplit: 0.05, SeqLen: 128, Mode: data.Pad, Shuffle: true, Tokenizer: "auto",
			LossOn: data.LossAssistant, PromptFormat: PromptChat, Cache: true, MaxRowBytes: data.DefaultMaxRowBytes},
		Adapter: AdapterConfig{Type: LoRA, R: 8, Alpha: 16,
			TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj"}},
		Train:     LoopConfig{Steps: 100, BatchSize: 8, GradAccum: 1, EvalEvery: 50, LogEvery: 10, CheckpointEvery: 0, KeepCheckpoints: 3},
		Optimizer: OptimizerConfig{Name: AdamW, LR: 2e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Momentum: 0.9, GradClip: 1.0},
		Schedule:  ScheduleConfig{Kind: optim.Cosine, WarmupSteps: 10},
		Task:      TaskConfig{MaxNewTokens: 32, Before: true, After: true},
		Compute:   ComputeConfig{Device: ComputeAuto, BLAS: blas.KindAuto},
	}
}

// Recipe is a loaded, validated config and where its values came from.
type Recipe struct {
	Config
	Path string // the config file
	Raw  []byte // its bytes as given
	Sets []string
	doc  *yamlconf.Doc
	// Base is the base model's config: read from model.path, or built
	// from model.architecture for a random initialisation.
	Base model.Config
	// Warnings are legal choices a user should hear about (an adapter
	// rank above what a module can use); a run prints them at its start.
	Warnings []string
	// text is how the data's text becomes tokens: the tokenizer and chat
	// template the data section chooses, resolved once.
	text *Text
}

// Load reads a config file with --set overrides applied, checks it, and
// resolves what it names. Every error is a *yamlconf.Error or
// yamlconf.Errors naming file, line and field.
func Load(path string, sets []string) (*Recipe, error) {
	raw, err := readlimit.ReadFile(path, readlimit.Recipe)
	if err != nil {
		return nil, &yamlconf.Error{File: path, Msg: fmt.Sprintf("cannot read the config: %v", err)}
	}
	cfg := Defaults()
	doc, err := yamlconf.Decode(path, raw, sets, &cfg)
	if err != nil {
		return nil, err
	}
	cfg.defaultArchitecture()
	r := &Recipe{Config: cfg, Path: path, Raw: raw, Sets: sets, doc: doc}
	// Every problem is reported at once: the resolved checks run even
	// when the recipe's own values have problems, and skip what those
	// make meaningless.
	errs := r.check()
	errs = append(errs, r.resolve()...)
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// defaultArchitecture gives init: random the architecture
// configs/reference.yaml shows when the recipe has no architecture
// section, as it gives every field left out of one.
func (c *Config) defaultArchitecture() {
	if c.Model.Init == InitRandom && c.Model.Architecture == nil {
		c.Model.Architecture = new(Architecture)
		c.Model.Architecture.SetDefaults()
	}
}

// validName is what a run directory may be called: one path element of
// at most maxNameLen characters that every file system accepts.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

const maxNameLen = 100

// check checks the recipe's own values: ranges, and the fields that
// depend on each other. It reads no file and changes nothing; it
// collects all problems rather than stopping at the first. Values of a
// single field were checked when they were parsed; what depends on files
// (the model, the tokenizer, the data) is resolve's.
func (r *Recipe) check() yamlconf.Errors {
	var errs yamlconf.Errors
	bad := func(field, format string, args ...any) {
		errs = append(errs, r.doc.Errorf(field, format, args...))
	}
	c := &r.Config
	if !validName.MatchString(c.Name) || len(c.Name) > maxNameLen {
		bad("name", "must be 1 to %d letters, digits, '.', '_' or '-' (it names the run directory), got %q", maxNameLen, c.Name)
	}
	if len(c.Devices) > 0 && c.Device.String() != "auto" {
		bad("devices", "set device or devices, not both")
	}
	if err := r.scalerConfig().Validate(); err != nil {
		bad("amp", "%v", err)
	}
	for _, e := range r.opMoves().Check() {
		bad(fmt.Sprintf("%s[%d]", opListField[e.Class], e.Index), "%v", e.Err)
	}
	r.checkModel(bad)
	r.checkData(bad)
	r.checkAdapter(bad)
	r.validateLoop(bad)
	r.validateOptimizer(bad)
	r.checkPreference(bad)
	if c.Task.MaxNewTokens <= 0 {
		bad("task.max_new_tokens", "must be > 0, got %d", c.Task.MaxNewTokens)
	}
	if c.Task.Limit < 0 {
		bad("task.limit", "must be >= 0 (0: every row), got %d", c.Task.Limit)
	}
	if c.Compute.Threads < 0 {
		bad("compute.threads", "must be >= 0 (0: every core), got %d", c.Compute.Threads)
	}
	if t := c.Compute.GemmTile; t != "" && !slices.Contains(GemmTiles(), t) {
		bad("compute.gemm_tile", "must be one of %s, got %q", strings.Join(GemmTiles(), ", "), t)
	}
	if c.Compute.Device == ComputeCPU && c.Compute.VulkanDevice != "" {
		bad("compute.vulkan_device", "names a Vulkan device, but compute.device is cpu")
	}
	return errs
}

// resolve reads what the recipe names and checks what depends on it: the
// base model's config (model.path's, or model.architecture's with the
// tokenizer's vocabulary), the tokenizer and chat template, adapter.from
// and the adapter's targets in that model, and the data and task files.
// It sets Base and text, and the adapter fields adapter.from defines.
func (r *Recipe) resolve() yamlconf.Errors {
	var errs yamlconf.Errors
	bad := func(field, format string, args ...any) {
		errs = append(errs, r.doc.Errorf(field, format, args...))
	}
	tok, tokErr := resolveTokenizer(r.modelDir(), r.Data.Tokenizer)
	r.resolveModel(bad, tok)
	r.resolveText(bad, tok, tokErr)
	d := r.Data
	if d.Train != "" {
		r.checkFile(&errs, "data.train", d.Train)
	}
	if d.Validation != "" {
		r.checkFile(&errs, "data.validation", d.Validation)
	}
	if r.Base.MaxPositionEmbeddings > 0 && d.SeqLen > r.Base.MaxPositionEmbeddings {
		bad("data.seq_len", "%d exceeds the model's max_position_embeddings (%d)", d.SeqLen, r.Base.MaxPositionEmbeddings)
	}
	r.resolveAdapter(bad)
	if r.Task.EvalFile != "" {
		r.checkFile(&errs, "task.eval_file", r.Task.EvalFile)
	}
	return errs
}

// modelDir is the directory whose tokenizer data.tokenizer: auto means:
// model.path's, none for a random initialisation.
func (r *Recipe) modelDir() string {
	if r.Model.Init == InitRandom {
		return ""
	}
	return r.Model.Path
}

// validateLoop checks the train section's counts.
func (r *Recipe) validateLoop(bad func(field, format string, args ...any)) {
	t := r.Train
	positive := func(field string, v int) {
		if v <= 0 {
			bad(field, "must be > 0, got %d", v)
		}
	}
	positive("train.steps", t.Steps)
	positive("train.batch_size", t.BatchSize)
	positive("train.grad_accum", t.GradAccum)
	positive("train.log_every", t.LogEvery)
	positive("train.keep_checkpoints", t.KeepCheckpoints)
	for _, f := range []struct {
		field, zero string
		v           int
	}{{"train.eval_every", "only at the end", t.EvalEvery}, {"train.checkpoint_every", "only at the end and on interrupt", t.CheckpointEvery},
		{"train.eval_batches", "the whole validation set", t.EvalBatches}} {
		if f.v < 0 {
			bad(f.field, "must be >= 0 (0: %s), got %d", f.zero, f.v)
		}
	}
}

// validateOptimizer checks the optimizer's ranges and the schedule, whose
// own Validate says which of its fields is wrong.
func (r *Recipe) validateOptimizer(bad func(field, format string, args ...any)) {
	o := r.Optimizer
	if o.LR <= 0 {
		bad("optimizer.lr", "must be > 0, got %g", o.LR)
	}
	if o.WeightDecay < 0 {
		bad("optimizer.weight_decay", "must be >= 0, got %g", o.WeightDecay)
	}
	for _, b := range []struct {
		f string
		v float64
	}{{"optimizer.beta1", o.Beta1}, {"optimizer.beta2", o.Beta2}, {"optimizer.momentum", o.Momentum}} {
		if b.v < 0 || b.v >= 1 {
			bad(b.f, "must be in [0, 1), got %g", b.v)
		}
	}
	if o.Eps <= 0 {
		bad("optimizer.eps", "must be > 0, got %g", o.Eps)
	}
	if o.GradClip < 0 {
		bad("optimizer.grad_clip", "must be >= 0 (0: no clipping), got %g", o.GradClip)
	}
	if o.LR <= 0 || r.Train.Steps <= 0 {
		return // already reported; the schedule would repeat it
	}
	var se *optim.ScheduleError
	if err := r.schedule().Validate(); errors.As(err, &se) {
		field := map[string]string{"warmup": "schedule.warmup_steps", "min": "schedule.min_lr", "kind": "schedule.kind"}[se.Field]
		if field == "" {
			field = "schedule"
		}
		bad(field, "%s", se.Msg)
	} else if err != nil {
		bad("schedule", "%v", err)
	}
}

// opListField names the recipe's list that moves ops to each class.
var opListField = map[amp.Class]string{amp.LowPrecision: "amp.low_precision_ops", amp.FullPrecision: "amp.fp32_ops", amp.Promote: "amp.promote_ops"}

// opMoves are the recipe's changes to the default op lists.
func (r *Recipe) opMoves() amp.Moves {
	return amp.Moves{LowPrecision: r.AMP.LowPrecisionOps, FullPrecision: r.AMP.FP32Ops, Promote: r.AMP.PromoteOps}
}

// checkModel checks that the model section says where the model comes
// from, and nothing that does not apply to it.
func (r *Recipe) checkModel(bad func(field, format string, args ...any)) {
	m := r.Model
	switch m.Init {
	case InitPretrained:
		if m.Path == "" {
			bad("model.path", "required with init: pretrained")
		}
		if r.doc.Has("model.architecture") {
			bad("model.architecture", "only used with init: random (the pretrained model's config.json defines it)")
		}
	}
	if m.BaseDtype != amp.FP32 && r.Adapter.Type == FullFineTune {
		bad("model.base_dtype", "%s storage is for frozen base weights; full fine-tuning (adapter: none) updates fp32 master weights", m.BaseDtype)
	}
	r.checkQuantize(bad)
}

// checkQuantize checks that a 4-bit base is a frozen one that nothing
// rewrites or reads other than through its products.
func (r *Recipe) checkQuantize(bad func(field, format string, args ...any)) {
	m := r.Model
	if m.Quantize == "" {
		if m.DoubleQuant != nil {
			bad("model.double_quant", "only applies with model.quantize: nf4 or fp4")
		}
		return
	}
	r.checkFrozen4Bit(bad, "model.quantize", "a "+string(m.Quantize)+" base")
}

// checkFrozen4Bit refuses what a 4-bit base (model.quantize, or a
// bitsandbytes checkpoint at model.path: field) cannot do.
func (r *Recipe) checkFrozen4Bit(bad func(field, format string, args ...any), field, base string) {
	a := r.Adapter
	switch {
	case a.Type == FullFineTune:
		bad(field, "%s is frozen; full fine-tuning (adapter: none) updates fp32 master weights", base)
	case a.Type == DoRA:
		bad(field, "dora is not supported on %s yet (its magnitude reads the base's row norms); use lora", base)
	case a.Init == peft.InitPiSSA:
		bad("adapter.init", "pissa rewrites the base weights, which %s keeps quantized; use default or gaussian", base)
	}
}

// resolveModel reads the base model's config, and checks it against the
// weight files' headers before anything is allocated, so a config that
// claims a million layers is refused at once; or builds a random
// initialisation's from the architecture and tok's vocabulary (the byte
// tokenizer's when tok is nil: resolveText reports why).
func (r *Recipe) resolveModel(bad func(field, format string, args ...any), tok data.Tokenizer) {
	m := r.Model
	switch m.Init {
	case InitPretrained:
		if m.Path == "" {
			return // check reported it
		}
		base, err := model.Inspect(m.Path)
		if err != nil {
			bad("model.path", "%v", err)
			return
		}
		if base.BnB4 != nil {
			r.checkFrozen4Bit(bad, "model.path", "a bitsandbytes 4-bit checkpoint")
		}
		r.Base = base
	case InitRandom:
		if m.Architecture == nil { // Load gives it the defaults
			bad("model.architecture", "required with init: random")
			return
		}
		if tok == nil {
			tok = data.NewByteTokenizer()
		}
		base := archConfig(*m.Architecture, tok)
		if err := base.Validate(); err != nil {
			bad("model.architecture", "%v", err)
			// r.Base stays zero: the checks that depend on the model
			// (the adapter's targets in every layer, seq_len) skip an
			// architecture that is wrong already; listing targets in
			// 10^8 layers ran out of memory (found by FuzzLoad)
			return
		}
		r.Base = base
	}
}

// checkData checks the data section's own values. The files are checked
// by resolve, and the rows read when the run sets up, before it writes
// anything.
func (r *Recipe) checkData(bad func(field, format string, args ...any)) {
	d := r.Data
	if d.Train == "" {
		bad("data.train", "required: a JSONL file of training rows")
	}
	if d.Validation == "" && (d.ValidationSplit < 0 || d.ValidationSplit >= 1) {
		bad("data.validation_split", "must be in [0, 1), got %g", d.ValidationSplit)
	}
	if d.MaxRowBytes < minRowBytes || d.MaxRowBytes > maxRowBytes {
		bad("data.max_row_bytes", "must be between %s and %s, got %d bytes", readlimit.Bytes(int64(minRowBytes)), readlimit.Bytes(int64(maxRowBytes)), uint64(d.MaxRowBytes))
	}
	if d.SeqLen <= 0 {
		bad("data.seq_len", "must be > 0, got %d", d.SeqLen)
	}
}

// resolveText makes the tokenizer tok (or its error, tokErr) and the chat
// template into the recipe's Text, each error at its field.
func (r *Recipe) resolveText(bad func(field, format string, args ...any), tok data.Tokenizer, tokErr error) {
	d := r.Data
	if tokErr != nil {
		bad("data.tokenizer", "%v", tokErr)
		return
	}
	if _, _, err := templateSource(d.ChatTemplate); err != nil {
		bad("data.chat_template", "%v", err)
		return
	}
	tc := TextConfig{Tokenizer: d.Tokenizer, ChatTemplate: d.ChatTemplate, LossOn: d.LossOn, Alpaca: d.PromptFormat == PromptAlpaca, MaxRowBytes: int(d.MaxRowBytes)}
	t, err := newText(tok, r.Base.VocabSize, tc)
	var small *vocabTooSmall
	switch {
	case err == nil:
		r.text = t
	case errors.As(err, &small):
		bad("model.path", "%v", err)
	default:
		bad("data.chat_template", "%v", err)
	}
}

// Policy is the precision policy: autocast's default lists for the
// recipe's precision, with the recipe's moves applied.
func (r *Recipe) Policy() (amp.Policy, error) { return r.policyFor(r.Precision) }

// policyFor is Policy for a precision the device resolved (bf16 may fall
// back to fp16). Load refused moves that cannot be made; a recipe built
// another way gets its error here.
func (r *Recipe) policyFor(f amp.Format) (amp.Policy, error) {
	p, err := r.opMoves().Apply(amp.DefaultPolicy(f))
	if err != nil {
		return p, fmt.Errorf("amp op lists: %w", err)
	}
	return p, nil
}

// LossScaling reports whether the run scales its loss at the recipe's
// precision; a run whose device changed the precision asks its
// device.Selection, which applies the same rule.
func (r *Recipe) LossScaling() bool { return r.AMP.LossScaling.For(r.Precision) }

func (r *Recipe) scalerConfig() amp.ScalerConfig {
	a := r.AMP
	return amp.ScalerConfig{Init: a.InitScale, Growth: a.GrowthFactor, Backoff: a.BackoffFactor,
		Interval: a.GrowthInterval, Min: a.MinScale, Max: a.MaxScale}
}

// schedule is the learning-rate schedule of the recipe.
func (r *Recipe) schedule() optim.Schedule {
	return optim.Schedule{Kind: r.Schedule.Kind, Peak: r.Optimizer.LR, Min: r.Schedule.MinLR,
		Warmup: r.Schedule.WarmupSteps, Total: r.Train.Steps}
}

func (r *Recipe) checkFile(errs *yamlconf.Errors, field, path string) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		*errs = append(*errs, r.doc.Errorf(field, "%s: %v", path, unwrapPathError(err)))
	case st.IsDir():
		*errs = append(*errs, r.doc.Errorf(field, "%s is a directory, not a file", path))
	}
}

func unwrapPathError(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// archConfig is the model config of a random initialisation of a: the
// vocabulary and special token ids are tok's.
func archConfig(a Architecture, tok data.Tokenizer) model.Config {
	kv := a.NumKeyValueHeads
	if kv == 0 {
		kv = a.NumAttentionHeads
	}
	return model.Config{
		VocabSize: tok.VocabSize(), HiddenSize: a.HiddenSize, IntermediateSize: a.IntermediateSize,
		NumHiddenLayers: a.NumHiddenLayers, NumAttentionHeads: a.NumAttentionHeads, NumKeyValueHeads: kv,
		HeadDim: a.HeadDim, MaxPositionEmbeddings: a.MaxPositionEmbeddings, RMSNormEps: a.RMSNormEps, RopeTheta: a.RopeTheta,
		TieWordEmbeddings: a.TieWordEmbeddings, InitializerRange: a.InitializerRange,
		BOSTokenID: tok.BOS(), EOSTokenID: tok.EOS(), PadTokenID: tok.PAD(),
	}
}

// GemmTiles lists the tensor-core tiles compute.gemm_tile takes, the
// default first.
func GemmTiles() []string { return append([]string{GemmTileAuto}, vulkan.CoopTileNames()...) }

// SplitDKV is compute.split_dkv: auto, true or false.
type SplitDKV uint8

const (
	SplitDKVAuto SplitDKV = iota // timed on the device, the faster taken
	SplitDKVOn                   // two kernels
	SplitDKVOff                  // one kernel
)

// UnmarshalText reads auto, true or false.
func (s *SplitDKV) UnmarshalText(b []byte) error {
	switch string(b) {
	case "auto":
		*s = SplitDKVAuto
	case "true":
		*s = SplitDKVOn
	case "false":
		*s = SplitDKVOff
	default:
		return fmt.Errorf("want auto, true or false, got %q", b)
	}
	return nil
}

// MarshalText writes auto, true or false.
func (s SplitDKV) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s SplitDKV) String() string {
	switch s {
	case SplitDKVOn:
		return "true"
	case SplitDKVOff:
		return "false"
	}
	return "auto"
}
