package vulkan

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestTimedBatches records batches of chained GEMMs, elementwise scales
// and copies with timing on and off. On, every command comes back once,
// in order, with its kernel, scope and (GEMMs) 2·M·N·K flops; its time is
// non-negative; the times sum to at most the command buffer's, which is
// at most the host's time around Submit; and the batch writes exactly
// 2 + 2·commands timestamps (over several query pools where it needs
// them). Off, it writes none. Either way the results are the closed
// form's, bit for bit: timing adds timestamp writes, never changes a
// dispatch.
//
// Bounds: a command's and the batch's times are whole ticks times the
// period, the ticks of the commands' disjoint intervals summing to at
// most the batch's, so the float sums differ only by rounding (1e-9
// relative); the GPU's clock may run apart from the host's by a few ppm,
// so the wall bound allows 1e-3 relative and two ticks.
func TestTimedBatches(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	if d.timestampBits == 0 {
		t.Skipf("%s writes no timestamps on its compute queue", d.Physical.Name)
	}
	const n = 16
	cases := []struct {
		name   string
		gemms  int // chained x ← 2·I·x
		scales int // x ← 1·x, copied there and back
		copies bool
		timed  bool
	}{
		{"one GEMM", 1, 0, false, true},
		{"GEMMs, scales and copies", 3, 4, true, true},
		{"more timestamps than a query pool", 2, queriesPerPool/2 + 10, false, true},
		{"untimed", 3, 4, true, false},
	}
	eye := make([]float32, n*n)
	for i := range n {
		eye[i*n+i] = 1
	}
	x0 := make([]float32, n*n)
	for i := range x0 {
		x0[i] = float32(i) - 100
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			I, x, y := newF32(t, d, eye), newF32(t, d, x0), newF32(t, d, make([]float32, n*n))
			r, err := d.NewRecorder()
			must(t, err)
			defer r.Close()
			var batches []BatchTime
			if c.timed {
				must(t, r.Time(func(b BatchTime) { batches = append(batches, b) }))
			}
			var want []CommandTime // kernel, scope and flops of each command, in order
			for i := range c.gemms {
				s := Scope{Kind: "gemm step", NodeID: i, Node: "gemm node"}
				r.SetScope(s)
				must(t, ks.Gemm(r, GemmArgs{M: n, N: n, K: n, Alpha: 2, A: I, B: x, C: y, Lda: n, Ldb: n, Ldc: n}))
				want = append(want, CommandTime{Kernel: ks.gemmFor(GemmArgs{}).f32.name, Scope: s, Flops: 2 * n * n * n})
				must(t, r.Copy(x, 0, y, 0, 4*n*n))
				want = append(want, CommandTime{Kernel: "copy", Scope: s})
			}
			r.SetScope(Scope{Kind: "scales"})
			for range c.scales {
				must(t, ks.Scale(r, x, y, n*n, 1, NoRounding))
				want = append(want, CommandTime{Kernel: "elementwise.spv", Scope: Scope{Kind: "scales"}})
				must(t, r.Copy(x, 0, y, 0, 4*n*n))
				want = append(want, CommandTime{Kernel: "copy", Scope: Scope{Kind: "scales"}})
			}
			if r.Len() != len(want) {
				t.Fatalf("recorder holds %d commands, want %d", r.Len(), len(want))
			}
			t0 := time.Now()
			must(t, r.Submit())
			wall := float64(time.Since(t0).Nanoseconds())
			got := make([]float32, n*n)
			must(t, x.ReadFloat32(0, got))
			for i, v := range got {
				if w := x0[i] * float32(int(1)<<c.gemms); v != w {
					t.Fatalf("x[%d] = %g, want %g", i, v, w)
				}
			}
			if !c.timed {
				if r.stamps != 0 || r.timing != nil {
					t.Fatalf("untimed: %d timestamp writes recorded, timer %v", r.stamps, r.timing)
				}
				return
			}
			if want := 2 + 2*len(want); r.stamps != want {
				t.Errorf("%d timestamp writes recorded, want %d", r.stamps, want)
			}
			if len(batches) != 1 {
				t.Fatalf("%d batches timed, want 1", len(batches))
			}
			b := batches[0]
			if len(b.Commands) != len(want) {
				t.Fatalf("%d commands timed, want %d", len(b.Commands), len(want))
			}
			sum := 0.0
			for i, cmd := range b.Commands {
				w := want[i]
				if cmd.Kernel != w.Kernel || cmd.Scope != w.Scope || cmd.Flops != w.Flops {
					t.Errorf("command %d: %s %+v %g flops, want %s %+v %g", i, cmd.Kernel, cmd.Scope, cmd.Flops, w.Kernel, w.Scope, w.Flops)
				}
				if !(cmd.Nanos >= 0) || math.IsInf(cmd.Nanos, 0) {
					t.Errorf("command %d (%s): %v ns", i, cmd.Kernel, cmd.Nanos)
				}
				sum += cmd.Nanos
			}
			period := float64(d.Physical.TimestampPeriod)
			if !(sum <= b.Nanos*(1+1e-9)) {
				t.Errorf("commands' times sum to %v ns, more than the batch's %v", sum, b.Nanos)
			}
			if !(b.Nanos <= wall*(1+1e-3)+2*period) {
				t.Errorf("batch took %v ns on the GPU, more than the %v ns around Submit", b.Nanos, wall)
			}
			t.Logf("%d commands: %.0f ns in commands, %.0f ns on the GPU, %.0f ns around Submit", len(want), sum, b.Nanos, wall)

			// Off again: a batch writes no timestamps and reaches no sink.
			must(t, r.Time(nil))
			before := r.stamps
			must(t, ks.Scale(r, x, y, n*n, 1, NoRounding))
			must(t, r.Submit())
			if r.stamps != before || len(batches) != 1 {
				t.Errorf("after Time(nil): %d more timestamp writes, %d batches timed", r.stamps-before, len(batches))
			}
		})
	}
}

