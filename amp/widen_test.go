package amp

import (
	"math"
	"testing"

	"github.com/x448/float16"
)

// Every 16-bit pattern widens to the float32 an independent definition
// gives, bit for bit: bf16 is the high half of a float32; fp16 is
// x448/float16's conversion (exact, NaNs quieted). The slices have odd
// lengths and offsets, so the assembly's 8-value body and the scalar tail
// are both exercised; on amd64 the hardware paths (AVX2 for bf16, F16C for
// fp16) are the ones under test.
func TestWidenAllValues(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	want := map[Format]func(uint16) uint32{
		BF16: func(h uint16) uint32 { return uint32(h) << 16 },
		FP16: func(h uint16) uint32 { return math.Float32bits(float16.Frombits(h).Float32()) },
	}
	for _, f := range []Format{BF16, FP16} {
		for _, off := range []int{0, 3} {
			s := src[off : len(src)-5]
			dst := make([]float32, len(s))
			f.FromBits16Slice(dst, s)
			for i, h := range s {
				if got, w := math.Float32bits(dst[i]), want[f](h); got != w {
					t.Fatalf("%v: %#04x widens to %#08x, want %#08x", f, h, got, w)
				}
			}
		}
	}
	t.Logf("hardware widening on this CPU: bf16 %v, fp16 %v", widen16Fast(BF16, make([]float32, 8), make([]uint16, 8)) > 0, widen16Fast(FP16, make([]float32, 8), make([]uint16, 8)) > 0)
}

func BenchmarkWiden(b *testing.B) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i * 7919)
	}
	dst := make([]float32, len(src))
	for _, f := range []Format{BF16, FP16} {
		b.Run(f.String(), func(b *testing.B) {
			b.SetBytes(int64(2 * len(src)))
			for i := 0; i < b.N; i++ {
				f.FromBits16Slice(dst, src)
			}
		})
	}
}
