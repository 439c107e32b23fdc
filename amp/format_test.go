package amp

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/x448/float16"
)

func TestRoundEdgeCases(t *testing.T) {
	inf := float32(math.Inf(1))
	p2 := func(e int) float32 { return float32(math.Ldexp(1, e)) }
	tests := []struct {
		name string
		f    Format
		in   float32
		want float32
	}{
		{"fp32 identity", FP32, 0.1, 0.1},
		{"fp16 max finite", FP16, 65504, 65504},
		{"fp16 just below the overflow tie", FP16, 65519.996, 65504},
		{"fp16 65520 ties to even: overflow", FP16, 65520, inf},
		{"fp16 -65520 overflows to -Inf", FP16, -65520, -inf},
		{"fp16 smallest subnormal", FP16, p2(-24), p2(-24)},
		{"fp16 half the smallest subnormal ties to zero", FP16, p2(-25), 0},
		{"fp16 three quarters of it rounds up", FP16, 3 * p2(-26), p2(-24)},
		{"fp16 1+2^-11 ties to even (down)", FP16, 1 + p2(-11), 1},
		{"fp16 1+3*2^-11 ties to even (up)", FP16, 1 + 3*p2(-11), 1 + p2(-9)},
		{"fp16 +Inf", FP16, inf, inf},
		{"fp16 -Inf", FP16, -inf, -inf},
		{"bf16 1+2^-8 ties to even (down)", BF16, 1 + p2(-8), 1},
		{"bf16 1+3*2^-8 ties to even (up)", BF16, 1 + 3*p2(-8), 1 + p2(-6)},
		{"bf16 keeps fp32's range", BF16, 1e38, 9.969209968386869e37},
		{"bf16 fp32 max rounds to Inf", BF16, math.MaxFloat32, inf},
		{"bf16 smallest fp32 subnormal ties to zero", BF16, math.SmallestNonzeroFloat32, 0},
		{"bf16 -Inf", BF16, -inf, -inf},
		{"bf16 65520 is representable nearby", BF16, 65520, 65536},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.Round(tc.in); got != tc.want {
				t.Errorf("%v.Round(%g) = %g, want %g", tc.f, tc.in, got, tc.want)
			}
		})
	}
}

func TestRoundSignedZeroAndNaN(t *testing.T) {
	negZero := float32(math.Copysign(0, -1))
	for _, f := range []Format{FP32, BF16, FP16} {
		if got := f.Round(negZero); got != 0 || !math.Signbit(float64(got)) {
			t.Errorf("%v.Round(-0) = %g (signbit %v), want -0", f, got, math.Signbit(float64(got)))
		}
		nan := float32(math.NaN())
		if got := f.Round(nan); got == got {
			t.Errorf("%v.Round(NaN) = %g, want NaN", f, got)
		}
		// A NaN whose payload sits only in the low 16 bits must not become Inf in bf16.
		lowPayload := math.Float32frombits(0x7f800001)
		if got := f.Round(lowPayload); got == got {
			t.Errorf("%v.Round(NaN with low payload) = %g, want NaN", f, got)
		}
	}
}

func TestBitsRoundTrip(t *testing.T) {
	for _, f := range []Format{BF16, FP16} {
		for b := 0; b < 1<<16; b++ {
			x := f.FromBits16(uint16(b))
			if x != x {
				continue // NaN payloads are not required to survive
			}
			if got := f.Bits16(x); got != uint16(b) {
				t.Fatalf("%v: bits %#04x -> %g -> %#04x", f, b, x, got)
			}
			if r := f.Round(x); r != x && !(r == 0 && x == 0) {
				t.Fatalf("%v: representable %g rounds to %g", f, x, r)
			}
		}
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"fp32": FP32, "float32": FP32, "BF16": BF16, "bfloat16": BF16, "fp16": FP16, "half": FP16} {
		got, err := ParseFormat(in)
		if err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseFormat("fp8"); err == nil || err.Error() != `unknown precision "fp8" (want fp32, bf16 or fp16)` {
		t.Errorf("ParseFormat(fp8) error = %v", err)
	}
}

// Underflows agrees with Round: a value counts exactly when it is nonzero
// and rounds to ±0. Checked on every bit pattern around both thresholds
// and on random ones, both signs.
func TestUnderflowsMatchesRound(t *testing.T) {
	var bits []uint32
	for a := uint32(0); a <= 0x40000; a++ { // bf16's threshold, 2^-134, is 0x8000
		bits = append(bits, a)
	}
	for a := uint32(0x32ff0000); a <= 0x33010000; a++ { // fp16's, 2^-25
		bits = append(bits, a)
	}
	near := len(bits)
	rng := rand.New(rand.NewPCG(7, 8))
	for range 1 << 20 {
		bits = append(bits, rng.Uint32()&0x7fffffff)
	}
	bits = append(bits, 0x7f800000, 0x7fc00000) // Inf, NaN
	for _, f := range []Format{FP32, BF16, FP16} {
		for _, sign := range []uint32{0, 0x80000000} {
			want := 0
			xs := make([]float32, len(bits))
			for i, b := range bits {
				xs[i] = math.Float32frombits(b | sign)
				if xs[i] != 0 && f.Round(xs[i]) == 0 {
					want++
				}
			}
			if got := f.Underflows(xs); got != want { // the vector path, on amd64
				t.Errorf("%v sign %x: Underflows %d, Round sends %d to zero", f, sign, got, want)
			}
			scalar := 0 // slices shorter than a vector take the scalar path
			for i := 0; i < len(xs); i += 7 {
				scalar += f.Underflows(xs[i:min(i+7, len(xs))])
			}
			if scalar != want {
				t.Errorf("%v sign %x: Underflows by 7s %d, Round sends %d to zero", f, sign, scalar, want)
			}
			for i, b := range bits[:near] { // and value by value near the thresholds
				x := xs[i : i+1]
				if got, w := f.Underflows(x), b != 0 && f.Round(x[0]) == 0; (got == 1) != w {
					t.Fatalf("%v %#08x: Underflows %d, rounds to zero %v", f, b|sign, got, w)
				}
			}
		}
	}
	if n := FP16.Underflows([]float32{0x1p-25, 0x1.000002p-25, 0x1p-24, -0x1p-26, 0}); n != 2 {
		t.Errorf("fp16 underflows of {2^-25, just above, 2^-24, -2^-26, 0} = %d, want 2", n)
	}
}

// The slice widening agrees with the float16 package and with
// bf16FromBits on all 65536 bit patterns (NaNs compared by bits).
func TestFromBits16SliceAllValues(t *testing.T) {
	src := make([]uint16, 1<<16)
	for i := range src {
		src[i] = uint16(i)
	}
	dst := make([]float32, len(src))
	for _, f := range []Format{FP16, BF16} {
		f.FromBits16Slice(dst, src)
		for i, h := range src {
			want := bf16FromBits(h)
			if f == FP16 {
				want = float16.Frombits(h).Float32()
			}
			if math.Float32bits(dst[i]) != math.Float32bits(want) {
				t.Fatalf("%v %#04x: got %v (%#08x), want %v (%#08x)", f, h, dst[i], math.Float32bits(dst[i]), want, math.Float32bits(want))
			}
		}
	}
}
