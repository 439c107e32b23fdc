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

// bf16Nearest is bf16 rounding from its definition, independent of the
// bit trick the encoders use: of the two bf16 values around a finite x
// (its truncation and the next one away from zero) the nearer in float64,
// a tie to the even one; past the largest bf16 a value that rounds up
// becomes Inf (the next bit pattern). A NaN stays NaN, quiet, its sign
// and leading payload kept.
func bf16Nearest(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	lo := uint16(u >> 16)
	if u&0xffff == 0 {
		return lo
	}
	hi := lo + 1
	dlo := math.Abs(float64(x) - float64(math.Float32frombits(uint32(lo)<<16)))
	var dhi float64
	if hi&0x7fff == 0x7f80 { // past the largest finite bf16: measure to 2^128
		dhi = math.Abs(math.Ldexp(math.Copysign(1, float64(x)), 128) - float64(x))
	} else {
		dhi = math.Abs(float64(math.Float32frombits(uint32(hi)<<16)) - float64(x))
	}
	switch {
	case dlo < dhi:
		return lo
	case dhi < dlo:
		return hi
	case lo&1 == 0:
		return lo
	}
	return hi
}

// Bits16Slice encodes as the definition rounds: every bf16 bit pattern
// as the high half, with low halves that truncate, tie and carry (into
// the exponent, into Inf, through NaN payloads), at offsets that leave
// a scalar tail and start the vector part misaligned; fp16 as Bits16.
func TestBits16Slice(t *testing.T) {
	lows := []uint32{0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4d2f}
	src := make([]float32, 0, 1<<16*len(lows))
	for hi := range uint32(1 << 16) {
		for _, lo := range lows {
			src = append(src, math.Float32frombits(hi<<16|lo))
		}
	}
	for _, off := range []int{0, 3} {
		s := src[off : len(src)-5]
		for _, f := range []Format{BF16, FP16} {
			dst := make([]uint16, len(s)+1)
			dst[len(s)] = 0xbeef
			f.Bits16Slice(dst, s)
			for i, x := range s {
				want := bf16Nearest(x)
				if f == FP16 {
					want = f.Bits16(x)
				}
				if dst[i] != want {
					t.Fatalf("%v, offset %d: %#08x encodes to %#04x, want %#04x", f, off, math.Float32bits(x), dst[i], want)
				}
			}
			if dst[len(s)] != 0xbeef {
				t.Fatalf("%v: wrote past len(src)", f)
			}
		}
	}
	for n := range 40 { // every length around the vector width
		x := src[1000 : 1000+n]
		dst := make([]uint16, n)
		BF16.Bits16Slice(dst, x)
		for i := range x {
			if want := bf16Nearest(x[i]); dst[i] != want {
				t.Fatalf("length %d: element %d encodes to %#04x, want %#04x", n, i, dst[i], want)
			}
		}
	}
	t.Logf("bf16 encoded in assembly on this CPU: %v", narrow16Fast(BF16, make([]uint16, 8), make([]float32, 8)) > 0)
}

func BenchmarkBits16Slice(b *testing.B) {
	src := make([]float32, 1<<16)
	for i := range src {
		src[i] = float32(i) * 0.37
	}
	dst := make([]uint16, len(src))
	b.SetBytes(int64(len(src)) * 4)
	for b.Loop() {
		BF16.Bits16Slice(dst, src)
	}
}
