package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/mixtune/mixtune/report"
)

func readRuns(dirs []string) ([]*report.Run, error) {
	if len(dirs) == 0 {
		return nil, usageError{"name at least one run directory"}
	}
	var runs []*report.Run
	for _, d := range dirs {
		r, err := report.Read(d)
		if err != nil {
			return nil, badInput(err) // the directory named is not a readable run
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// explain adds text after the flags of fs's --help.
func explain(fs *flag.FlagSet, stderr io.Writer, text string) {
	usage := fs.Usage
	fs.Usage = func() { usage(); fmt.Fprint(stderr, text) }
}

// plotHelp follows the flags in `mixtune plot --help`.
const plotHelp = `
Writes loss.png (training loss as lines, validation loss as markers; the
loss axis starts at 0) and lr.png for every run, and loss_scale.png only
when a run scaled its loss: fp16 runs (amp.loss_scaling auto or on), or
bf16 and fp32 runs with amp.loss_scaling: on. Preference runs (dpo, orpo,
simpo) add TRL's metrics: reward_accuracy.png and reward_margin.png
(rewards/accuracies and rewards/margins of each logged step as lines, of
the validation pairs as markers), rewards.png (rewards/chosen and
rewards/rejected) and logps.png (logps/chosen and logps/rejected).
Overlaid runs differ in color, dash pattern and marker.

One run's plots go to RUN_DIR/plots (where training writes them too);
plots of several runs overlaid need --out.
`

func cmdPlot(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plot", "plot [--out DIR] RUN_DIR...", stderr)
	explain(fs, stderr, plotHelp)
	out := fs.String("out", "", "directory for the plots (default: RUN_DIR/plots for one run; required for several)")
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	if *out == "" && fs.NArg() > 1 {
		return usageError{fmt.Sprintf("plotting %d runs together: name the directory for the plots with --out (only one run's go to RUN_DIR/plots by default)", fs.NArg())}
	}
	runs, err := readRuns(fs.Args())
	if err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Join(runs[0].Dir, "plots")
	}
	files, err := report.PlotAll(*out, runs)
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return err
}

// compareHelp follows the flags in `mixtune compare --help`.
const compareHelp = `
Prints a markdown table, a row per run. status is running (a process holds
the run directory), finished, interrupted (train --resume continues it) or
failed (it ended on an error, a crash or a kill, without summary.json).
backend is the matmul backend and kernel the run computed with. A run
without a summary shows the latest values in its metrics.jsonl: its last
step, validation loss, loss scale and tokens/s. When a run tunes on
preference pairs, TRL's rewards/accuracies, rewards/margins,
rewards/chosen, rewards/rejected, logps/chosen and logps/rejected follow:
the validation pairs' after training (data.validation), else the last
logged step's; its val loss is the validation pairs' loss.
`

func cmdCompare(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("compare", "compare RUN_DIR...", stderr)
	explain(fs, stderr, compareHelp)
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	runs, err := readRuns(fs.Args())
	if err != nil {
		return err
	}
	return report.Compare(stdout, runs)
}
