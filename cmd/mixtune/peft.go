package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/device"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
	"github.com/mixtune/mixtune/quant"
	"github.com/mixtune/mixtune/train"
)

// The adapter commands: folding an adapter into its base model, and
// extracting an adapter from a fine-tuned model.

func cmdMerge(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("merge", "merge --model DIR --adapter DIR --out DIR [--dtype bf16|fp16|fp32] [--base-quantize nf4|fp4] [--requantize nf4|fp4]", stderr)
	modelDir := fs.String("model", "", "base model directory (HF layout)")
	adapterDir := fs.String("adapter", "", "PEFT LoRA or DoRA adapter directory")
	out := fs.String("out", "", "new directory for the merged model (HF layout)")
	dtype := fs.String("dtype", "", "storage dtype of the merged weights: bf16, fp16 or fp32 (default: the base model's, if all its weights share one, else fp32)")
	baseQuant := baseQuantizeFlags(fs)
	requant := fs.String("requantize", "none", "none, nf4 or fp4: store the merged decoder projections (q/k/v/o, gate/up/down) 4-bit again, in bitsandbytes' layout with a quantization_config, as transformers with bitsandbytes and mixtune load it; the other weights are stored in --dtype. "+
		"This adds error on top of the merge, which is measured and printed: RMSE over the weights' RMS and the largest error over its block's absmax. On normal weights (blocks of 64) NF4 adds an RMSE of about 9.2% of the weights' RMS and at most 0.152 of a block's absmax per value "+
		"(plus the absmax's own error with double quantization, measured 0.159 in all), FP4 about 12.2% and 0.167 (0.172); merged into the 4-bit base it trained on (--base-quantize), the base's part is on the grid already and the RMSE is lower (7.7% in the tests). Projections no adapter touched that are already 4-bit of that type (with --base-quantize, or a bitsandbytes checkpoint) keep their codes and add no error")
	requantDouble := fs.Bool("requantize-double-quant", true, "with --requantize: quantize the per-block absmax values to 8 bits too (bitsandbytes' bnb_4bit_use_double_quant)")
	shard := device.Size(5_000_000_000)
	fs.TextVar(&shard, "max-shard-size", shard, "largest safetensors file; a larger model is written as shards with model.safetensors.index.json, as transformers' save_pretrained does")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *modelDir == "" || *adapterDir == "" || *out == "" {
		return usageError{"--model, --adapter and --out are required"}
	}
	var f amp.Format
	if *dtype != "" {
		var err error
		if f, err = amp.ParseFormat(*dtype); err != nil {
			return usageError{"--dtype: " + err.Error()}
		}
	}
	q, err := baseQuant()
	if err != nil {
		return err
	}
	var rq model.Quantization
	if *requant != "none" {
		t, err := quant.ParseType(*requant)
		if err != nil {
			return usageError{"--requantize: must be none, nf4 or fp4, got " + *requant}
		}
		rq = model.Quantization{Type: t, Double: *requantDouble}
	}
	if err := freshDir(*out); err != nil {
		return err
	}
	job := mergeJob{modelDir: *modelDir, adapterDir: *adapterDir, dtype: f, storedDtype: *dtype == "", base: q, requant: rq, maxShardBytes: int64(shard)}
	// the model's headers and the adapter are read and checked before
	// anything is written
	res, err := job.prepare()
	if err != nil {
		return err
	}
	if err := newOutDir(*out, func(dir string) error {
		var err error
		if res.stats, err = res.write(dir); err != nil {
			return err
		}
		res.copied, err = copyTokenizerFiles(*modelDir, dir)
		return err
	}); err != nil {
		// a weight found bad as it was read, or merged: what is wrong and
		// where, not the temporary file it was on its way to (removed)
		var in *train.InputError
		var merge *peft.MergeError
		switch {
		case errors.As(err, &in):
			return in
		case errors.As(err, &merge):
			return merge
		}
		return err
	}
	fmt.Fprintf(stdout, "merged %s into %d modules of %s → %s (%s)", res.adapter.Config, len(res.adapter.Modules), *modelDir, *out, res.dtype)
	if len(res.copied) > 0 {
		fmt.Fprintf(stdout, ", with %s", strings.Join(res.copied, ", "))
	}
	fmt.Fprintln(stdout)
	if rq.Type != 0 {
		fmt.Fprintln(stdout, requantSummary(res.stats))
	}
	return nil
}

