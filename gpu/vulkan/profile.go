package vulkan

import (
	"sort"
	"strings"
)

// Profile sums timed batches (Recorder.Time's BatchTimes) by kernel and
// op kind: where a step's GPU time goes.
type Profile struct {
	Batches      int
	GPUNanos     float64 // the batches' command-buffer times, summed
	CommandNanos float64 // their commands' times, summed (at most GPUNanos)
	rows         map[profileKey]*ProfileRow
}

type profileKey struct{ kernel, kind string }

// ProfileRow is one kernel run for one op kind, summed over the batches.
type ProfileRow struct {
	Kernel string  // the shader, without its .spv
	Kind   string  // the op kind (Scope.Kind); "" outside any
	Calls  int     // commands
	Nanos  float64 // their GPU time
	Flops  float64 // their floating-point operations, where known (GEMMs)
	// SlowestNode is the graph node (its name) whose command took longest,
	// and SlowestNanos that command's time.
	SlowestNode  string
	SlowestNanos float64
}

// Add sums one batch into the profile.
func (p *Profile) Add(b BatchTime) {
	if p.rows == nil {
		p.rows = map[profileKey]*ProfileRow{}
	}
	p.Batches++
	p.GPUNanos += b.Nanos
	for _, c := range b.Commands {
		name := strings.TrimSuffix(c.Kernel, ".spv")
		k := profileKey{name, c.Scope.Kind}
		row := p.rows[k]
		if row == nil {
			row = &ProfileRow{Kernel: name, Kind: c.Scope.Kind}
			p.rows[k] = row
		}
		row.Calls++
		row.Nanos += c.Nanos
		row.Flops += c.Flops
		p.CommandNanos += c.Nanos
		if c.Scope.Node != "" && (row.SlowestNode == "" || c.Nanos > row.SlowestNanos) {
			row.SlowestNode, row.SlowestNanos = c.Scope.Node, c.Nanos
		}
	}
}

// Rows are the profile's rows, the longest first (ties by kernel, then kind).
func (p *Profile) Rows() []ProfileRow {
	rows := make([]ProfileRow, 0, len(p.rows))
	for _, r := range p.rows {
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Nanos != b.Nanos {
			return a.Nanos > b.Nanos
		}
		if a.Kernel != b.Kernel {
			return a.Kernel < b.Kernel
		}
		return a.Kind < b.Kind
	})
	return rows
}
