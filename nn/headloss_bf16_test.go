package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
)

// headProducts is how many products a fused head computes in runHead's
// timed run (the second of two): per block of tokens the logits and dx,
// and dW when W is trained; the logits once more per block where the
// backward pass recomputes them (not seeded).
func headProducts(c headCase) int64 {
	n := int64(headN)
	blocks := int64(1)
	if c.chunk > 0 && c.chunk < headN {
		blocks = (n + int64(c.chunk) - 1) / int64(c.chunk)
	}
	per := int64(2)
	if c.weight == "trainable" {
		per++
	}
	if !c.seeded {
		per++
	}
	return blocks * per
}

// sameHeadBits reports the first of a run's results whose bits differ
// from want's, or "".
func sameHeadBits(got, want headRun) string {
	if math.Float32bits(got.loss) != math.Float32bits(want.loss) {
		return fmt.Sprintf("loss %v, want %v", got.loss, want.loss)
	}
	for _, c := range []struct {
		name      string
		got, want []float32
	}{{"dx", got.dx, want.dx}, {"dxp", got.dxp, want.dxp}, {"dW", got.dw, want.dw}} {
		if len(c.got) != len(c.want) {
			return fmt.Sprintf("%s has %d values, want %d", c.name, len(c.got), len(c.want))
		}
		if i := sameBits(c.got, c.want); i >= 0 {
			return fmt.Sprintf("%s[%d] = %v, want %v", c.name, i, c.got[i], c.want[i])
		}
	}
	return ""
}

// TestLMHeadLossBF16Path runs the fused head with and without a bf16 GEMM
// on the engine, under each policy, for a trained, a frozen and a 16-bit
// (bf16) W, in one block of tokens and in blocks of 4 (the last of 3),
// with the gradients computed in the forward pass (seeded) and in the
// backward one. Under the bf16 policy every product (logits, dx, dW
// when trained) has two bf16 operands and must run on the bf16 GEMM and
// none on the fp32 one; under fp32 and fp16 none may. The bits GEMM here
// widens its operands and runs the fp32 native Sgemm, whose sums do not
// depend on how a product is cut (headBackends): the emulation's bits by
// design, so wrong operands, transposes, strides or β change a bit. The
// packer (the native driver on its Go kernel, taking W packed) is counted.
func TestLMHeadLossBF16Path(t *testing.T) {
	for _, pc := range []struct {
		format amp.Format
		onBF16 bool
	}{{amp.FP32, false}, {amp.FP16, false}, {amp.BF16, true}} {
		for _, weight := range []string{"trainable", "frozen", "bf16 bits"} {
			for _, chunk := range []int{0, 4} {
				for _, seeded := range []bool{true, false} {
					c := headCase{format: pc.format, weight: weight, fused: true, seeded: seeded, chunk: chunk, workers: 2}
					t.Run(fmt.Sprintf("%v/%s/chunk %d/seeded %v", pc.format, weight, chunk, seeded), func(t *testing.T) {
						be := blas.Native{Workers: 2}
						emu := runHead(t, be, c)
						want := int64(0)
						if pc.onBF16 {
							want = headProducts(c)
						}
						bits := &widenGemmer{be: be}
						c.bf16 = bits
						got := runHead(t, be, c)
						// runHead runs the graph twice; the count covers both
						if n := bits.calls.Load(); n != 2*want {
							t.Fatalf("bits GEMM: %d products, want %d", n, 2*want)
						}
						if msg := sameHeadBits(got, emu); msg != "" {
							t.Fatalf("bits GEMM against the emulation: %s", msg)
						}
						if got.rounded != emu.rounded || got.under != emu.under {
							t.Errorf("rounded %d gradient values, %d underflowed; emulated %d, %d", got.rounded, got.under, emu.rounded, emu.under)
						}
						wantFP32 := emu.gemms
						if pc.onBF16 {
							wantFP32 = 0
						}
						if got.gemms != wantFP32 {
							t.Errorf("%d products on the fp32 GEMM, want %d", got.gemms, wantFP32)
						}
						pack := &productCounter{NativeBF16: blas.NewNativeBF16Go(2)}
						c.bf16 = pack
						runHead(t, be, c)
						if n := pack.calls.Load(); n != 2*want {
							t.Fatalf("packer: %d products, want %d", n, 2*want)
						}
						// a GEMM whose kernel rounds C as it stores it takes
						// the logits rounded that way, and the bits hold
						rounder := roundingPacker{&widenPacker{widenGemmer: &widenGemmer{be: be}}}
						c.bf16 = rounder
						got = runHead(t, be, c)
						if msg := sameHeadBits(got, emu); msg != "" {
							t.Fatalf("rounding GEMM against the emulation: %s", msg)
						}
						if n := rounder.calls.Load(); n != 2*want {
							t.Fatalf("rounding GEMM: %d products, want %d", n, 2*want)
						}
					})
				}
			}
		}
	}
}

