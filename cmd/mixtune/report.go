package main

import (
	"fmt"
	"io"

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
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func cmdPlot(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("plot", "plot [--out DIR] RUN_DIR...", stderr)
	out := fs.String("out", "plots", "directory for loss.png, lr.png and loss_scale.png")
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	runs, err := readRuns(fs.Args())
	if err != nil {
		return err
	}
	files, err := report.PlotAll(*out, runs)
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return err
}

func cmdCompare(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("compare", "compare RUN_DIR...", stderr)
	if err := fs.Parse(args); err != nil {
		return parseErr(err)
	}
	runs, err := readRuns(fs.Args())
	if err != nil {
		return err
	}
	return report.Compare(stdout, runs)
}