func newF32(t *testing.T, d *Device, xs []float32) *Buffer {
	t.Helper()
	b, err := d.NewBuffer(4 * len(xs))
	must(t, err)
	t.Cleanup(b.Free)
	must(t, b.WriteFloat32(0, xs))
	return b
}

// TestTimeMidBatch: timing cannot change while a batch is recorded, and
// a scope lasts until the batch ends.
func TestTimeMidBatch(t *testing.T) {
	e, ks := openKernels(t)
	d := e.dev
	x := newF32(t, d, make([]float32, 8))
	r, err := d.NewRecorder()
	must(t, err)
	defer r.Close()
	r.SetScope(Scope{Kind: "k"})
	must(t, ks.Scale(r, x, x, 8, 1, NoRounding))
	if err := r.Time(func(BatchTime) {}); err == nil || !strings.Contains(err.Error(), "being recorded") {
		t.Errorf("Time while recording: %v", err)
	}
	must(t, r.Submit())
	if r.scope != (Scope{}) {
		t.Errorf("scope %+v after the batch, want none", r.scope)
	}
}

// TestProfileAdd sums hand-made batches: rows by kernel and kind, the
// longest first, the slowest node of each, and the totals.
func TestProfileAdd(t *testing.T) {
	q := Scope{Kind: "linear", Node: "q"}
	k := Scope{Kind: "linear", Node: "k"}
	var p Profile
	p.Add(BatchTime{Nanos: 100, Commands: []CommandTime{
		{Kernel: "gemm_f32.spv", Scope: q, Flops: 8, Nanos: 30},
		{Kernel: "gemm_f32.spv", Scope: k, Flops: 8, Nanos: 40},
		{Kernel: "rmsnorm.spv", Scope: Scope{Kind: "rmsnorm", Node: "n"}, Nanos: 5},
	}})
	p.Add(BatchTime{Nanos: 20, Commands: []CommandTime{
		{Kernel: "adamw.spv", Scope: Scope{Kind: "optimizer step"}, Nanos: 6},
		{Kernel: "gemm_f32.spv", Scope: Scope{Kind: "linear.dx", Node: "q"}, Flops: 4, Nanos: 3},
		{Kernel: "adamw.spv", Scope: Scope{Kind: "optimizer step"}, Nanos: 6},
	}})
	want := []ProfileRow{
		{Kernel: "gemm_f32", Kind: "linear", Calls: 2, Nanos: 70, Flops: 16, SlowestNode: "k", SlowestNanos: 40},
		{Kernel: "adamw", Kind: "optimizer step", Calls: 2, Nanos: 12},
		{Kernel: "rmsnorm", Kind: "rmsnorm", Calls: 1, Nanos: 5, SlowestNode: "n", SlowestNanos: 5},
		{Kernel: "gemm_f32", Kind: "linear.dx", Calls: 1, Nanos: 3, Flops: 4, SlowestNode: "q", SlowestNanos: 3},
	}
	got := p.Rows()
	if len(got) != len(want) {
		t.Fatalf("%d rows %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if p.Batches != 2 || p.GPUNanos != 120 || p.CommandNanos != 90 {
		t.Errorf("batches %d, GPU %v ns, commands %v ns; want 2, 120, 90", p.Batches, p.GPUNanos, p.CommandNanos)
	}
}

// BenchmarkTimedBatch is a batch of 256 small dispatches recorded and
// submitted untimed and timed: what the timestamps cost a step.
func BenchmarkTimedBatch(b *testing.B) {
	e, ks := openKernels(b)
	d := e.dev
	if d.timestampBits == 0 {
		b.Skipf("%s writes no timestamps on its compute queue", d.Physical.Name)
	}
	x, err := d.NewBuffer(4 * 1024)
	must(b, err)
	defer x.Free()
	for _, timed := range []bool{false, true} {
		b.Run(map[bool]string{false: "untimed", true: "timed"}[timed], func(b *testing.B) {
			r, err := d.NewRecorder()
			must(b, err)
			defer r.Close()
			if timed {
				must(b, r.Time(func(BatchTime) {}))
			}
			for b.Loop() {
				for range 256 {
					must(b, ks.Scale(r, x, x, 1024, 1, NoRounding))
				}
				must(b, r.Submit())
			}
		})
	}
}
