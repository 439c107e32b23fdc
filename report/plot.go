package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// palette gives each overlaid run its own color, in order.
var palette = []color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255},
	{255, 127, 14, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
}

// Curve is one field of each run's training lines, drawn against step.
type Curve struct {
	Field  string // "loss", "lr", "loss_scale", "grad_norm", ...
	Title  string
	LogY   bool
	AddVal bool // also draw each run's val_loss, dashed
}

// Plot draws the curve of every run into one PNG (or SVG, by extension).
func Plot(path string, c Curve, runs []*Run) error {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = "step"
	p.Y.Label.Text = c.Field
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{}
	}
	p.Legend.Top = true
	drawn := 0
	for i, r := range runs {
		col := palette[i%len(palette)]
		xy := points(r.Steps, c.Field, c.LogY)
		if len(xy) > 0 {
			l, err := plotter.NewLine(xy)
			if err != nil {
				return err
			}
			l.Color, l.Width = col, vg.Points(1.2)
			p.Add(l)
			p.Legend.Add(r.Name, l)
			drawn++
		}
		if c.AddVal {
			if vxy := points(r.Val, "val_loss", c.LogY); len(vxy) > 0 {
				l, s, err := plotter.NewLinePoints(vxy)
				if err != nil {
					return err
				}
				l.Color, l.Width, l.Dashes = col, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
				s.Color, s.Shape = col, draw.CircleGlyph{}
				p.Add(l, s)
				p.Legend.Add(r.Name+" (validation)", l)
				drawn++
			}
		}
	}
	if drawn == 0 {
		return fmt.Errorf("plot %s: no run has %q values", path, c.Field)
	}
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func points(ps []Point, field string, logY bool) plotter.XYs {
	var xy plotter.XYs
	for _, p := range ps {
		v, ok := p.Fields[field]
		if !ok || math.IsNaN(v) || math.IsInf(v, 0) || (logY && v <= 0) {
			continue
		}
		xy = append(xy, plotter.XY{X: float64(p.Step), Y: v})
	}
	return xy
}

// StandardCurves are the plots a run writes and `mixtune plot` draws:
// file name and curve.
var StandardCurves = []struct {
	File  string
	Curve Curve
}{
	{"loss.png", Curve{Field: "loss", Title: "training loss (solid) and validation loss (dashed)", AddVal: true}},
	{"lr.png", Curve{Field: "lr", Title: "learning rate"}},
	{"loss_scale.png", Curve{Field: "loss_scale", Title: "loss scale", LogY: true}},
}

// PlotAll draws the standard curves of runs into dir and returns the files
// written. A curve no run has (loss scale without fp16) is left out.
func PlotAll(dir string, runs []*Run) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, c := range StandardCurves {
		if !anyHas(runs, c.Curve.Field) {
			continue
		}
		path := filepath.Join(dir, c.File)
		if err := Plot(path, c.Curve, runs); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}

func anyHas(runs []*Run, field string) bool {
	for _, r := range runs {
		if len(points(r.Steps, field, false)) > 0 {
			return true
		}
	}
	return false
}
