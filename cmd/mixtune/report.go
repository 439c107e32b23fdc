package main

import (
	"fmt"
	"io"
	"os"
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
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	curves := []struct {
		file string
		c    report.Curve
	}{
		{"loss.png", report.Curve{Field: "loss", Title: "training loss (solid) and validation loss (dashed)", AddVal: true}},
		{"lr.png", report.Curve{Field: "lr", Title: "learning rate"}},
		{"loss_scale.png", report.Curve{Field: "loss_scale", Title: "loss scale", LogY: true}},
	}
	for _, c := range curves {
		path := filepath.Join(*out, c.file)
		if err := report.Plot(path, c.c, runs); err != nil {
			if c.c.Field == "loss_scale" {
				continue // only fp16 runs scale their loss
			}
			return err
		}
		fmt.Fprintln(stdout, path)
	}
	return nil
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
