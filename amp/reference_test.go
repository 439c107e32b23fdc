package amp

import (
	"encoding/json"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"sort"
	"testing"
)

// Two references for rounding a float32 to bf16 or fp16, neither sharing
// anything with format.go's bit recipes:
//
//   - bigRef defines the format from its parameters alone: it lists every
//     finite value as an exact big.Float (sign·significand·2^exponent, with
//     subnormals), finds the two neighbours of the exact input by binary
//     search, and picks the nearer by exact subtraction, a tie going to the
//     neighbour whose encoding is even, a value past the largest finite one
//     rounding as if the exponent range went on (so to ±Inf once it reaches
//     the midpoint to the next power of two). Slow: a few microseconds.
//   - fastRef rounds in float64 arithmetic: the quantum 2^(e−p+1) of the
//     input's binade (the subnormal one below the smallest normal), and the
//     FPU's own round-to-nearest-even of |x|/quantum to an integer by adding
//     and subtracting 2^52. A few nanoseconds, so it can check all 2^32
//     inputs (TestRoundExhaustive).
//
// TestReferencesAgree ties fastRef to bigRef, and amp's roundings to both,
// on a stratified sample: every float32 exponent with each sign, mantissas
// at and around every rounding boundary of both formats, ties, and random
// bit patterns.

// refFormat is a binary floating-point format: p significant bits
// (the implicit one included), normal exponents emin..emax.
type refFormat struct {
	f          Format
	p          int
	emin, emax int
	maxFinite  float64 // (2 − 2^(1−p))·2^emax
}

func newRefFormat(f Format, p, emin, emax int) refFormat {
	return refFormat{f: f, p: p, emin: emin, emax: emax, maxFinite: (2 - math.Ldexp(1, 1-p)) * math.Ldexp(1, emax)}
}

var (
	refBF16 = newRefFormat(BF16, 8, -126, 127)
	refFP16 = newRefFormat(FP16, 11, -14, 15)
)

// fastRef rounds x to the nearest value of r, ties to even; NaN stays NaN,
// ±0 and ±Inf stay themselves, overflow goes to ±Inf.
func fastRef(r refFormat, x float32) float32 {
	v := float64(x)
	a := math.Abs(v)
	if a == 0 || !(a <= math.MaxFloat64) { // ±0, ±Inf, NaN
		return x
	}
	e := int(math.Float64bits(a)>>52) - 1023 // float32 values are normal float64s
	e = max(e, r.emin)                       // subnormals share the smallest normal binade's quantum
	q := math.Float64frombits(uint64(e-(r.p-1)+1023) << 52)
	n := (a/q + 0x1p52) - 0x1p52 // a/q < 2^12 is exact; adding 2^52 rounds it to an integer, ties to even
	m := n * q
	if m > r.maxFinite {
		m = math.Inf(1)
	}
	return float32(math.Copysign(m, v))
}

// bigRef holds the format's positive finite values in increasing order,
// exactly, with their encodings.
type bigRef struct {
	r     refFormat
	vals  []*big.Float
	codes []int
	next  *big.Float // 2^(emax+1): where rounding past the largest value lands (as Inf)

	ties, overflows, subnormals int // what the inputs rounded so far exercised
}

const refPrec = 512 // enough for every difference of a float32 and a 16-bit value

func newBigRef(r refFormat) *bigRef {
	mbits := r.p - 1
	bias := r.emax
	b := &bigRef{r: r}
	for ef := 0; ef < 2*bias+1; ef++ { // exponent fields 0 (subnormal) .. 2·bias (largest normal)
		for m := 0; m < 1<<mbits; m++ {
			var sig, exp int
			if ef == 0 {
				sig, exp = m, 1-bias-mbits // 0.m · 2^(1−bias)
			} else {
				sig, exp = 1<<mbits+m, ef-bias-mbits // 1.m · 2^(ef−bias)
			}
			v := new(big.Float).SetPrec(refPrec).SetMantExp(new(big.Float).SetInt64(int64(sig)), exp)
			b.vals = append(b.vals, v)
			b.codes = append(b.codes, ef<<mbits|m)
		}
	}
	sort.SliceStable(b.vals, func(i, j int) bool { return b.vals[i].Cmp(b.vals[j]) < 0 }) // already sorted; not assumed
	b.next = new(big.Float).SetPrec(refPrec).SetMantExp(big.NewFloat(1), r.emax+1)
	return b
}

func (b *bigRef) round(x float32) float32 {
	if x != x {
		return x
	}
	if math.IsInf(float64(x), 0) || x == 0 {
		return x
	}
	a := new(big.Float).SetPrec(refPrec).SetFloat64(math.Abs(float64(x)))
	i := sort.Search(len(b.vals), func(i int) bool { return b.vals[i].Cmp(a) >= 0 }) // first value >= |x|
	var lo, hi *big.Float
	var loEven, hiEven bool
	switch {
	case i < len(b.vals) && b.vals[i].Cmp(a) == 0:
		return b.signed(b.vals[i], x)
	case i == len(b.vals): // past the largest finite value
		lo, hi = b.vals[i-1], b.next
		loEven, hiEven = b.codes[i-1]%2 == 0, true
	default: // i > 0: the zero encoding is the smallest value and |x| > 0
		lo, hi = b.vals[i-1], b.vals[i]
		loEven, hiEven = b.codes[i-1]%2 == 0, b.codes[i]%2 == 0
	}
	dlo := new(big.Float).SetPrec(refPrec).Sub(a, lo)
	dhi := new(big.Float).SetPrec(refPrec).Sub(hi, a)
	pick := lo
	c := dlo.Cmp(dhi)
	if c > 0 || c == 0 && hiEven && !loEven {
		pick = hi
	}
	if c == 0 {
		b.ties++
	}
	if pick == b.next {
		b.overflows++
		return float32(math.Copysign(math.Inf(1), float64(x)))
	}
	if pick.Cmp(new(big.Float).SetMantExp(big.NewFloat(1), b.r.emin)) < 0 {
		b.subnormals++
	}
	return b.signed(pick, x)
}

