// Command mixtune fine-tunes Llama-architecture models from YAML recipes.
//
//	mixtune train -c configs/quickstart.yaml [--set train.steps=50]
//	mixtune train --resume runs/quickstart [-c RECIPE --force]
//	mixtune eval --model DIR [--adapter DIR] --data FILE [--json]
//	mixtune generate --model DIR [--adapter DIR] --prompt TEXT
//	mixtune merge --model DIR --adapter DIR --out DIR [--dtype bf16]
//	mixtune extract-lora --base DIR --tuned DIR --rank R --out DIR
//	mixtune export gguf --model DIR [--adapter DIR [--lora]] --out FILE.gguf [--type q8_0]
//	mixtune devices [-c RECIPE] [--json]
//	mixtune plot [--out DIR] RUN...
//	mixtune compare RUN...
//	mixtune bench [--blas native] [--precision bf16] [--json]
//
// Exit status: 0 success, 1 a failure while running, 2 a bad command line,
// recipe or dataset (nothing was started), 130 interrupted by SIGINT or
// SIGTERM (train says what was saved, and how to go on).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/mixtune/mixtune/dist"
	"github.com/mixtune/mixtune/train"
)

type command struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) error
}

// app is the command line. Its faults reach the training loop only from
// the test binary, which uses them to kill a run at a chosen moment.
type app struct {
	faults train.Faults
}

func (a app) commands() []command {
	return []command{
		{"train", "fine-tune a model from a YAML recipe", a.cmdTrain},
		{"eval", "mean loss per token and perplexity of a model on a JSONL or Parquet file", cmdEval},
		{"generate", "continue a prompt with a model (and adapter)", cmdGenerate},
		{"tokenize", "show how a model's tokenizer (and chat template) turns text into token ids, or decode ids", cmdTokenize},
		{"bench", "measure training throughput on the fixed benchmark model", cmdBench},
		{"merge", "fold a LoRA or DoRA adapter into its base model and save a standalone model", cmdMerge},
		{"export", "write a model (adapter merged) or a LoRA adapter as a GGUF file for llama.cpp", cmdExport},
		{"extract-lora", "extract a LoRA adapter from a fine-tuned model by SVD of its weight changes", cmdExtractLoRA},
		{"devices", "list GPUs ranked by VRAM and show which one a recipe would use", cmdDevices},
		{"plot", "plot runs' loss, learning rate and loss scale, overlaid", cmdPlot},
		{"compare", "a markdown table comparing runs", cmdCompare},
		{"serve", "a local web dashboard of a runs directory: status, live charts, recipes", cmdServe},
		{"version", "print the version", func(_ []string, stdout, _ io.Writer) error {
			_, err := fmt.Fprintln(stdout, "mixtune", train.Version)
			return err
		}},
	}
}

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		// Nearly all of a training process's heap is float buffers that
		// live for the whole run (weights, optimizer state, the graphs'
		// planned blocks) and hold no pointers, so a collection costs
		// little however large they are; Go's default of collecting
		// when the heap has doubled would let the few MiB of scratch a
		// step leaves behind grow the process to twice what it holds.
		// At 25%, SmolLM2-135M's shape checkpointed at 512 tokens peaks
		// at 0.65 GiB instead of 0.83, at the same speed.
		debug.SetGCPercent(25)
	}
	os.Exit(app{}.run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError marks a bad command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// run executes one command and returns the exit status: 0 success, 1 a
// failure while running, 2 a bad command line or bad input (recipe,
// dataset, model directory), 130 interrupted. No panic reaches the user as
// a stack dump.
func (a app) run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "mixtune: internal error: %v\n", p)
			if os.Getenv("MIXTUNE_DEBUG") != "" {
				stderr.Write(debug.Stack())
			} else {
				fmt.Fprintln(stderr, "this is a bug in mixtune; rerun with MIXTUNE_DEBUG=1 for a stack trace and report it")
			}
			code = 1
		}
	}()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		a.usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range a.commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(args[1:], stdout, stderr)
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, train.ErrInterrupted):
			return 130
		}
		if _, quiet := err.(quietError); !quiet {
			fmt.Fprintf(stderr, "mixtune %s: %v\n", c.name, err)
		}
		return exitCode(err)
	}
	fmt.Fprintf(stderr, "mixtune: unknown command %q\n\n", args[0])
	a.usage(stderr)
	return 2
}

