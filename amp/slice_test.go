package amp

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestRoundExhaustive checks Round and RoundSlice (the AVX2 body and its
// scalar tail) of both formats bit for bit against fastRef, the float64
// reference that TestReferencesAgree ties to the exact big.Float one. With
// MIXTUNE_EXHAUSTIVE=1 it checks every float32 input (4.3 billion; about
// 75 s on 2 cores, 145 s of CPU), else a stride through all of them; both
// add every input near the formats' edges (ties, overflow, the subnormal
// boundary).
func TestRoundExhaustive(t *testing.T) {
	stride := uint64(97)
	if os.Getenv("MIXTUNE_EXHAUSTIVE") == "1" {
		stride = 1
	}
	var edges []uint32
	for _, edge := range []float32{65504, 65520, 65536, 1.0 / (1 << 14), 1.0 / (1 << 24), 1.0 / (1 << 25), 1, 2, 1e-8, float32(math.Inf(1))} {
		b := math.Float32bits(edge)
		for d := uint32(0); d < 1<<14; d++ {
			edges = append(edges, b+d, b-d, (b+d)|1<<31, (b-d)|1<<31)
		}
	}
	const block = 1<<16 + 5 // not a multiple of 8: the vector tail runs too
	inputs := (1<<32 + stride - 1) / stride
	blocks := int((inputs + block - 1) / block)
	var next atomic.Int64
	var failed atomic.Bool
	var failOnce sync.Once
	var failure string
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := make([]float32, 0, block)
			b16, h16 := make([]float32, block), make([]float32, block)
			for {
				k := int(next.Add(1)) - 1
				if k > blocks || failed.Load() {
					return
				}
				in = in[:0]
				if k == blocks { // the edges, as one more block of work
					for _, u := range edges {
						in = append(in, math.Float32frombits(u))
					}
				} else {
					for i := uint64(k) * block; i < min(uint64(k+1)*block, inputs); i++ {
						in = append(in, math.Float32frombits(uint32(i*stride)))
					}
				}
				if msg := checkRoundings(in, b16, h16); msg != "" {
					failOnce.Do(func() { failure = msg })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	if failure != "" {
		t.Fatal(failure)
	}
}

// checkRoundings rounds in (len ≤ len(b16)) with both formats' Round and
// RoundSlice and compares with fastRef; it returns the first difference.
func checkRoundings(in, b16, h16 []float32) string {
	for len(in) > 0 {
		n := min(len(in), len(b16))
		copy(b16, in[:n])
		copy(h16, in[:n])
		BF16.RoundSlice(b16[:n])
		FP16.RoundSlice(h16[:n])
		for i, x := range in[:n] {
			if w := fastRef(refBF16, x); !sameRounding(BF16.Round(x), w) || !sameRounding(b16[i], w) {
				return mismatch(BF16, x, BF16.Round(x), b16[i], w)
			}
			if w := fastRef(refFP16, x); !sameRounding(FP16.Round(x), w) || !sameRounding(h16[i], w) {
				return mismatch(FP16, x, FP16.Round(x), h16[i], w)
			}
		}
		in = in[n:]
	}
	return ""
}

func mismatch(f Format, x, scalar, slice, want float32) string {
	return fmt.Sprintf("%v: %#08x (%g) rounds to %#08x (Round) and %#08x (RoundSlice), reference %#08x",
		f, math.Float32bits(x), x, math.Float32bits(scalar), math.Float32bits(slice), math.Float32bits(want))
}

func BenchmarkRoundSlice(b *testing.B) {
	xs := make([]float32, 1<<20)
	for i := range xs {
		xs[i] = float32(i) * 1.37e-3
	}
	for _, f := range []Format{BF16, FP16} {
		b.Run(f.String(), func(b *testing.B) {
			b.SetBytes(4 << 20)
			for b.Loop() {
				f.RoundSlice(xs)
			}
		})
	}
}

func BenchmarkUnderflows(b *testing.B) {
	xs := make([]float32, 1<<20)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range xs {
		xs[i] = float32(rng.NormFloat64() * 1e-6) // gradient-like: a share underflows in fp16
	}
	for _, f := range []Format{BF16, FP16} {
		b.Run(f.String(), func(b *testing.B) {
			b.SetBytes(4 << 20)
			for b.Loop() {
				f.Underflows(xs)
			}
		})
	}
}
