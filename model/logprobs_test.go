package model

import (
	"math"
	"testing"

	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
)

// LogProbs, fed token by token through the cache, must be the log-softmax
// of the training graph's logits (which match PyTorch) at every position.
func TestLogProbsMatchGraph(t *testing.T) {
	m, err := Load(torchFixture)
	if err != nil {
		t.Fatal(err)
	}
	e := loadExpected(t)
	graph, _, _ := evaluate(t, m, tensor.Float32, e, false)
	V := m.Config.VocabSize
	d := NewDecoder(m, nil, blas.Gonum{})
	for row := 0; row < e.batch; row++ {
		ids := e.ids[row*e.seqLen : (row+1)*e.seqLen]
		got, err := d.LogProbs(ids)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(ids)-1 {
			t.Fatalf("%d log-probabilities for %d tokens", len(got), len(ids))
		}
		for pos, lp := range got {
			lg := graph[(row*e.seqLen+pos)*V : (row*e.seqLen+pos+1)*V]
			mx := math.Inf(-1)
			for _, l := range lg {
				mx = math.Max(mx, l)
			}
			var sum float64
			for _, l := range lg {
				sum += math.Exp(l - mx)
			}
			want := lg[ids[pos+1]] - mx - math.Log(sum)
			if math.Abs(lp-want) > 1e-5 {
				t.Fatalf("row %d position %d: log p = %v, graph gives %v", row, pos, lp, want)
			}
		}
	}
	for _, bad := range [][]int{{1}, {1, V}, {-1, 2}} {
		if _, err := d.LogProbs(bad); err == nil {
			t.Fatalf("LogProbs(%v) gave no error", bad)
		}
	}
}
