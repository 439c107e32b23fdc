package vulkan

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// ScaleCount writes Scale's bits and counts, in 64 bits, the nonzero
// values its rounding sends to zero: amp's Format.Underflows on the same
// values (the CPU's count), over values around each format's threshold,
// zeros of both signs, subnormals, infinities and NaNs, across many
// workgroups; a count that passes 2^32 carries into the high word.
func TestScaleCount(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	rng := rand.New(rand.NewPCG(81, 83))
	const n = 300_000
	x := make([]float32, n)
	for i := range x {
		switch i % 50 {
		case 0:
			x[i] = 0
		case 1:
			x[i] = float32(math.Copysign(0, -1))
		case 2:
			x[i] = math.Float32frombits(uint32(rng.IntN(1 << 23))) // subnormal
		case 3:
			x[i] = float32(math.Inf(1 - 2*(i/50%2)))
		case 4:
			x[i] = float32(math.NaN())
		default: // 2^-40 .. 2^-10, both signs
			x[i] = float32(math.Ldexp(1+rng.Float64(), -10-rng.IntN(31)) * float64(1-2*rng.IntN(2)))
		}
	}
	buf := func() *Buffer {
		b, err := d.NewBuffer(4 * n)
		must(t, err)
		t.Cleanup(b.Free)
		return b
	}
	xb, want, got := buf(), buf(), buf()
	must(t, xb.WriteFloat32(0, x))
	counter, err := d.NewBuffer(8)
	must(t, err)
	defer counter.Free()
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	for _, tc := range []struct {
		round Rounding
		f     amp.Format
		start uint64
	}{
		{RoundFP16, amp.FP16, 0},
		{RoundFP16, amp.FP16, math.MaxUint32 - 10}, // the count carries
		{RoundBF16, amp.BF16, 0},
	} {
		var start [8]byte
		binary.LittleEndian.PutUint64(start[:], tc.start)
		must(t, counter.Write(0, start[:]))
		must(t, ks.Scale(r, xb, want, n, 1, tc.round))
		must(t, ks.ScaleCount(r, xb, got, n, 1, tc.round, counter))
		must(t, r.Submit())
		a, b := make([]float32, n), make([]float32, n)
		must(t, want.ReadFloat32(0, a))
		must(t, got.ReadFloat32(0, b))
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%v: value %d: %v counting, %v not", tc.round, i, b[i], a[i])
			}
		}
		// (a scale other than 1 could flush the subnormals on a driver
		// that does, where amp keeps them)
		scaled := x
		var c [8]byte
		must(t, counter.Read(0, c[:]))
		under := binary.LittleEndian.Uint64(c[:]) - tc.start
		if w := uint64(tc.f.Underflows(scaled)); under != w || w == 0 && tc.round == RoundFP16 {
			t.Errorf("%v: %d underflows counted, amp counts %d", tc.round, under, w)
		} else {
			t.Logf("%v: %d of %d values underflow", tc.round, under, n)
		}
	}
}