// mergeJob is what `mixtune merge` was asked to do, parsed.
type mergeJob struct {
	modelDir, adapterDir string
	dtype                amp.Format
	storedDtype          bool               // dtype: the base's stored one (storedFormat)
	base, requant        model.Quantization // --base-quantize, --requantize
	maxShardBytes        int64
}

// mergeResult is a merge prepared, and then what it wrote.
type mergeResult struct {
	adapter *peft.Adapter
	dtype   amp.Format
	// write writes the merged weights and config.json into a directory.
	write  func(dir string) (model.RequantStats, error)
	stats  model.RequantStats
	copied []string // tokenizer files
}

// prepare reads and checks the base model's config and headers and the
// adapter, and returns the merge ready to write, streaming: each weight
// is read, merged and written in turn (peft.WriteMerged), so that the
// peak is about the largest weight in fp32 and the adapter, not the
// model. An adapter trained against the residual of its base (pissa or
// olora saved unconverted) needs every adapted base weight when it is
// loaded, so it is merged into the base loaded whole (prepareWhole).
func (j mergeJob) prepare() (mergeResult, error) {
	src, err := model.OpenSource(j.modelDir) // the model's errors first, as model.Load's
	if err != nil {
		return mergeResult{}, badInput(err)
	}
	acfg, err := peft.ReadConfig(j.adapterDir)
	if err != nil {
		return mergeResult{}, badInput(fmt.Errorf("load adapter: %w", err))
	}
	if acfg.ResidualInit() {
		return j.prepareWhole()
	}
	res := mergeResult{dtype: j.dtype}
	if j.storedDtype {
		res.dtype = storedFormat(src.Stored())
	}
	adapter, base, err := peft.OpenStreaming(src, j.adapterDir, j.base)
	if err != nil {
		return res, badInput(err)
	}
	res.adapter = adapter
	read := func(name string) (*model.Tensor, error) {
		t, err := base(name) // merged into its dequantized fp32 values
		if err != nil {
			return nil, badInput(err)
		}
		return t, nil
	}
	stored := src.Stored()
	fourBit := func(name string) bool { return stored[name] == "NF4" || stored[name] == "FP4" }
	opt := peft.WriteOptions{Dtype: res.dtype, Requant: j.requant, MaxShardBytes: j.maxShardBytes, FourBit: fourBit}
	res.write = func(dir string) (model.RequantStats, error) {
		return peft.WriteMerged(dir, src.Config, read, res.adapter, opt)
	}
	return res, nil
}

// prepareWhole is prepare with the base model loaded whole in fp32 (4-bit
// weights kept 4-bit until merged), every module merged and checked at
// the output dtype, and requantized, before anything is written. It
// holds the model in memory: prepare streams wherever the adapter allows.
func (j mergeJob) prepareWhole() (mergeResult, error) {
	m, err := model.Load(j.modelDir)
	if err != nil {
		return mergeResult{}, badInput(err)
	}
	if err := m.Quantize(j.base); err != nil { // merged into its dequantized fp32 values
		return mergeResult{}, badInput(err)
	}
	res := mergeResult{dtype: j.dtype}
	if j.storedDtype {
		res.dtype = storedFormat(m.Stored)
	}
	if res.adapter, err = peft.Load(j.adapterDir, peft.BaseOf(m)); err != nil {
		return res, badInput(err)
	}
	if err := peft.MergeInto(m, res.adapter, res.dtype); err != nil {
		return res, err
	}
	save := m.Save
	var st model.RequantStats
	if j.requant.Type != 0 {
		if st, err = m.Requantize(j.requant); err != nil {
			return res, badInput(err)
		}
		save = m.SaveBnB4
	}
	res.write = func(dir string) (model.RequantStats, error) { return st, save(dir, res.dtype, j.maxShardBytes) }
	return res, nil
}

