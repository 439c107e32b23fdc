package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mixtune/mixtune/gguf"
	"github.com/mixtune/mixtune/internal/atomicfile"
)

// `mixtune export gguf`: a model (with its adapter merged in fp32) or a
// LoRA adapter alone, as a GGUF file for llama.cpp, Ollama and LM Studio.

const exportSynopsis = "export gguf --model DIR [--adapter DIR [--lora]] --out FILE.gguf [--type f32|f16|bf16|q8_0] [--name NAME]"

func cmdExport(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintf(stderr, "usage: mixtune %s\n", exportSynopsis)
			return nil
		}
		return usageError{"name the format: mixtune " + exportSynopsis}
	}
	if args[0] != "gguf" {
		return usageError{fmt.Sprintf("unknown export format %q (mixtune exports gguf)", args[0])}
	}
	fs := newFlags("export gguf", exportSynopsis, stderr)
	modelDir := fs.String("model", "", "base model directory (HF layout)")
	adapterDir := fs.String("adapter", "", "PEFT LoRA or DoRA adapter directory, merged into the model in fp32 (optional)")
	asLoRA := fs.Bool("lora", false, "write the adapter alone as a llama.cpp LoRA adapter file (llama-cli -m BASE.gguf --lora FILE) instead of merging it")
	out := fs.String("out", "", "the GGUF file to write (must not exist)")
	typ := fs.String("type", "f16", "type of the weight matrices: f32, f16, bf16 or q8_0 (norms and biases stay f32)")
	name := fs.String("name", "", "general.name in the file (default: the model directory's name)")
	baseQuant := baseQuantizeFlags(fs)
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	if *modelDir == "" || *out == "" {
		return usageError{"--model and --out are required"}
	}
	if *asLoRA && *adapterDir == "" {
		return usageError{"--lora exports an adapter: give it with --adapter"}
	}
	t, err := gguf.ParseType(*typ)
	if err != nil {
		return usageError{"--type: " + err.Error()}
	}
	q, err := baseQuant()
	if err != nil {
		return err
	}
	if _, err := os.Stat(*out); err == nil {
		return usageError{fmt.Sprintf("--out %s already exists; choose a new file", *out)}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if *name == "" {
		*name = gguf.DefaultName(*modelDir, *adapterDir)
	}
	// the model's config and headers, the tokenizer and the adapter are
	// read and checked, and the file laid out, before it is created: bad
	// input leaves nothing behind
	plan, err := gguf.PlanExport(*modelDir, *adapterDir, *asLoRA, gguf.ModelOptions{Type: t, Name: *name, Base: q})
	if err != nil {
		return badInput(err)
	}
	f, vocab, fallbacks, l := plan.File, plan.Vocab, plan.Fallbacks, plan.LoRA
	what := "model"
	if *asLoRA {
		what = "LoRA adapter"
	}
	// The check above fails early; this publish decides: of two exports
	// to one path at once, the second finds the first's file. The weights
	// are read and merged one at a time as they are written; one found
	// bad is reported as itself, and the temporary file is removed.
	var bad *gguf.DataError
	if err := atomicfile.Create(*out, func(w io.Writer) error {
		_, err := f.WriteTo(w)
		return err
	}); errors.Is(err, os.ErrExist) {
		return usageError{fmt.Sprintf("--out %s already exists; choose a new file", *out)}
	} else if errors.As(err, &bad) {
		return badInput(bad.Err)
	} else if err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s %s, %d tensors, %s, %s\n", *out, f.Get("general.architecture"), what, len(f.Tensors), t, humanBytes(st.Size()))
	if vocab != nil {
		fmt.Fprintf(stdout, "tokenizer: %s (%s", vocab.Source, vocab.Model)
		if vocab.Pre != "" {
			fmt.Fprintf(stdout, ", pre-tokenizer %s", vocab.Pre)
		}
		fmt.Fprintf(stdout, "), %d tokens\n", len(vocab.Tokens))
	}
	if len(fallbacks) > 0 {
		fmt.Fprintf(stdout, "%d tensors written as %s, as llama.cpp's converter writes them: %s (%s)\n",
			len(fallbacks), fallbacks[0].Type, fallbackNames(fallbacks), fallbacks[0].Reason)
	}
	if c := plan.Config; c.SlidingWindow > 0 && c.SlidingWindow < c.MaxPositionEmbeddings {
		fmt.Fprintf(stderr, "note: llama.cpp's llama architecture has no sliding window: it attends to the whole context, so it computes as mixtune does only for contexts up to sliding_window (%d tokens)\n", c.SlidingWindow)
	}
	if *asLoRA && l.Config.UseRSLoRA {
		fmt.Fprintf(stdout, "rsLoRA: adapter.lora.alpha is α·√r = %g so that llama.cpp's alpha/r is the adapter's α/√r\n", gguf.Alpha(l.Config))
	}
	return nil
}

func fallbackNames(fs []gguf.Fallback) string {
	var names []string
	for i, f := range fs {
		if i == 3 {
			names = append(names, fmt.Sprintf("and %d more", len(fs)-3))
			break
		}
		names = append(names, f.Tensor)
	}
	return strings.Join(names, ", ")
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