// roundingPacker is widenPacker with the entry point of a bf16 GEMM whose
// kernel rounds C to bf16 as it stores it (bf16Rounder), rounding the
// emulation's product with amp: the emulation's bits by design. It keeps
// no packing (PackB gives none, so every product reads B as given).
type roundingPacker struct{ *widenPacker }

func (g roundingPacker) PackB(*blas.PackedBF16, bool, int, int, blas.BF16Matrix) *blas.PackedBF16 {
	return nil
}

func (g roundingPacker) GemmRound(transA, transB bool, m, n, k int, a, b blas.BF16Matrix, pb *blas.PackedBF16, c []float32, ldc int, done func(i0, i1, j0, j1 int)) {
	g.widenPacker.Gemm(transA, transB, m, n, k, 1, a, b, pb, 0, c, ldc, nil)
	for i := range m {
		amp.BF16.RoundSlice(c[i*ldc : i*ldc+n])
	}
	if done != nil && m > 0 && n > 0 {
		done(0, m, 0, n)
	}
}

// GemmBand computes the whole product (what a band leaves out is zeros,
// and GemmBand may write the rest).
func (g roundingPacker) GemmBand(band blas.Band, transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, beta float32, c []float32, ldc int) {
	g.widenPacker.Gemm(transA, transB, m, n, k, alpha, a, b, nil, beta, c, ldc, nil)
}

// GemmBandRound is GemmBand with beta 0, C rounded to bf16 by amp.
func (g roundingPacker) GemmBandRound(band blas.Band, transA, transB bool, m, n, k int, alpha float32, a, b blas.BF16Matrix, c []float32, ldc int) {
	g.widenPacker.Gemm(transA, transB, m, n, k, alpha, a, b, nil, 0, c, ldc, nil)
	for i := range m {
		amp.BF16.RoundSlice(c[i*ldc : i*ldc+n])
	}
}

// reversedGemmer is a correct bf16 GEMM that sums each output's k exact
// products in float32 from the last to the first: an order no fp32
// kernel takes, so that the bounds against the emulation meet real
// differences on a CPU without bf16 units, where the Go models of the
// bf16 kernels sum in the emulation's order and give its bits.
type reversedGemmer struct{}

func (reversedGemmer) Name() string { return "reversed-order sums" }

func (reversedGemmer) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	at := func(x []uint16, ld int, trans bool, i, j int) float32 {
		if trans {
			i, j = j, i
		}
		return amp.BF16.FromBits16(x[i*ld+j])
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := k - 1; p >= 0; p-- {
				s += float32(at(a, lda, transA, i, p) * at(b, ldb, transB, p, j)) // exact; the conversion forbids a fused multiply-add
			}
			v := alpha * s
			if beta != 0 {
				v += beta * c[i*ldc+j]
			}
			c[i*ldc+j] = v
		}
	}
}