// exitCode is the status of a failed command: 2 for a bad command line
// or bad input, 130 interrupted, else 1.
func exitCode(err error) int {
	var ue usageError
	switch {
	case errors.Is(err, train.ErrInterrupted):
		return 130
	case errors.As(err, &ue) || train.IsInputError(err):
		return 2
	}
	return 1
}

func (a app) usage(w io.Writer) {
	fmt.Fprintln(w, "usage: mixtune <command> [flags]\n\ncommands:")
	for _, c := range a.commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'mixtune <command> --help' for a command's flags.")
}

// newFlags makes a command's flag set; parse errors and --help return
// instead of exiting, so run decides the status.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: mixtune %s\n\nflags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func parseErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err.Error()}
}

// multi is a repeatable string flag (--set a=1 --set b=2).
type multi []string

func (m *multi) String() string     { return strings.Join(*m, " ") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func (a app) cmdTrain(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("train", "train -c CONFIG [--set key.path=value]...  |  train --resume RUN_DIR [-c CONFIG [--force]]", stderr)
	cfg := fs.String("c", "", "the YAML recipe (see configs/reference.yaml)")
	resume := fs.String("resume", "", "continue this run directory from its latest good checkpoint")
	force := fs.Bool("force", false, "with --resume -c: continue even if the recipe differs from the run's")
	var sets multi
	fs.Var(&sets, "set", "override one config field, e.g. --set train.steps=50 (repeatable)")
	printPolicy := fs.Bool("print-policy", false, "print the precision policy's op lists and exit")
	fs.Func("bf16-matmul", "where bf16 products run: auto, emulate or hardware (the same as --set amp.bf16_matmul=...)", func(v string) error {
		sets = append(sets, "amp.bf16_matmul="+v)
		return nil
	})
	allreduce := fs.String("allreduce", "native", "under mpirun or srun: how gradients are summed over the ranks: native (MPI_Allreduce) or ordered (in rank order, the same bits whatever the MPI)")
	overlap := fs.Bool("overlap", true, "under mpirun or srun: sum each bucket of gradients while the backward pass computes the earlier layers'")
	bucketMB := fs.Float64("bucket-mb", 4, "under mpirun or srun, with --overlap: MiB of gradients per overlapped sum")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *cfg == "" && *resume == "" {
		return usageError{"-c CONFIG (or --resume RUN_DIR) is required"}
	}
	red, err := dist.ParseReduction(*allreduce)
	if err != nil {
		return usageError{"--allreduce: " + err.Error()}
	}
	// Under a launcher, this process is one rank of a data-parallel job
	// (dist.Open reads which); otherwise comm is a Single and nothing
	// changes.
	comm, err := dist.Open(dist.Options{Reduction: red})
	if err != nil {
		return err
	}
	say := stderr
	if comm.Rank() != 0 {
		say = io.Discard // rank 0 speaks for the job
	}
	ctx, stop := interruptible(say)
	defer stop()
	r, err := loadRecipe(*cfg, *resume, sets, *force, stderr)
	var choice *train.DeviceChoice
	if err == nil && !*printPolicy {
		choice, err = r.ChooseDevice(ctx, dist.LocalSize(comm))
		if ctx.Err() != nil {
			err = nil // interrupted: train.Run says so, and what it means for the run
		}
	}
	if err := dist.Agree(comm, err); err != nil { // every rank stops, or none
		comm.Close()
		return jobError(comm, err)
	}
	if *printPolicy {
		comm.Close()
		p, err := r.Policy()
		if err != nil {
			return err
		}
		fmt.Fprint(stdout, p.String())
		fmt.Fprintf(stdout, "loss scaling: %v\n", r.LossScaling())
		return nil
	}
	// Anything in this process that initializes CUDA later sees only the
	// chosen devices, numbered in PCI bus order (nvidia-smi's), never
	// CUDA's fastest-first order: CUDA reads these once, at its init.
	if choice != nil {
		for _, kv := range choice.Selection.Env {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
	}
	_, err = train.Run(ctx, r, train.Options{Out: stderr, Progress: comm.Rank() == 0 && isTerminal(stderr), ResumeDir: *resume, Force: *force,
		Device: choice, Faults: a.faults, Comm: comm, Overlap: *overlap, BucketBytes: int(*bucketMB * (1 << 20))})
	if err != nil && comm.Size() > 1 && !dist.IsJobError(err) && !errors.Is(err, train.ErrInterrupted) {
		// A failure this rank met alone: the others may be waiting for it
		// in a collective that will never complete. Say which rank, then
		// end the whole job (MPI_Abort); the last checkpoint is whole.
		fmt.Fprintf(stderr, "mixtune train: %v\n", rankError{comm, err})
		comm.Abort(exitCode(err))
	}
	comm.Close()
	return jobError(comm, err)
}

// jobError is how a rank of a job of several reports err: quiet when
// another rank prints it, else with its rank and host.
func jobError(comm dist.Comm, err error) error {
	switch {
	case err == nil || comm.Size() == 1 || errors.Is(err, train.ErrInterrupted):
		return err
	case dist.IsQuiet(err):
		return quietError{err}
	}
	return rankError{comm, err}
}

// rankError prefixes a rank's failure with its rank and host.
type rankError struct {
	comm dist.Comm
	err  error
}

func (e rankError) Error() string {
	host := ""
	if hs := e.comm.Info().Hosts; e.comm.Rank() < len(hs) {
		host = " on " + hs[e.comm.Rank()]
	}
	return fmt.Sprintf("rank %d%s: %v", e.comm.Rank(), host, e.err)
}
func (e rankError) Unwrap() error { return e.err }

// quietError is a failure another rank prints: it sets the exit status
// but is not printed again.
type quietError struct{ error }

func (e quietError) Unwrap() error { return e.error }

// loadRecipe reads the recipe to train with. Resuming, it is the run's own
// resolved.yaml; a recipe named with -c, or --set overrides, that differ
// from it are listed key by key and refused without --force.
func loadRecipe(cfg, resume string, sets []string, force bool, stderr io.Writer) (*train.Recipe, error) {
	if resume == "" {
		return train.Load(cfg, sets)
	}
	resolved := filepath.Join(resume, "resolved.yaml")
	runCfg, err := train.Load(resolved, nil)
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", resume, err)
	}
	if cfg == "" && len(sets) == 0 {
		return runCfg, nil
	}
	if cfg == "" {
		cfg = resolved
	}
	r, err := train.Load(cfg, sets)
	if err != nil {
		return nil, err
	}
	if diff := train.Diff(runCfg.Config, r.Config); len(diff) > 0 {
		msg := fmt.Sprintf("the recipe differs from the run's in:\n  %s", strings.Join(diff, "\n  "))
		if !force {
			return nil, usageError{msg + "\npass --force to resume with it anyway"}
		}
		fmt.Fprintln(stderr, "warning: "+msg)
	}
	return r, nil
}

// interruptible cancels the context on the first SIGINT or SIGTERM, so
// that whatever the run is doing (loading, tokenizing, measuring, a step)
// stops at its next row, batch, token or step, and what was trained is
// saved; a second signal exits at once, saving nothing more.
func interruptible(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sig; !ok {
			return
		}
		fmt.Fprintln(stderr, "\nstopping (interrupt again to quit at once)")
		cancel()
		if _, ok := <-sig; ok {
			fmt.Fprintln(stderr, "quitting")
			os.Exit(130)
		}
	}()
	return ctx, func() { signal.Stop(sig); close(sig); cancel() }
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
