// Package train wires mixtune's parts into a fine-tuning run: it reads a
// recipe (YAML), builds the model, adapter, data, optimizer and schedule
// from it, runs the training loop, and writes the run directory.
package train

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/internal/yamlconf"
	"github.com/mixtune/mixtune/model"
)

// Config is a training recipe. configs/reference.yaml documents every
// field; TestReferenceDocumentsEveryField keeps the two in step.
type Config struct {
	Name      string    `yaml:"name"`
	Seed      uint64    `yaml:"seed"`
	OutputDir string    `yaml:"output_dir"`
	Precision string    `yaml:"precision"`
	AMP       AMPConfig `yaml:"amp"`

	Device            string   `yaml:"device"`
	Devices           []string `yaml:"devices"`
	DevicePolicy      string   `yaml:"device_policy"`
	MinFreeMemory     string   `yaml:"min_free_memory"`
	PrecisionFallback bool     `yaml:"precision_fallback"`
	AllowCPUFallback  bool     `yaml:"allow_cpu_fallback"`

	Model     ModelConfig     `yaml:"model"`
	Data      DataConfig      `yaml:"data"`
	Adapter   AdapterConfig   `yaml:"adapter"`
	Train     LoopConfig      `yaml:"train"`
	Optimizer OptimizerConfig `yaml:"optimizer"`
	Schedule  ScheduleConfig  `yaml:"schedule"`
	Task      TaskConfig      `yaml:"task"`
	Compute   ComputeConfig   `yaml:"compute"`
}

// AMPConfig tunes mixed precision: loss scaling and the op lists.
type AMPConfig struct {
	LossScaling     string   `yaml:"loss_scaling"`
	InitScale       float64  `yaml:"init_scale"`
	GrowthFactor    float64  `yaml:"growth_factor"`
	BackoffFactor   float64  `yaml:"backoff_factor"`
	GrowthInterval  int      `yaml:"growth_interval"`
	MinScale        float64  `yaml:"min_scale"`
	MaxScale        float64  `yaml:"max_scale"`
	LowPrecisionOps []string `yaml:"low_precision_ops"`
	FP32Ops         []string `yaml:"fp32_ops"`
	PromoteOps      []string `yaml:"promote_ops"`
}

// ModelConfig chooses the base model.
type ModelConfig struct {
	Path         string        `yaml:"path"`
	Init         string        `yaml:"init"`
	Architecture *Architecture `yaml:"architecture,omitempty"`
	SaveDtype    string        `yaml:"save_dtype"`
	BaseDtype    string        `yaml:"base_dtype"`
}

// Architecture defines a model trained from random initialisation, in HF's
// config.json terms.
type Architecture struct {
	HiddenSize            int     `yaml:"hidden_size"`
	IntermediateSize      int     `yaml:"intermediate_size"`
	NumHiddenLayers       int     `yaml:"num_hidden_layers"`
	NumAttentionHeads     int     `yaml:"num_attention_heads"`
	NumKeyValueHeads      int     `yaml:"num_key_value_heads"`
	MaxPositionEmbeddings int     `yaml:"max_position_embeddings"`
	RMSNormEps            float64 `yaml:"rms_norm_eps"`
	RopeTheta             float64 `yaml:"rope_theta"`
	TieWordEmbeddings     bool    `yaml:"tie_word_embeddings"`
	InitializerRange      float64 `yaml:"initializer_range"`
}

// DataConfig says what to train and validate on.
type DataConfig struct {
	Train           string  `yaml:"train"`
	Validation      string  `yaml:"validation"`
	ValidationSplit float64 `yaml:"validation_split"`
	SeqLen          int     `yaml:"seq_len"`
	Mode            string  `yaml:"mode"`
	Shuffle         bool    `yaml:"shuffle"`
	Tokenizer       string  `yaml:"tokenizer"`
}

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
}

// OptimizerConfig chooses the optimizer and gradient clipping.
type OptimizerConfig struct {
	Name        string  `yaml:"name"`
	LR          float64 `yaml:"lr"`
	WeightDecay float64 `yaml:"weight_decay"`
	Beta1       float64 `yaml:"beta1"`
	Beta2       float64 `yaml:"beta2"`
	Eps         float64 `yaml:"eps"`
	Momentum    float64 `yaml:"momentum"`
	Nesterov    bool    `yaml:"nesterov"`
	GradClip    float64 `yaml:"grad_clip"`
}

