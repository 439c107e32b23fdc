package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// The preference head's case: 3 sequences of 4 tokens over a vocabulary
// of 23, one sequence with every target ignored, the others mixed.
var seqHeadTargets = []int{IgnoreIndex, 3, 22, 0, IgnoreIndex, IgnoreIndex, IgnoreIndex, IgnoreIndex, 5, 17, IgnoreIndex, 9}

const seqHeadRows, seqHeadD, seqHeadV = 3, 8, 23

// seqHeadRun is the sequences' log-probabilities and the gradients of x
// and W, with the logits' gradient and x as the unfused pair has them.
type seqHeadRun struct {
	logps, dx, dw, dl, x []float32
	logitsLike           int // nodes of shape [N, V]
}

// runSeqHead builds SequenceLogProbs(Linear(x, W)) (chunk < 0) or
// SequenceLogProbsHead in blocks of chunk tokens, differentiated with
// fixed gradients per sequence, in format f, and runs it twice.
func runSeqHead(t *testing.T, be blas.Backend, f amp.Format, chunk int) seqHeadRun {
	t.Helper()
	b := NewBuilder(&Engine{BLAS: be, Workers: 2}, tensor.Float32)
	if f != amp.FP32 {
		p := amp.DefaultPolicy(f)
		b.Policy = &p
	}
	rng := rand.New(rand.NewPCG(7, 9))
	n := len(seqHeadTargets)
	x := randParam(b, rng, "x", 1, n, seqHeadD)
	w := randParam(b, rng, "w", 1, seqHeadV, seqHeadD)
	tg := intInput(b, "targets", seqHeadTargets)
	var out, logits *G.Node
	if chunk < 0 {
		logits = b.Linear(x, w)
		out = b.SequenceLogProbs(logits, tg, seqHeadRows)
	} else {
		out = b.SequenceLogProbsHead(x, w, tg, seqHeadRows, chunk)
	}
	dy := b.Input("dy", seqHeadRows)
	if err := G.Let(dy, tensor.New(tensor.WithShape(seqHeadRows), tensor.WithBacking([]float32{0.7, -1.25, 3}))); err != nil {
		t.Fatal(err)
	}
	wrt := G.Nodes{x, w}
	if logits != nil {
		wrt = append(wrt, logits)
	}
	grads, err := G.Backpropagate(G.Nodes{out}, G.Nodes{dy}, wrt)
	if err != nil {
		t.Fatal(err)
	}
	vm := G.NewTapeMachine(b.G)
	defer vm.Close()
	for range 2 {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
	}
	r := seqHeadRun{logps: clone32(out), dx: clone32(grads[0]), dw: clone32(grads[1]), x: clone32(x)}
	for _, nd := range b.G.AllNodes() {
		if s := nd.Shape(); len(s) == 2 && s[0] == n && s[1] == seqHeadV {
			r.logitsLike++
		}
	}
	if logits != nil {
		r.dl = clone32(grads[2])
	}
	return r
}

// SequenceLogProbsHead against the unfused pair it replaces, on the
// native backend (whose products over D are the same whichever rows a
// block holds): the log-probabilities and dx bit for bit, in fp32, bf16
// and fp16, in one block or several; dW bit for bit in one block, and in
// several within the fp32 bound of adding the blocks' products in another
// order, 2·γ_N·Σ_r |dl_rj·x_rk| (both sums against the exact one); and no
// node of the fused graph holds [N, V] values.
func TestSequenceLogProbsHeadMatchesUnfused(t *testing.T) {
	be := blas.Native{Workers: 2}
	n := len(seqHeadTargets)
	gammaN := float64(n) * 0x1p-24 / (1 - float64(n)*0x1p-24)
	for _, f := range []amp.Format{amp.FP32, amp.BF16, amp.FP16} {
		ref := runSeqHead(t, be, f, -1)
		if ref.logitsLike == 0 {
			t.Fatal("the unfused graph has no [N, V] node: the check below means nothing")
		}
		if ref.logps[1] != 0 {
			t.Fatalf("%v: the sequence with every target ignored has log-probability %v", f, ref.logps[1])
		}
		for _, chunk := range []int{0, 5} {
			t.Run(fmt.Sprintf("%v/chunk %d", f, chunk), func(t *testing.T) {
				got := runSeqHead(t, be, f, chunk)
				if got.logitsLike != 0 {
					t.Errorf("the fused graph has %d nodes of shape [%d, %d]", got.logitsLike, n, seqHeadV)
				}
				if i := sameBits(ref.logps, got.logps); i >= 0 {
					t.Errorf("log-probability %d = %v, unfused %v", i, got.logps[i], ref.logps[i])
				}
				if i := sameBits(ref.dx, got.dx); i >= 0 {
					t.Errorf("dx[%d] = %v, unfused %v", i, got.dx[i], ref.dx[i])
				}
				if chunk == 0 {
					if i := sameBits(ref.dw, got.dw); i >= 0 {
						t.Errorf("dW[%d] = %v, unfused %v", i, got.dw[i], ref.dw[i])
					}
					return
				}
				for j := range seqHeadV {
					for k := range seqHeadD {
						var mag float64
						for r := range n {
							mag += math.Abs(float64(ref.dl[r*seqHeadV+j]) * float64(ref.x[r*seqHeadD+k]))
						}
						i := j*seqHeadD + k
						if d := math.Abs(float64(got.dw[i]) - float64(ref.dw[i])); !(d <= 2*gammaN*mag) {
							t.Errorf("dW[%d] = %v, unfused %v: %.3g apart, bound %.3g", i, got.dw[i], ref.dw[i], d, 2*gammaN*mag)
						}
					}
				}
			})
		}
	}
}
