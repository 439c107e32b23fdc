package report

import (
	"cmp"
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

// Each overlaid run has its own color, dash pattern (training lines) and
// marker (validation points), in this order, so that runs stay apart where
// their curves coincide: the first run's wide solid line shows under a
// second run's dashes. Colors repeat after eight runs, patterns after six.
var (
	palette = []color.RGBA{
		{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {148, 103, 189, 255},
		{255, 127, 14, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	}
	dashes = [][]vg.Length{
		nil,                              // solid
		{vg.Points(6), vg.Points(3)},     // dashes
		{vg.Points(1.5), vg.Points(2.5)}, // dots
		{vg.Points(7), vg.Points(2.5), vg.Points(1.5), vg.Points(2.5)}, // dash-dot
		{vg.Points(12), vg.Points(4)},                                  // long dashes
		{vg.Points(3), vg.Points(2)},                                   // short dashes
	}
	glyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{}, draw.RingGlyph{},
		draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{}}
)

// lineStyle is run i's training line: the first run's is wider, so that a
// later run drawn over it on the same values leaves it visible.
func lineStyle(i int) draw.LineStyle {
	w := vg.Points(1.2)
	if i == 0 {
		w = vg.Points(2.2)
	}
	return draw.LineStyle{Color: palette[i%len(palette)], Width: w, Dashes: dashes[i%len(dashes)]}
}

// Curve is one field of each run's training lines, drawn against step.
type Curve struct {
	Field  string // "loss", "lr", "loss_scale", "grad_norm", ...
	Title  string
	Label  string // the y axis's label; Field when empty
	LogY   bool   // a log₂ axis with power-of-two ticks (loss scales are powers of two)
	ZeroY  bool   // the y axis starts at 0 (the field is never negative)
	Stairs bool   // a value holds until the next (a loss scale), drawn as steps
	AddVal bool   // also draw each run's val_loss: markers joined by a thin dotted line
	// Also are more fields drawn for each run in its color, thinner, each
	// named in the legend (rewards/rejected beside rewards/chosen).
	Also []string
	// AddEvalPairs draws each run's "eval_"+Field, from its evaluations
	// of validation pairs, as AddVal draws val_loss.
	AddEvalPairs bool
	MaxY         float64 // when not 0, the y axis ends there (1 for a share)
	LegendLow    bool    // the legend at the bottom, below curves that rise to the top
}

// Plot draws the curve of every run into one PNG (or SVG, by extension).
func Plot(path string, c Curve, runs []*Run) error {
	p, err := newPlot(c, runs)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// newPlot lays out the curve of every run. The step axis starts at 0;
// linear axes have ticks at 1, 2 or 5 times a power of ten and end on a
// tick.
func newPlot(c Curve, runs []*Run) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = "step"
	p.Y.Label.Text = cmp.Or(c.Label, c.Field)
	p.X.Tick.Marker, p.Y.Tick.Marker = niceTicks{}, niceTicks{}
	p.X.AutoRescale, p.Y.AutoRescale = true, true
	if c.LogY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, pow2Ticks{}
	}
	p.Legend.Top = !c.LegendLow
	p.Legend.ThumbnailWidth = vg.Points(36)
	drawn := 0
	for i, r := range runs {
		col := palette[i%len(palette)]
		if xy := points(r.Steps, c.Field, c.LogY); len(xy) > 0 {
			l, err := plotter.NewLine(xy)
			if err != nil {
				return nil, err
			}
			l.LineStyle = lineStyle(i)
			if c.Stairs {
				l.StepStyle = plotter.PostStep
			}
			p.Add(l)
			p.Legend.Add(legendName(r.Name, c.Field, c.Also), l)
			drawn++
		}
		for j, f := range c.Also {
			if xy := points(r.Steps, f, c.LogY); len(xy) > 0 {
				l, err := plotter.NewLine(xy)
				if err != nil {
					return nil, err
				}
				l.LineStyle = lineStyle(i)
				l.Width = vg.Points(0.9)
				l.Dashes = dashes[(i+1+j)%len(dashes)]
				p.Add(l)
				p.Legend.Add(r.Name+" "+f, l)
				drawn++
			}
		}
		val, field := r.Val, "val_loss"
		if c.AddEvalPairs {
			val, field = r.EvalPairs, "eval_"+c.Field
		}
		if c.AddVal || c.AddEvalPairs {
			if vxy := points(val, field, c.LogY); len(vxy) > 0 {
				l, s, err := plotter.NewLinePoints(vxy)
				if err != nil {
					return nil, err
				}
				l.Color, l.Width, l.Dashes = col, vg.Points(0.8), []vg.Length{vg.Points(1), vg.Points(2)}
				s.Color, s.Shape, s.Radius = col, glyphs[i%len(glyphs)], vg.Points(3.5)
				p.Add(l, s)
				p.Legend.Add(r.Name+" validation", l, s)
				drawn++
			}
		}
	}
	if drawn == 0 {
		return nil, fmt.Errorf("no run has %q values", c.Field)
	}
	p.X.Min = min(p.X.Min, 0)
	if c.ZeroY {
		p.Y.Min = min(p.Y.Min, 0)
	}
	if c.MaxY != 0 {
		p.Y.Max = max(p.Y.Max, c.MaxY)
	}
	return p, nil
}

// legendName names a run's line in the legend: with more fields drawn
// beside it, the field too.
func legendName(run, field string, also []string) string {
	if len(also) > 0 {
		return run + " " + field
	}
	return run
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
	{"loss.png", Curve{Field: "loss", Title: "training loss (lines) and validation loss (markers)", Label: "loss (axis from 0)", ZeroY: true, AddVal: true}},
	{"lr.png", Curve{Field: "lr", Title: "learning rate", Label: "learning rate", ZeroY: true}},
	{"loss_scale.png", Curve{Field: "loss_scale", Title: "loss scale (runs that scale the loss: fp16, or amp.loss_scaling: on)", Label: "loss scale (log scale)", LogY: true, Stairs: true}},
	// preference runs: TRL's metrics
	{"reward_accuracy.png", Curve{Field: "rewards/accuracies", Title: "reward accuracy: pairs whose chosen reward beats the rejected (lines: each step's; markers: validation pairs)", Label: "rewards/accuracies (axis from 0 to 1)", ZeroY: true, MaxY: 1, AddEvalPairs: true, LegendLow: true}},
	{"reward_margin.png", Curve{Field: "rewards/margins", Title: "reward margin, chosen minus rejected (lines: each step's; markers: validation pairs)", Label: "rewards/margins", AddEvalPairs: true}},
	{"rewards.png", Curve{Field: "rewards/chosen", Also: []string{"rewards/rejected"}, Title: "rewards of the chosen and the rejected completions (each step's)", Label: "reward"}},
	{"logps.png", Curve{Field: "logps/chosen", Also: []string{"logps/rejected"}, Title: "summed log-probabilities of the chosen and the rejected completions (each step's)", Label: "log-probability"}},
}

// PlotAll draws the standard curves of runs into dir and returns the files
// written. A curve no run has is left out: loss_scale.png needs a run that
// scaled its loss (fp16 by default; amp.loss_scaling: on for bf16 or fp32),
// the reward and log-probability plots a preference run.
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