// requantSummary states the error --requantize added.
func requantSummary(st model.RequantStats) string {
	dq := "without"
	if st.Double {
		dq = "with"
	}
	s := fmt.Sprintf("requantized %d projections to %v %s double quantization (bitsandbytes layout)", st.Tensors, st.Type, dq)
	if st.Kept > 0 {
		s += fmt.Sprintf("; %d kept their %v codes (no adapter: no added error)", st.Kept, st.Type)
	}
	if st.Values > 0 {
		s += fmt.Sprintf("; added error over %d values: RMSE %.4g (%.4g%% of the weights' RMS), max %.4g (%.4g of its block's absmax)",
			st.Values, st.RMSE(), 100*st.RelRMSE(), st.MaxErr, st.MaxOfAbsmax)
	}
	return s
}

// baseQuantizeFlags adds --base-quantize and --base-double-quant, which
// rebuild the 4-bit base a QLoRA run trained on (its model.quantize and
// model.double_quant) from the original checkpoint, so that the adapter is
// merged into the base it learned against, dequantized in fp32. The
// returned function reads them once parsed.
func baseQuantizeFlags(fs *flag.FlagSet) func() (model.Quantization, error) {
	name := fs.String("base-quantize", "none", "none, nf4 or fp4: the 4-bit base the adapter was trained on (the run's model.quantize), rebuilt from --model and dequantized in fp32 before merging")
	double := fs.Bool("base-double-quant", true, "with --base-quantize: the run's model.double_quant")
	return func() (model.Quantization, error) {
		if *name == "none" {
			return model.Quantization{}, nil
		}
		t, err := quant.ParseType(*name)
		if err != nil {
			return model.Quantization{}, usageError{"--base-quantize: must be none, nf4 or fp4, got " + *name}
		}
		return model.Quantization{Type: t, Double: *double}, nil
	}
}

// copyTokenizerFiles copies into dst the files beside src's weights that
// a model needs to be used: its tokenizer, special tokens, chat template
// and generation settings.
func copyTokenizerFiles(src, dst string) ([]string, error) {
	var copied []string
	for _, f := range []struct {
		name string
		kind readlimit.Kind
	}{
		{"tokenizer.json", readlimit.TokenizerJSON}, {"tokenizer_config.json", readlimit.TokenizerConfig},
		{"special_tokens_map.json", readlimit.TokenizerConfig}, {"tokenizer.model", readlimit.Vocabulary},
		{"generation_config.json", readlimit.ModelConfig}, {"vocab.json", readlimit.Vocabulary},
		{"merges.txt", readlimit.Vocabulary}, {"added_tokens.json", readlimit.TokenizerConfig},
		{"chat_template.jinja", readlimit.ChatTemplate},
	} {
		name := f.name
		b, err := readlimit.ReadFile(filepath.Join(src, name), f.kind)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return copied, err
		}
		if err := atomicfile.WriteFile(filepath.Join(dst, name), b); err != nil {
			return copied, err
		}
		copied = append(copied, name)
	}
	return copied, nil
}

// storedFormat is the one format all of a model's weights were stored
// in (Model.Stored), or fp32.
func storedFormat(stored map[string]string) amp.Format {
	var f amp.Format
	first := true
	for _, d := range stored {
		g, err := amp.ParseFormat(d)
		if err != nil || (!first && g != f) {
			return amp.FP32
		}
		f, first = g, false
	}
	return f
}

// freshDir refuses, before any work, an output directory that already
// holds files, or a file in its place: commands never overwrite a model.
// newOutDir makes the final decision.
func freshDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err == nil && len(entries) > 0 {
		return outExists(dir)
	}
	if st, serr := os.Stat(dir); serr == nil && !st.IsDir() {
		return outExists(dir)
	}
	return nil
}

func outExists(dir string) error {
	return usageError{fmt.Sprintf("--out %s already exists and is not empty; choose a new directory", dir)}
}

// newOutDir writes the output directory with fill and publishes it whole
// with a rename that never replaces: of two commands writing one --out at
// once, the second finds the first's directory and exits 2, instead of
// mixing its files into it.
func newOutDir(dir string, fill func(dir string) error) error {
	err := atomicfile.CreateDir(dir, fill)
	if errors.Is(err, os.ErrExist) {
		return outExists(dir)
	}
	return err
}

