package train

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows the loop's state: a live bar on a terminal, or nothing
// between log lines when the output is a file or a CI log, where a
// redrawn bar would be noise.
type progress struct {
	out io.Writer
	bar *progressbar.ProgressBar
}

func newProgress(out io.Writer, steps int, live bool) *progress {
	p := &progress{out: out}
	if live {
		p.bar = progressbar.NewOptions(steps,
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetWidth(24),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetDescription("step"),
			progressbar.OptionShowDescriptionAtLineEnd(),
		)
	}
	return p
}

// update shows step, loss, learning rate and throughput; the bar adds the
// elapsed time and the ETA.
func (p *progress) update(step int, loss, lr, tps float64) {
	if p.bar == nil {
		return
	}
	p.bar.Describe(fmt.Sprintf("loss %.4f · lr %.2e · %s tok/s", loss, lr, human(int(tps))))
	p.bar.Set(step)
}

// line prints a message on its own line, above the bar.
func (p *progress) line(s string) {
	if p.bar != nil {
		p.bar.Clear()
	}
	fmt.Fprintln(p.out, s)
	if p.bar != nil {
		p.bar.RenderBlank()
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		p.bar.Finish()
		fmt.Fprintln(p.out)
	}
}