// TestLMHeadLossOnBF16Units runs the fused head under the bf16 policy on
// each bf16 GEMM that runs here (oneDNN's and the native AMX and
// VDPBF16PS kernels where the CPU has them; the native driver on its Go
// models of both, and reversedGemmer, everywhere), for a trained fp32 W, a frozen one and a
// frozen bf16 one, a vocabulary of 23 and of 4099 (several of the
// emulation's slabs, and enough values for some of them to round
// differently from another order of summation), in one block and in
// blocks of 4 and 5 (the last of 3 and of 1 token), with ignored targets
// and the gradients computed in the forward pass (seeded) or, on the
// small vocabulary, in the backward one:
//
//   - every product is checked on its actual operands against float64,
//     within boundCheck's γ_(k+2) bound;
//   - the loss, dx and dW against the emulated unfused pair (the fused
//     op's bits on the native backend, TestLMHeadLossMatchesUnfused)
//     within newHeadBound and dwWithinBound: the bf16 units sum the same
//     exact products (bf16·bf16 is exact in fp32) in another order, so a
//     logit moves by at most 2γ_D·Σ|x||W| and one bf16 ulp, and that
//     difference is propagated through the softmax, the bf16 rounding of
//     dl and the products over V (dx) and over the tokens (dW);
//   - the same bits with 1 and with 3 workers, in the engine and the GEMM.
func TestLMHeadLossOnBF16Units(t *testing.T) {
	ones, threes := append(realBF16Gemmers(t, 1), reversedGemmer{}), append(realBF16Gemmers(t, 3), reversedGemmer{})
	vocabs := []int{headV, 4099}
	if raceEnabled { // the small vocabulary shows the workers and the GEMM sharing buffers as well, 25 times faster
		vocabs = vocabs[:1]
	}
	for _, weight := range []string{"trainable", "frozen", "bf16 bits"} {
		for _, v := range vocabs {
			ref := runHead(t, blas.Native{Workers: 2}, headCase{format: amp.BF16, weight: weight, workers: 2, v: v})
			for gi, one := range ones {
				for _, chunk := range []int{0, 4, 5} {
					seededs := []bool{true, false}
					if v > headV { // the recomputing backward pass is checked on the small vocabulary
						seededs = seededs[:1]
					}
					for _, seeded := range seededs {
						c := headCase{format: amp.BF16, weight: weight, fused: true, seeded: seeded, chunk: chunk, v: v}
						t.Run(fmt.Sprintf("%s/%s/v %d/chunk %d/seeded %v", one.Name(), weight, v, chunk, seeded), func(t *testing.T) {
							var bc boundCheck
							c.workers, c.bf16 = 1, checked(one, &bc)
							r1 := runHead(t, blas.Native{Workers: 1}, c)
							c.workers, c.bf16 = 3, checked(threes[gi], &bc)
							r3 := runHead(t, blas.Native{Workers: 3}, c)
							if bc.fail != "" {
								t.Fatalf("%d products checked: %s", bc.calls, bc.fail)
							}
							if want := 4 * headProducts(c); int64(bc.calls) != want { // 2 runs each on 1 and 3 workers
								t.Fatalf("%d products on the bf16 GEMM, want %d", bc.calls, want)
							}
							if msg := sameHeadBits(r3, r1); msg != "" {
								t.Fatalf("3 workers against 1: %s", msg)
							}
							t.Logf("%d products, worst %.3g of the γ_(k+2) bound", bc.calls, bc.worst)
							compareHead(t, amp.BF16, ref, r1, chunk, v, false)
						})
					}
				}
			}
		}
	}
}

