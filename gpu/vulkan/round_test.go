package vulkan

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// roundInputs are the float32 bit patterns the rounding kernels are
// checked on: signed zeros, Inf, quiet and signalling NaNs with payloads,
// the extremes of both formats, every tie (and its neighbours) just below
// each bf16 value and near each fp16 value, subnormals of both, and random
// patterns.
func roundInputs(random int) []uint32 {
	in := []uint32{
		0, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001,
		0x7fbfffff, 0x7f812345, 0xffffffff, 0x7f7fffff, 0xff7fffff, 0x00000001, 0x807fffff, 0x00800000,
		math.Float32bits(65504), math.Float32bits(65519.996), math.Float32bits(65520), math.Float32bits(-65520),
		math.Float32bits(0x1p-14), math.Float32bits(0x1p-24), math.Float32bits(0x1p-25), math.Float32bits(0x1.8p-25),
		math.Float32bits(0x1p-26), math.Float32bits(1), math.Float32bits(-1), math.Float32bits(1.00390625),
	}
	for h := range uint32(1 << 16) {
		// bf16: below the tie, the tie, above it.
		in = append(in, h<<16|0x7fff, h<<16|0x8000, h<<16|0x8001)
		// fp16: the tie between h and h+1 (and its neighbours) for finite h.
		if f := amp.FP16.FromBits16(uint16(h)); !math.IsInf(float64(f), 0) && !math.IsNaN(float64(f)) && h&0x7fff != 0x7bff {
			g := amp.FP16.FromBits16(uint16(h + 1))
			mid := math.Float32bits(float32((float64(f) + float64(g)) / 2)) // exact: one more bit
			in = append(in, mid-1, mid, mid+1)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range random {
		in = append(in, rng.Uint32())
	}
	return in
}

// TestRound16 checks the rounding kernels bit for bit against amp's
// Bits16 (bf16 and fp16), including NaN payloads.
func TestRound16(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	random := 300000
	if testing.Short() {
		random = 20000
	}
	in := roundInputs(random)
	in = append(in, 0x3f800000) // an odd count: the last word's high half
	if len(in)%2 == 0 {
		in = in[:len(in)-1]
	}
	n := len(in)
	xs := make([]float32, n)
	for i, u := range in {
		xs[i] = math.Float32frombits(u)
	}
	X, err := d.NewBuffer(4 * n)
	must(t, err)
	defer X.Free()
	Y, err := d.NewBuffer(4 * ((n + 1) / 2))
	must(t, err)
	defer Y.Free()
	must(t, X.WriteFloat32(0, xs))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for _, h := range []Half{BF16, FP16} {
		f := amp.BF16
		if h == FP16 {
			f = amp.FP16
		}
		must(t, ks.Round16(r, h, X, Y, n))
		must(t, r.Submit())
		got := make([]uint16, n+1)
		must(t, Y.ReadUint16(0, got))
		bad := 0
		for i, u := range in {
			if want := f.Bits16(math.Float32frombits(u)); got[i] != want {
				if bad < 10 {
					t.Errorf("%s: %#08x (%g) → %#04x, want %#04x", h, u, math.Float32frombits(u), got[i], want)
				}
				bad++
			}
		}
		if got[n] != 0 {
			t.Errorf("%s: the last word's unused high half is %#04x, want 0", h, got[n])
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d values differ from amp", h, bad, n)
		}
		t.Logf("%s: %d values bit-identical to amp.%s.Bits16", h, n-bad, map[Half]string{BF16: "BF16", FP16: "FP16"}[h])
	}
}

// TestRoundInPlace checks Kernels.Round (elementwise.comp's rounding that
// keeps values in fp32: every rounding point of the Vulkan engine) bit
// for bit against amp's Round on the same inputs as TestRound16, NaN
// payloads included.
func TestRoundInPlace(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	random := 300000
	if testing.Short() {
		random = 20000
	}
	in := roundInputs(random)
	n := len(in)
	xs := make([]float32, n)
	for i, u := range in {
		xs[i] = math.Float32frombits(u)
	}
	X, err := d.NewBuffer(4 * n)
	must(t, err)
	defer X.Free()
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for _, c := range []struct {
		round Rounding
		f     amp.Format
	}{{RoundBF16, amp.BF16}, {RoundFP16, amp.FP16}} {
		must(t, X.WriteFloat32(0, xs))
		must(t, ks.Round(r, X, n, c.round))
		must(t, r.Submit())
		got := make([]float32, n)
		must(t, X.ReadFloat32(0, got))
		bad := 0
		for i, x := range xs {
			if want := c.f.Round(x); math.Float32bits(got[i]) != math.Float32bits(want) {
				if bad < 10 {
					t.Errorf("%v: %#08x (%g) → %#08x, want %#08x", c.f, in[i], x, math.Float32bits(got[i]), math.Float32bits(want))
				}
				bad++
			}
		}
		if bad > 0 {
			t.Errorf("%v: %d of %d values differ from amp", c.f, bad, n)
		}
		t.Logf("%v: %d values bit-identical to amp.%v.Round", c.f, n-bad, c.f)
	}
}