func (b *bigRef) signed(v *big.Float, x float32) float32 {
	f, acc := v.Float64()
	if acc != big.Exact {
		panic("16-bit value not exact in float64")
	}
	return float32(math.Copysign(f, float64(x)))
}

// sameRounding: equal bits, or both NaN.
func sameRounding(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || a != a && b != b
}

// referenceSample is the stratified sample: for each sign and each of the
// 256 float32 exponent fields, mantissas at and beside every rounding
// boundary of bf16 (16 dropped bits) and fp16 (13 dropped bits for normal
// fp16, up to 24 in its subnormal range), with kept parts both even and
// odd, plus random mantissas; then random bit patterns.
func referenceSample() []uint32 {
	rng := rand.New(rand.NewPCG(17, 29))
	var out []uint32
	for sign := uint32(0); sign < 2; sign++ {
		for ef := uint32(0); ef < 256; ef++ {
			add := func(m uint32) { out = append(out, sign<<31|ef<<23|m&0x7fffff) }
			for drop := 1; drop <= 23; drop++ { // a boundary drop bits down
				half := uint32(1) << (drop - 1)
				for _, kept := range []uint32{0, 1, 2, 3, 0x2aaaaa, 0x555555, 0x7fffff} {
					k := kept &^ (half<<1 - 1) // kept part, even or odd in its last kept bit
					for _, d := range []int32{-2, -1, 0, 1, 2} {
						add(uint32(int32(k|half) + d)) // the tie and its neighbours
					}
					add(k)
					add(k | (half<<1 - 1))
				}
			}
			for range 48 {
				add(rng.Uint32())
			}
		}
	}
	for range 1 << 15 {
		out = append(out, rng.Uint32())
	}
	return out
}

func TestReferencesAgree(t *testing.T) {
	sample := referenceSample()
	for _, r := range []refFormat{refBF16, refFP16} {
		b := newBigRef(r)
		if got, want := len(b.vals), (2*r.emax+1)<<(r.p-1); got != want {
			t.Fatalf("%v: %d finite values, want %d", r.f, got, want)
		}
		for _, u := range sample {
			x := math.Float32frombits(u)
			want := b.round(x)
			if got := fastRef(r, x); !sameRounding(got, want) {
				t.Fatalf("%v: fastRef(%#08x = %g) = %g (%#08x), big reference %g (%#08x)", r.f, u, x, got, math.Float32bits(got), want, math.Float32bits(want))
			}
			if got := r.f.Round(x); !sameRounding(got, want) {
				t.Fatalf("%v: Round(%#08x = %g) = %g (%#08x), big reference %g (%#08x)", r.f, u, x, got, math.Float32bits(got), want, math.Float32bits(want))
			}
			if got := r.f.FromBits16(r.f.Bits16(x)); !sameRounding(got, want) {
				t.Fatalf("%v: FromBits16(Bits16(%#08x = %g)) = %g, big reference %g", r.f, u, x, got, want)
			}
		}
		t.Logf("%v: %d inputs agree (%d exact ties, %d overflows to Inf, %d inexact inputs rounded to a subnormal or zero)", r.f, len(sample), b.ties, b.overflows, b.subnormals)
	}
}

// TestTorchConversions compares with PyTorch's own conversions
// (Tensor.to(torch.bfloat16) and .to(torch.float16) on the CPU), recorded
// by scripts/gen_amp_fixture.py for ~5900 inputs at the formats' edges:
// Bits16 must give PyTorch's bits and Round its value, NaNs compared as
// NaN (PyTorch returns one canonical NaN, mixtune keeps the sign and the
// high payload bits).
func TestTorchConversions(t *testing.T) {
	raw, err := os.ReadFile("testdata/torch_round.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		TorchVersion string      `json:"torch_version"`
		Rows         [][3]uint32 `json:"rows"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Rows) < 1000 {
		t.Fatalf("fixture has %d rows", len(fx.Rows))
	}
	nans := 0
	for _, row := range fx.Rows {
		x := math.Float32frombits(row[0])
		for i, f := range []Format{BF16, FP16} {
			want := uint16(row[1+i])
			wv := f.FromBits16(want)
			if x != x {
				nans += i // once per input
				if got := f.Round(x); got == got || wv == wv {
					t.Errorf("%v: NaN %#08x: Round %g, PyTorch %#04x", f, row[0], got, want)
				}
				continue
			}
			if got := f.Bits16(x); got != want {
				t.Errorf("%v: Bits16(%#08x = %g) = %#04x, PyTorch %#04x", f, row[0], x, got, want)
			}
			if got := f.Round(x); math.Float32bits(got) != math.Float32bits(wv) {
				t.Errorf("%v: Round(%#08x = %g) = %g, PyTorch %g", f, row[0], x, got, wv)
			}
		}
	}
	t.Logf("%d inputs agree with PyTorch %s in both formats (%d NaN inputs compared as NaN)", len(fx.Rows), fx.TorchVersion, nans)
}