// TestLMHeadLossFrozenFP32WeightRoundsInPack: with PackFrozenWeights, a
// frozen fp32 W on a bf16 GEMM that rounds its operands as it packs them
// (each native bf16 GEMM that runs here, the Go models everywhere) gets
// no bf16 copy in the graph, as in Builder.linear, and the fused head
// computes the lowered copy's bits, and those of the same W stored in
// bf16 (Param16): all three pack the same bf16 values, rounded to nearest
// even once, into the same kernel. Its products all run on that GEMM, as
// many as before, none on the fp32 one, with the logits in bf16 still.
// Where the rule does not hold (no packer, another policy, a trained W),
// PackFrozenWeights changes neither the graph nor a bit.
func TestLMHeadLossFrozenFP32WeightRoundsInPack(t *testing.T) {
	be := blas.Native{Workers: 2}
	for _, g := range realBF16Gemmers(t, 2) {
		nb, ok := g.(*blas.NativeBF16)
		if !ok {
			continue // oneDNN takes bf16 bits, packing nothing itself
		}
		for _, chunk := range []int{0, 4} {
			for _, seeded := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/chunk %d/seeded %v", nb.Name(), chunk, seeded), func(t *testing.T) {
					run := func(weight string, packFrozen bool) (headRun, int64) {
						pc := &productCounter{NativeBF16: nb}
						c := headCase{format: amp.BF16, weight: weight, fused: true, seeded: seeded, chunk: chunk, workers: 2, bf16: pc, packFrozen: packFrozen}
						return runHead(t, be, c), pc.calls.Load()
					}
					lowered, nLowered := run("frozen", false)
					packed, nPacked := run("frozen", true)
					bits16, _ := run("bf16 bits", true)
					if lowered.wCopies != 1 || packed.wCopies != 0 {
						t.Fatalf("W has %d copies in the graph lowered, %d packing it; want 1 and 0", lowered.wCopies, packed.wCopies)
					}
					if msg := sameHeadBits(packed, lowered); msg != "" {
						t.Fatalf("packing the fp32 W against its lowered copy: %s", msg)
					}
					if msg := sameHeadBits(packed, bits16); msg != "" {
						t.Fatalf("packing the fp32 W against its bf16 bits: %s", msg)
					}
					want := 2 * headProducts(headCase{weight: "frozen", seeded: seeded, chunk: chunk}) // runHead runs twice
					if nPacked != want || nLowered != want {
						t.Errorf("%d products on the bf16 GEMM packing W, %d on its lowered copy; want %d", nPacked, nLowered, want)
					}
					if packed.gemms != 0 || lowered.gemms != 0 {
						t.Errorf("%d products on the fp32 GEMM packing W, %d on its lowered copy; want none", packed.gemms, lowered.gemms)
					}
					if packed.rounded != lowered.rounded || packed.under != lowered.under {
						t.Errorf("rounded %d gradient values, %d underflowed; lowered %d, %d", packed.rounded, packed.under, lowered.rounded, lowered.under)
					}
					if packed.logitsFm != amp.BF16 || lowered.logitsFm != amp.BF16 {
						t.Errorf("logits in %v packing W, %v on its lowered copy; want bf16", packed.logitsFm, lowered.logitsFm)
					}
				})
			}
		}
	}
	for _, c := range []headCase{
		{format: amp.BF16, weight: "frozen", bf16: &widenGemmer{be: be}}, // a bf16 GEMM that takes bits, packing nothing
		{format: amp.BF16, weight: "frozen"},                             // emulated
		{format: amp.FP16, weight: "frozen", bf16: blas.NewNativeBF16Go(2)},
		{format: amp.BF16, weight: "trainable", bf16: blas.NewNativeBF16Go(2)},
	} {
		name := fmt.Sprintf("%v/%s/bf16 GEMM %v", c.format, c.weight, c.bf16 != nil)
		t.Run(name, func(t *testing.T) {
			c.fused, c.seeded, c.chunk, c.workers = true, true, 4, 2
			off := runHead(t, be, c)
			c.packFrozen = true
			on := runHead(t, be, c)
			if on.wCopies != off.wCopies || on.wCopies == 0 {
				t.Fatalf("%d nodes of W's shape with PackFrozenWeights, %d without; want the same, its lowered copy among them", on.wCopies, off.wCopies)
			}
			if msg := sameHeadBits(on, off); msg != "" {
				t.Fatalf("PackFrozenWeights changed a result: %s", msg)
			}
			if on.gemms != off.gemms || on.logitsFm != off.logitsFm {
				t.Errorf("%d fp32 products, logits in %v with PackFrozenWeights; %d, %v without", on.gemms, on.logitsFm, off.gemms, off.logitsFm)
			}
		})
	}
}
