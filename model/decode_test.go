package model

import (
	"context"
	"slices"
	"testing"

	"github.com/mixtune/mixtune/blas"
)

// Several sequences share a run, and a run holds at most maxRows rows,
// so a prompt may be split across runs and a run may hold parts of
// several: none of it changes a sequence's logits. On the native backend
// (see TestDecodingMatchesTrainingForward) they are the bits of the
// sequence decoded alone, and so are the tokens generated.
func TestDecoderMixesSequencesInRuns(t *testing.T) {
	m, err := Load(torchFixture)
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int{{1, 5, 9, 2, 7}, {1, 22}, {3, 4, 5}}
	d := NewDecoder(m, nil, blas.Native{Workers: 2})
	var alone [][]float32
	for _, p := range prompts {
		lg, err := d.Logits(p, len(p))
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, lg[len(lg)-1])
	}
	want, err := d.Generate(prompts, 6, Sampling{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{1, 2, 4} {
		d.maxRows = rows
		d.cache.Reset()
		for range prompts {
			d.cache.Add()
		}
		got, err := d.feed(context.Background(), prompts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range prompts {
			if !slices.Equal(got[i], alone[i]) {
				t.Fatalf("runs of %d rows: prompt %d's logits differ from the prompt's decoded alone", rows, i)
			}
		}
		out, err := d.Generate(prompts, 6, Sampling{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range out {
			if !slices.Equal(out[i], want[i]) {
				t.Fatalf("runs of %d rows: prompt %d generated %v, in one run %v", rows, i, out[i], want[i])
			}
		}
	}
	if len(d.graphs) > keptGraphs {
		t.Fatalf("%d graphs kept, at most %d", len(d.graphs), keptGraphs)
	}
}