// ScheduleConfig shapes the learning rate over steps.
type ScheduleConfig struct {
	Kind        string  `yaml:"kind"`
	WarmupSteps int     `yaml:"warmup_steps"`
	MinLR       float64 `yaml:"min_lr"`
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
	BLAS    string `yaml:"blas"`
	Threads int    `yaml:"threads"`
}

// Defaults is the recipe every config file starts from.
func Defaults() Config {
	return Config{
		Name: "run", Seed: 0, OutputDir: "runs", Precision: "fp32",
		AMP:   AMPConfig{LossScaling: "auto", InitScale: 65536, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2000},
		Model: ModelConfig{Init: "pretrained", SaveDtype: "bf16", BaseDtype: "fp32"},
		Data:  DataConfig{ValidationSplit: 0.05, SeqLen: 128, Mode: "pad", Shuffle: true, Tokenizer: "byte"},
		Adapter: AdapterConfig{Type: "lora", R: 8, Alpha: 16,
			TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj"}},
		Train:     LoopConfig{Steps: 100, BatchSize: 8, GradAccum: 1, EvalEvery: 50, LogEvery: 10, CheckpointEvery: 0, KeepCheckpoints: 3},
		Optimizer: OptimizerConfig{Name: "adamw", LR: 2e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Momentum: 0.9, GradClip: 1.0},
		Schedule:  ScheduleConfig{Kind: "cosine", WarmupSteps: 10},
		Task:      TaskConfig{MaxNewTokens: 32, Before: true, After: true},
		Compute:   ComputeConfig{BLAS: "auto"},
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
}

// Load reads and validates a config file with --set overrides applied.
// Every error is a *yamlconf.Error or yamlconf.Errors naming file, line
// and field.
func Load(path string, sets []string) (*Recipe, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, &yamlconf.Error{File: path, Msg: fmt.Sprintf("cannot read the config: %v", err)}
	}
	cfg := Defaults()
	doc, err := yamlconf.Decode(path, raw, sets, &cfg)
	if err != nil {
		return nil, err
	}
	r := &Recipe{Config: cfg, Path: path, Raw: raw, Sets: sets, doc: doc}
	if errs := r.validate(); len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// validate checks every value before any work starts; it collects all
// problems rather than stopping at the first.
func (r *Recipe) validate() yamlconf.Errors {
	var errs yamlconf.Errors
	bad := func(field, format string, args ...any) {
		errs = append(errs, r.doc.Errorf(field, format, args...))
	}
	c := &r.Config
	if !validName.MatchString(c.Name) {
		bad("name", "must be letters, digits, '.', '_' or '-' (it names the run directory), got %q", c.Name)
	}
	if _, err := amp.ParseFormat(c.Precision); err != nil {
		bad("precision", "%v", err)
	}
	if _, err := device.ParsePolicy(c.DevicePolicy); err != nil {
		bad("device_policy", "must be total or free, got %q", c.DevicePolicy)
	}
	if c.MinFreeMemory != "" {
		if _, err := device.ParseSize(c.MinFreeMemory); err != nil {
			bad("min_free_memory", "%v", err)
		}
	}
	if len(c.Devices) > 0 && c.Device != "auto" && c.Device != "" {
		bad("devices", "set device or devices, not both")
	}
	switch c.AMP.LossScaling {
	case "auto", "on", "off":
	default:
		bad("amp.loss_scaling", "must be auto (on for fp16), on or off, got %q", c.AMP.LossScaling)
	}
	if err := r.scalerConfig().Validate(); err != nil {
		bad("amp", "%v", err)
	}
	movedTo := map[string]string{}
	for _, l := range []struct {
		field string
		ops   []string
	}{{"amp.low_precision_ops", c.AMP.LowPrecisionOps}, {"amp.fp32_ops", c.AMP.FP32Ops}, {"amp.promote_ops", c.AMP.PromoteOps}} {
		for i, op := range l.ops {
			field := fmt.Sprintf("%s[%d]", l.field, i)
			if _, ok := amp.Ops[op]; !ok {
				bad(field, "unknown op %q (known: %s)", op, strings.Join(amp.OpNames(), ", "))
			} else if prev, dup := movedTo[op]; dup {
				bad(field, "op %q is already moved by %s", op, prev)
			}
			movedTo[op] = l.field
		}
	}

	// model
	switch c.Model.Init {
	case "pretrained":
		if c.Model.Path == "" {
			bad("model.path", "required with init: pretrained")
		} else if base, err := model.ReadConfig(c.Model.Path); err != nil {
			bad("model.path", "%v", err)
		} else {
			r.Base = base
		}
		if c.Model.Architecture != nil {
			bad("model.architecture", "only used with init: random (the pretrained model's config.json defines it)")
		}
	case "random":
		if c.Model.Architecture == nil {
			bad("model.architecture", "required with init: random")
		} else {
			r.Base = r.archConfig()
			if err := r.Base.Validate(); err != nil {
				bad("model.architecture", "%v", err)
			}
		}
	default:
		bad("model.init", "must be pretrained or random, got %q", c.Model.Init)
	}
	if _, err := amp.ParseFormat(c.Model.SaveDtype); err != nil {
		bad("model.save_dtype", "%v", err)
	}
	if f, err := amp.ParseFormat(c.Model.BaseDtype); err != nil {
		bad("model.base_dtype", "%v", err)
	} else if f != amp.FP32 && c.Adapter.Type == "none" {
		bad("model.base_dtype", "%s storage is for frozen base weights; full fine-tuning (adapter: none) updates fp32 master weights", f)
	}

	// data
	if c.Data.Tokenizer != "byte" {
		bad("data.tokenizer", "must be byte (the only tokenizer so far), got %q", c.Data.Tokenizer)
	}
	if c.Data.Train == "" {
		bad("data.train", "required: a JSONL file of training rows")
	} else {
		r.checkFile(&errs, "data.train", c.Data.Train)
	}
	if c.Data.Validation != "" {
		r.checkFile(&errs, "data.validation", c.Data.Validation)
	} else if c.Data.ValidationSplit < 0 || c.Data.ValidationSplit >= 1 {
		bad("data.validation_split", "must be in [0, 1), got %g", c.Data.ValidationSplit)
	}
	if c.Data.SeqLen <= 0 {
		bad("data.seq_len", "must be > 0, got %d", c.Data.SeqLen)
	} else if r.Base.MaxPositionEmbeddings > 0 && c.Data.SeqLen > r.Base.MaxPositionEmbeddings {
		bad("data.seq_len", "%d exceeds the model's max_position_embeddings (%d)", c.Data.SeqLen, r.Base.MaxPositionEmbeddings)
	}
	if _, err := data.ParseMode(c.Data.Mode); err != nil {
		bad("data.mode", "must be pad or pack, got %q", c.Data.Mode)
	}
	if r.Base.VocabSize > 0 && r.Base.VocabSize < data.NewByteTokenizer().VocabSize() {
		bad("model.path", "the model's vocabulary (%d) is smaller than the byte tokenizer's (%d)", r.Base.VocabSize, data.NewByteTokenizer().VocabSize())
	}

	r.validateAdapter(bad)

	// loop
	positive := func(field string, v int) {
		if v <= 0 {
			bad(field, "must be > 0, got %d", v)
		}
	}
	positive("train.steps", c.Train.Steps)
	positive("train.batch_size", c.Train.BatchSize)
	positive("train.grad_accum", c.Train.GradAccum)
	positive("train.log_every", c.Train.LogEvery)
	if c.Train.EvalEvery < 0 {
		bad("train.eval_every", "must be >= 0 (0: only at the end), got %d", c.Train.EvalEvery)
	}
	if c.Train.CheckpointEvery < 0 {
		bad("train.checkpoint_every", "must be >= 0 (0: only at the end and on interrupt), got %d", c.Train.CheckpointEvery)
	}
	positive("train.keep_checkpoints", c.Train.KeepCheckpoints)
	if c.Train.EvalBatches < 0 {
		bad("train.eval_batches", "must be >= 0 (0: the whole validation set), got %d", c.Train.EvalBatches)
	}

	// optimizer and schedule
	o := c.Optimizer
	if o.Name != "adamw" && o.Name != "sgd" {
		bad("optimizer.name", "must be adamw or sgd, got %q", o.Name)
	}
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
	if !slices.Contains([]string{"cosine", "linear", "constant"}, c.Schedule.Kind) {
		bad("schedule.kind", "must be cosine, linear or constant, got %q", c.Schedule.Kind)
	}
	if c.Schedule.WarmupSteps < 0 || c.Schedule.WarmupSteps > c.Train.Steps {
		bad("schedule.warmup_steps", "must be between 0 and train.steps (%d), got %d", c.Train.Steps, c.Schedule.WarmupSteps)
	}
	if c.Schedule.MinLR < 0 || (o.LR > 0 && c.Schedule.MinLR > o.LR) {
		bad("schedule.min_lr", "must be between 0 and optimizer.lr (%g), got %g", o.LR, c.Schedule.MinLR)
	}

	// task and compute
	if c.Task.EvalFile != "" {
		r.checkFile(&errs, "task.eval_file", c.Task.EvalFile)
	}
	if c.Task.MaxNewTokens <= 0 {
		bad("task.max_new_tokens", "must be > 0, got %d", c.Task.MaxNewTokens)
	}
	if c.Task.Limit < 0 {
		bad("task.limit", "must be >= 0 (0: every row), got %d", c.Task.Limit)
	}
	if _, err := blas.Open(c.Compute.BLAS, 0); err != nil && c.Compute.BLAS != "openblas" {
		bad("compute.blas", "must be auto, openblas, native or gonum, got %q", c.Compute.BLAS)
	}
	if c.Compute.Threads < 0 {
		bad("compute.threads", "must be >= 0 (0: every core), got %d", c.Compute.Threads)
	}
	return errs
}

// Policy is the precision policy: autocast's default lists for the
// recipe's precision, with the recipe's moves applied.
func (r *Recipe) Policy() amp.Policy {
	f, _ := amp.ParseFormat(r.Precision)
	return r.policyFor(f)
}

// policyFor is Policy for a precision the device resolved (bf16 may fall
// back to fp16).
func (r *Recipe) policyFor(f amp.Format) amp.Policy {
	p := amp.DefaultPolicy(f)
	for _, mv := range []struct {
		ops []string
		c   amp.Class
	}{{r.AMP.LowPrecisionOps, amp.LowPrecision}, {r.AMP.FP32Ops, amp.FullPrecision}, {r.AMP.PromoteOps, amp.Promote}} {
		for _, op := range mv.ops {
			p.Move(op, mv.c) // validated by Load
		}
	}
	return p
}

// LossScaling reports whether the run scales its loss: auto means fp16 only.
func (r *Recipe) LossScaling() bool {
	f, _ := amp.ParseFormat(r.Precision)
	return r.lossScalingFor(f)
}

func (r *Recipe) lossScalingFor(f amp.Format) bool {
	switch r.AMP.LossScaling {
	case "on":
		return true
	case "off":
		return false
	}
	return f == amp.FP16
}

func (r *Recipe) scalerConfig() amp.ScalerConfig {
	a := r.AMP
	return amp.ScalerConfig{Init: a.InitScale, Growth: a.GrowthFactor, Backoff: a.BackoffFactor,
		Interval: a.GrowthInterval, Min: a.MinScale, Max: a.MaxScale}
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

// archConfig is the model config of a random initialisation; special
// token ids come from the byte tokenizer.
func (r *Recipe) archConfig() model.Config {
	a := r.Model.Architecture
	tok := data.NewByteTokenizer()
	kv := a.NumKeyValueHeads
	if kv == 0 {
		kv = a.NumAttentionHeads
	}
	eps, theta, std := a.RMSNormEps, a.RopeTheta, a.InitializerRange
	if eps == 0 {
		eps = 1e-5
	}
	if theta == 0 {
		theta = 10000
	}
	if std == 0 {
		std = 0.02
	}
	return model.Config{
		VocabSize: tok.VocabSize(), HiddenSize: a.HiddenSize, IntermediateSize: a.IntermediateSize,
		NumHiddenLayers: a.NumHiddenLayers, NumAttentionHeads: a.NumAttentionHeads, NumKeyValueHeads: kv,
		MaxPositionEmbeddings: a.MaxPositionEmbeddings, RMSNormEps: eps, RopeTheta: theta,
		TieWordEmbeddings: a.TieWordEmbeddings, InitializerRange: std,
		BOSTokenID: tok.BOS(), EOSTokenID: tok.EOS(), PadTokenID: tok.PAD(),
	}
}

// RunDir picks runs/<name>, or runs/<name>-2, -3... if taken, so a new run
// never writes into an old one.
func (r *Recipe) RunDir() string {
	dir := filepath.Join(r.OutputDir, r.Name)
	for i := 2; ; i++ {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			return dir
		}
		dir = filepath.Join(r.OutputDir, fmt.Sprintf("%s-%d", r.Name, i))
	}
}
