package nn

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/internal/cpufeat"
)

// BenchmarkLMHeadLoss times the LM head and loss, forward and backward
// with a frozen head (as LoRA trains it), at 2048 tokens of width 256 and
// a vocabulary of 151936 (Qwen2's), unfused and fused in blocks of
// several sizes (110 tokens: 64 MiB of logits; HeadChunk: 256 MiB), on
// one thread: what each block costs beyond its share of the products is
// packing W for the two matmuls that read it.
func BenchmarkLMHeadLoss(b *testing.B) {
	const n, d, v = 2048, 256, 151936
	for _, chunk := range []int{-1, 110, HeadChunk(v), 1024} {
		name := fmt.Sprintf("fused/block=%d", chunk)
		if chunk < 0 {
			name = "unfused"
		}
		b.Run(name, func(b *testing.B) {
			bl := NewBuilder(&Engine{BLAS: blas.Native{Workers: 1}, Workers: 1}, tensor.Float32)
			rng := rand.New(rand.NewPCG(1, 1))
			x := randParam(bl, rng, "x", 1, n, d)
			wd := make([]float32, v*d)
			for i := range wd {
				wd[i] = rng.Float32()*0.2 - 0.1
			}
			w := bl.Param("w", []int{v, d}, wd, false)
			targets := make([]int, n)
			for i := range targets {
				targets[i] = rng.IntN(v)
			}
			tg := intInput(bl, "targets", targets)
			seed := G.NewScalar(bl.G, tensor.Float32, G.WithName("seed"), G.WithValue(float32(1)))
			var loss *G.Node
			if chunk < 0 {
				loss = bl.CrossEntropy(bl.Linear(x, w), tg)
			} else {
				loss = bl.LMHeadLoss(x, w, tg, seed, chunk)
			}
			if _, err := G.Backpropagate(G.Nodes{loss}, G.Nodes{seed}, G.Nodes{x}); err != nil {
				b.Fatal(err)
			}
			benchGraph(b, bl.G)
		})
	}
}

// BenchmarkLMHeadLossBF16 times the fused head and loss under the bf16
// policy, forward and backward (seeded, in blocks of HeadChunk), on all
// threads, with its products emulated in the fp32 kernels and on the
// CPU's bf16 GEMM (the native AMX or VDPBF16PS kernel; skipped where the
// CPU has neither): 1024 tokens (bench's "mid" batch of 4×256) at the
// "mid" head (vocabulary 8192, width 512) and SmolLM2's (49152, 576),
// with a trained fp32 W (full fine-tuning: logits, dx and dW), a frozen
// bf16 one (LoRA on a bf16 base: logits and dx) and a frozen fp32 one
// (LoRA on an fp32 base), lowered to a bf16 copy or, with
// PackFrozenWeights on the bf16 GEMM ("packed"), rounded as the GEMM
// packs it. graph-MiB is what the graph's values hold after a step
// (W, its copy, x, the gradients; not the ops' own buffers): the packed
// W's is less by the copy, 4 bytes a parameter of W.
func BenchmarkLMHeadLossBF16(b *testing.B) {
	const n = 1024
	workers := runtime.GOMAXPROCS(0)
	for _, sh := range []struct {
		name string
		v, d int
	}{{"mid", 8192, 512}, {"smollm2", 49152, 576}} {
		for _, weight := range []string{"trainable", "bf16 bits", "frozen fp32", "frozen fp32 packed"} {
			for _, path := range []string{"emulated", "bf16"} {
				if weight == "frozen fp32 packed" && path == "emulated" {
					continue // no packer: the same graph as "frozen fp32"
				}
				b.Run(fmt.Sprintf("%s/%s/%s", sh.name, weight, path), func(b *testing.B) {
					e := &Engine{BLAS: blas.Native{Workers: workers}, Workers: workers}
					if path == "bf16" {
						g, err := blas.NewNativeBF16(cpufeat.Detect(), workers)
						if err != nil {
							b.Skip(err)
						}
						e.BF16 = g
					}
					bl := NewBuilder(e, tensor.Float32)
					p := amp.DefaultPolicy(amp.BF16)
					bl.Policy = &p
					bl.PackFrozenWeights = weight == "frozen fp32 packed"
					rng := rand.New(rand.NewPCG(1, 1))
					x := randParam(bl, rng, "x", 1, n, sh.d)
					wd := make([]float32, sh.v*sh.d)
					for i := range wd {
						wd[i] = rng.Float32()*0.2 - 0.1
					}
					wrt := G.Nodes{x}
					var w *G.Node
					switch weight {
					case "trainable":
						w = bl.Param("w", []int{sh.v, sh.d}, wd, true)
						wrt = append(wrt, w)
					case "bf16 bits":
						bits := make([]uint16, len(wd))
						for i, f := range wd {
							bits[i] = amp.BF16.Bits16(f)
						}
						w = bl.Param16("w", []int{sh.v, sh.d}, bits, amp.BF16)
					default:
						w = bl.Param("w", []int{sh.v, sh.d}, wd, false)
					}
					targets := make([]int, n)
					for i := range targets {
						targets[i] = rng.IntN(sh.v)
					}
					seed := G.NewScalar(bl.G, tensor.Float32, G.WithName("seed"), G.WithValue(float32(1)))
					loss := bl.LMHeadLoss(x, w, intInput(bl, "targets", targets), seed, 0)
					if _, err := G.Backpropagate(G.Nodes{loss}, G.Nodes{seed}, wrt); err != nil {
						b.Fatal(err)
					}
					benchGraph(b, bl.G)
					b.ReportMetric(float64(graphBytes(bl.G))/(1<<20), "graph-MiB")
				})
			}
		}
	}
}

// graphBytes is the memory the values of g's nodes hold.
func graphBytes(g *G.ExprGraph) uintptr {
	var n uintptr
	for _, nd := range g.AllNodes() {
		if v := nd.Value(); v != nil {
			n += v.MemSize()
		}
	}
	return n
}