// badInput marks an error in a model or adapter directory the user named:
// exit status 2, like a bad recipe.
func badInput(err error) error { return &train.InputError{Err: err} }

// rankFits refuses an extraction rank above min(out, in) of a target: the
// SVD of its weight change has no more singular values than that. The
// error names the narrowest target, whose side is the largest rank there
// can be.
func rankFits(rank int, targets []peft.Target) error {
	var narrow *peft.Target
	for i, t := range targets {
		if narrow == nil || min(t.Out, t.In) < min(narrow.Out, narrow.In) {
			narrow = &targets[i]
		}
	}
	if narrow == nil {
		return nil // no targets: Extract says so
	}
	if k := min(narrow.Out, narrow.In); rank > k {
		return usageError{fmt.Sprintf("--rank %d exceeds min(out, in) = %d of %s (%d×%d): the largest rank these target modules allow is %d", rank, k, narrow.Path, narrow.Out, narrow.In, k)}
	}
	return nil
}

// extractRow is one module of `mixtune extract-lora --json`.
type extractRow struct {
	Module    string  `json:"module"`
	DeltaNorm float64 `json:"delta_norm"`
	RelError  float64 `json:"rel_error"`
}

func cmdExtractLoRA(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("extract-lora", "extract-lora --base DIR --tuned DIR --rank R --out DIR [--dtype fp32|bf16|fp16]", stderr)
	baseDir := fs.String("base", "", "base model directory (HF layout)")
	tunedDir := fs.String("tuned", "", "fine-tuned model directory with the same architecture")
	rank := fs.Int("rank", 0, "adapter rank r (alpha = r, so the scaling is 1)")
	out := fs.String("out", "", "new directory for the adapter (PEFT layout)")
	dtype := fs.String("dtype", "fp32", "storage dtype of A and B: fp32, bf16 or fp16")
	targetsFlag := fs.String("target-modules", strings.Join(append(slices.Clone(model.AttentionModules), model.MLPModules...), ","), "comma-separated modules to extract")
	asJSON := fs.Bool("json", false, "print the per-module errors as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *baseDir == "" || *tunedDir == "" || *out == "" {
		return usageError{"--base, --tuned and --out are required"}
	}
	if *rank < 1 {
		return usageError{fmt.Sprintf("--rank must be positive, got %d", *rank)}
	}
	f, err := amp.ParseFormat(*dtype)
	if err != nil {
		return usageError{"--dtype: " + err.Error()}
	}
	if err := freshDir(*out); err != nil {
		return err
	}
	base, err := model.Load(*baseDir)
	if err != nil {
		return badInput(err)
	}
	tuned, err := model.Load(*tunedDir)
	if err != nil {
		return badInput(err)
	}
	if err := peft.SameArchitecture(base, tuned); err != nil {
		return badInput(err)
	}
	targets, err := peft.Targets(peft.ModelTargets(base), strings.Split(*targetsFlag, ","))
	if err != nil {
		return usageError{"--target-modules: " + err.Error()}
	}
	if err := rankFits(*rank, targets); err != nil {
		return err
	}
	l, reps, err := peft.Extract(targets, base.Weights, tuned.Weights, *rank, f)
	if err != nil {
		return err
	}
	if err := newOutDir(*out, func(dir string) error { return l.SaveAs(dir, *baseDir, f) }); err != nil {
		return err
	}
	rows := make([]extractRow, len(reps))
	for i, r := range reps {
		rows[i] = extractRow{r.Path, r.DeltaNorm, r.RelError}
	}
	for _, note := range peft.UntouchedChanges(base, tuned, targets) {
		fmt.Fprintln(stderr, "note: "+note)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rows)
	}
	fmt.Fprintf(stdout, "%-40s %12s %12s\n", "module", "‖ΔW‖_F", "rel. error")
	var mean float64
	for _, r := range rows {
		fmt.Fprintf(stdout, "%-40s %12.4g %12.4g\n", r.Module, r.DeltaNorm, r.RelError)
		mean += r.RelError / float64(len(rows))
	}
	fmt.Fprintf(stdout, "rank %d · %d modules · mean relative error %.4g · %d adapter params (%s) → %s\n", *rank, len(rows), mean, l.NumParams(), f, *out)
	return nil
}
