package vulkan

import (
	"strings"
	"testing"
)

// TestRecorderFlush records chains of dependent commands (x ← x + 1·y,
// each reading the previous one's result) with Flush after every few, and
// checks the values Submit leaves against the closed form (y = 1: x
// counts the commands), the command counts, a batch whose last command
// was flushed, Discard after a flush (the flushed commands' effects stay,
// the rest is dropped, and the next batch starts clean) and Time refusing
// a batch in flight.
func TestRecorderFlush(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	const n = 4099 // not a multiple of any workgroup size
	x, err := d.NewBuffer(4 * n)
	must(t, err)
	defer x.Free()
	y, err := d.NewBuffer(4 * n)
	must(t, err)
	defer y.Free()
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	must(t, y.WriteFloat32(0, ones))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	check := func(want float32) {
		t.Helper()
		got := make([]float32, n)
		must(t, x.ReadFloat32(0, got))
		for i, v := range got {
			if v != want {
				t.Fatalf("x[%d] = %v, want %v", i, v, want)
			}
		}
	}
	for _, tc := range []struct {
		commands, every int
	}{{40, 1}, {40, 7}, {40, 40}, {40, 0}, {3, 2}} {
		must(t, x.WriteFloat32(0, make([]float32, n)))
		for i := range tc.commands {
			must(t, ks.AddScaled(r, x, y, x, n, 1, false, NoRounding))
			if tc.every > 0 && (i+1)%tc.every == 0 {
				must(t, r.Flush())
				if r.Unflushed() != 0 || r.Len() != i+1 {
					t.Fatalf("after a flush at %d commands: Unflushed %d, Len %d", i+1, r.Unflushed(), r.Len())
				}
			}
		}
		must(t, r.Submit())
		if r.Len() != 0 || r.Unflushed() != 0 {
			t.Fatalf("after Submit: Len %d, Unflushed %d", r.Len(), r.Unflushed())
		}
		check(float32(tc.commands))
	}
	// Discard after a flush: the 5 flushed commands ran, the 3 after
	// them did not.
	must(t, x.WriteFloat32(0, make([]float32, n)))
	for i := range 8 {
		must(t, ks.AddScaled(r, x, y, x, n, 1, false, NoRounding))
		if i == 4 {
			must(t, r.Flush())
			if err := r.Time(func(BatchTime) {}); err == nil || !strings.Contains(err.Error(), "being recorded") {
				t.Errorf("Time with a flushed batch in flight: %v", err)
			}
		}
	}
	r.Discard()
	check(5)
	must(t, ks.AddScaled(r, x, y, x, n, 1, false, NoRounding))
	must(t, r.Submit())
	check(6)
	// A Flush with nothing new recorded, and a Submit with nothing
	// recorded, do nothing.
	must(t, r.Flush())
	must(t, r.Submit())
	check(6)
}
