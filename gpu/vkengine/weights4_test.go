package vkengine

import (
	"errors"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/nn"
	"github.com/mixtune/mixtune/quant"
)

// A graph with a 4-bit weight (a QLoRA base) is refused at compile time
// with ErrUnsupported naming the weight, not run or panicking.
func TestFourBitWeightIsRefused(t *testing.T) {
	e := openEngine(t)
	q, err := quant.Quantize(quant.NF4, randoms(1, 64*8, 1), []int{8, 64}, quant.Options{Double: true})
	if err != nil {
		t.Fatal(err)
	}
	b := nn.NewBuilder(&nn.Engine{BLAS: blas.Native{Workers: 2}, Workers: 2}, tensor.Float32)
	b.Linear(input(b, "x", 2, 3, 64), b.Param4("layers.0.q_proj.weight", q.Encode()))
	p, err := e.Compile(b.G, b.IsParam)
	if err == nil {
		p.Close()
		t.Fatal("a graph with a 4-bit weight compiled")
	}
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "layers.0.q_proj.weight") {
		t.Errorf("error %q: want ErrUnsupported naming the weight", err)
	}
}
