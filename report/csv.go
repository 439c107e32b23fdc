package report

import (
	"bytes"
	"encoding/csv"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/mixtune/mixtune/internal/atomicfile"
)

// csvFirst orders the leading columns of metrics.csv; other fields follow
// alphabetically.
var csvFirst = []string{"step", "loss", "val_loss", "val_ppl", "lr", "grad_norm", "loss_scale", "skipped", "grad_zero_frac", "grad_underflow_frac", "tokens_per_s", "elapsed_s"}

// WriteCSV writes the run's metrics.jsonl as metrics.csv beside it: one
// row per line, a column per field, empty where a line lacks the field.
func WriteCSV(r *Run) error {
	lines := slices.Concat(r.Steps, r.Val, r.EvalPairs)
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].Step < lines[j].Step })
	seen := map[string]bool{}
	for _, p := range lines {
		for k := range p.Fields {
			seen[k] = true
		}
	}
	var cols []string
	for _, c := range csvFirst {
		if seen[c] {
			cols = append(cols, c)
			delete(seen, c)
		}
	}
	var rest []string
	for k := range seen {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	cols = append(cols, rest...)

	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	w.Write(cols)
	for _, p := range lines {
		row := make([]string, len(cols))
		for i, c := range cols {
			if v, ok := p.Fields[c]; ok {
				row[i] = strconv.FormatFloat(v, 'g', -1, 64)
			}
		}
		w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(r.Dir, "metrics.csv"), buf.Bytes())
}
