package vulkan

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/internal/calcache"
)

func TestPickTile(t *testing.T) {
	for _, tc := range []struct {
		name string
		ts   []TileTiming
		want string
		ok   bool
	}{
		{"fastest", []TileTiming{{Tile: "a", Millis: 3}, {Tile: "b", Millis: 2}, {Tile: "c", Millis: 2.5}}, "b", true},
		{"a tie goes to the earlier", []TileTiming{{Tile: "a", Millis: 2}, {Tile: "b", Millis: 2}}, "a", true},
		{"errors left out", []TileTiming{{Tile: "a", Millis: 1, Error: "self-check"}, {Tile: "b", Millis: 4}}, "b", true},
		{"untimed left out", []TileTiming{{Tile: "a"}, {Tile: "b", Millis: 4}}, "b", true},
		{"none", []TileTiming{{Tile: "a", Error: "x"}}, "", false},
	} {
		got, ok := pickTile(tc.ts)
		if got.Tile != tc.want || ok != tc.ok {
			t.Errorf("%s: pickTile = %q, %v; want %q, %v", tc.name, got.Tile, ok, tc.want, tc.ok)
		}
	}
	s := sortedTimings([]TileTiming{{Tile: "a", Error: "x"}, {Tile: "b", Millis: 3}, {Tile: "c", Millis: 1}})
	if s[0].Tile != "c" || s[1].Tile != "b" || s[2].Tile != "a" {
		t.Errorf("sortedTimings = %+v", s)
	}
}

func TestAddShape(t *testing.T) {
	var shapes []GemmShape
	q := GemmArgs{M: 8, N: 16, K: 32, TransB: true, Operands: RoundBF16, B16: true, BHalf: BF16}
	shapes = AddShape(shapes, q)
	shapes = AddShape(shapes, GemmArgs{M: 8, N: 32, K: 16, Operands: RoundBF16})
	shapes = AddShape(shapes, q)
	q.B16 = false
	shapes = AddShape(shapes, q)
	if len(shapes) != 3 || shapes[0].Count != 2 || shapes[1].Count != 1 || shapes[2].Count != 1 {
		t.Fatalf("AddShape: %v", shapes)
	}
}

// TestChooseTileEmulated runs ChooseTile's measurement for real on the
// test device, over the emulated tensor-core tiles (the same kernels, the
// fragments emulated; what their times are does not matter, only that
// the choice follows them):
//   - every candidate timed, the fastest put in use;
//   - its figures are the tuned shapes': the products of the format
//     (another format's and a thin, split-K one left out), each timed and
//     counted as often as a step runs it (the step's time is Σ count ×
//     each product's time; TFLOP/s × time is the step's flops, computed
//     here from the list);
//   - the cache: read back without measuring, refreshed, not written when
//     off, a broken file measured again with a warning, other shapes
//     another key;
//   - a tile whose kernels fail to build is left out, with a warning;
//   - one tile, or no product of the format: nothing measured.
func TestChooseTileEmulated(t *testing.T) {
	_, ks := openKernels(t)
	type emu struct {
		name string
		tile coopTile
	}
	var tiles []emu
	for _, tile := range emulatedTiles(t, ks.d.Physical)[:1] {
		tiles = append(tiles, emu{tile.name, tile})
	}
	if all := emulatedTiles(t, ks.d.Physical); len(all) > 1 {
		tiles = append(tiles, emu{all[1].name, all[1]})
	} else { // under the validation layer: the one that fits, as two candidates
		tiles = append(tiles, emu{all[0].name + "-again", all[0]})
	}
	builds := 0
	build := func(e emu) func() (gemmKernels, error) {
		tile := e.tile
		return func() (gemmKernels, error) {
			builds++
			g := gemmKernels{v: GemmVariant{Name: "emulated " + e.name, Tile: e.name, Operands: RoundFP16, Workgroup: [2]uint32{tile.m, tile.n}}}
			for _, k := range []struct {
				dst  **Kernel
				file string
			}{{&g.f32, tile.spirv("fp16", "f32", true)}, {&g.b16, tile.spirv("fp16", "b16", true)}} {
				code, err := spirv(k.file)
				if err == nil {
					*k.dst, err = ks.d.NewKernel(KernelSpec{Name: k.file, SPIRV: code, Buffers: 3, PushSize: gemmPush})
				}
				if err != nil {
					g.close()
					return gemmKernels{}, err
				}
			}
			return g, nil
		}
	}
	var cands []tileCandidate
	for _, e := range tiles {
		cands = append(cands, tileCandidate{tile: e.name, v: GemmVariant{Name: "emulated " + e.name, Tile: e.name, F32: e.tile.spirv("fp16", "f32", true), B16: e.tile.spirv("fp16", "b16", true), Operands: RoundFP16}, build: build(e)})
	}
	first, err := cands[0].build()
	must(t, err)
	ks.gemm[RoundFP16] = first
	defer func() {
		if g, ok := ks.gemm[RoundFP16]; ok {
			g.close()
			delete(ks.gemm, RoundFP16)
		}
	}()
	shapes := []GemmShape{
		{M: 96, N: 160, K: 64, TransB: true, Operands: RoundFP16, Count: 3},
		{M: 96, N: 64, K: 160, Operands: RoundFP16, Count: 2},
		{M: 96, N: 160, K: 64, TransB: true, B16: true, BHalf: FP16, Operands: RoundFP16, Count: 1},
		{M: 96, N: 160, K: 64, TransB: true, Operands: RoundBF16, Count: 5}, // another format's
		{M: 8, N: 8, K: 4096, TransA: true, Operands: RoundFP16, Count: 4},  // split over K: the scalar kernel's
	}
	if chunks, _ := ks.SplitK(shapes[4].args()); chunks <= 1 {
		t.Fatalf("the thin shape is not split (%d chunks)", chunks)
	}
	var stepFlops float64
	for _, s := range shapes[:3] {
		stepFlops += float64(s.Count) * 2 * float64(s.M*s.N*s.K)
	}
	dir := t.TempDir()
	opt := TuneOptions{Dir: dir, maxBatch: 2}
	c, err := ks.chooseTile(RoundFP16, shapes, cands, opt)
	must(t, err)
	t.Logf("%s", c.Reason)
	if len(c.Timings) != 2 || c.Timings[0].Millis <= 0 || c.Timings[0].Millis > c.Timings[1].Millis {
		t.Fatalf("timings %+v", c.Timings)
	}
	if c.Tile != c.Timings[0].Tile || ks.TileFor(RoundFP16) != c.Tile || !strings.Contains(ks.GemmNames(), "emulated "+c.Tile) {
		t.Fatalf("chose %s, fastest %s, in use %s (%s)", c.Tile, c.Timings[0].Tile, ks.TileFor(RoundFP16), ks.GemmNames())
	}
	for _, tm := range c.Timings {
		var ms float64
		for j, s := range shapes[:3] {
			ms += float64(s.Count) * tm.PerProduct[j]
		}
		if len(tm.PerProduct) != 3 || math.Abs(ms-tm.Millis) > 1e-9*ms {
			t.Errorf("%s: %.6g ms a step, want Σ count × %v = %.6g", tm.Tile, tm.Millis, tm.PerProduct, ms)
		}
		if got := tm.TFLOPS * 1e12 * tm.Millis / 1e3; math.Abs(got-stepFlops) > 1e-9*stepFlops {
			t.Errorf("%s: %.6g TFLOP/s × %.6g ms = %.6g flops, want the tuned shapes' %.6g", tm.Tile, tm.TFLOPS, tm.Millis, got, stepFlops)
		}
	}
	if !strings.Contains(c.Reason, "auto → "+c.Tile) || !strings.Contains(c.Reason, "cached ") || !strings.Contains(c.Reason, "3 shapes") {
		t.Errorf("reason %q", c.Reason)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "tile-*.json"))
	if len(files) != 1 {
		t.Fatalf("%d cache files", len(files))
	}

	// cached: no measurement, no build (the fastest is in use)
	b0 := builds
	cached, err := ks.chooseTile(RoundFP16, shapes, cands, opt)
	must(t, err)
	if builds != b0 || cached.Tile != c.Tile || !strings.Contains(cached.Reason, "cached "+files[0]) || cached.Timings[0].Millis != c.Timings[0].Millis {
		t.Errorf("cached: %d builds, %+v", builds-b0, cached)
	}
	// refresh measures again: the other tile is built
	if _, err := ks.chooseTile(RoundFP16, shapes, cands, TuneOptions{Dir: dir, Cache: calcache.Refresh, maxBatch: 2}); err != nil || builds == b0 {
		t.Errorf("refresh: %v, %d builds", err, builds-b0)
	}
	// off writes nothing, for other shapes either
	other := shapes[:1]
	if _, err := ks.chooseTile(RoundFP16, other, cands, TuneOptions{Dir: dir, Cache: calcache.Off, maxBatch: 2}); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "tile-*.json")); len(files) != 1 {
		t.Errorf("off wrote a file: %v", files)
	}
	// other shapes, another key
	if _, err := ks.chooseTile(RoundFP16, other, cands, opt); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "tile-*.json")); len(files) != 2 {
		t.Errorf("another shape list: %d files", len(files))
	}
	// a broken file: measured again, with a warning
	must(t, os.WriteFile(files[0], []byte("{"), 0o644))
	b0 = builds
	broken, err := ks.chooseTile(RoundFP16, shapes, cands, opt)
	must(t, err)
	if builds == b0 || !strings.Contains(strings.Join(broken.Warnings, "\n"), "measuring again") {
		t.Errorf("broken cache: %d builds, warnings %q", builds-b0, broken.Warnings)
	}

	// a tile whose kernels do not build: left out, with a warning
	failing := append([]tileCandidate{}, cands...)
	failing[1].build = func() (gemmKernels, error) { return gemmKernels{}, errors.New("driver said no") }
	if ks.TileFor(RoundFP16) == failing[1].tile {
		failing[0], failing[1] = failing[1], failing[0]
		failing[0].build = cands[1].build
		failing[1].build = func() (gemmKernels, error) { return gemmKernels{}, errors.New("driver said no") }
	}
	f, err := ks.chooseTile(RoundFP16, shapes, failing, TuneOptions{Cache: calcache.Off, maxBatch: 2})
	must(t, err)
	if f.Tile == failing[1].tile || !strings.Contains(strings.Join(f.Warnings, "\n"), "driver said no") {
		t.Errorf("failing tile: %+v", f)
	}

	// nothing to compare
	one, err := ks.chooseTile(RoundFP16, shapes, cands[:1], TuneOptions{Cache: calcache.Off, maxBatch: 2})
	must(t, err)
	none, err := ks.chooseTile(RoundFP16, shapes[3:], cands, TuneOptions{Cache: calcache.Off, maxBatch: 2})
	must(t, err)
	if one.Timings != nil || !strings.Contains(one.Reason, "only") || none.Timings != nil || !strings.Contains(none.Reason, "no fp16 product") {
		t.Errorf("one tile: %+v; no product: %+v", one, none)
	}
}

// TestChooseSplitDKVEmulated times the emulated tensor-core attention's
// backward pass with the dK/dV kernel joint and split for real: the
// faster is put in use, the step's time is Σ count × each shape's, the
// shapes that run on the scalar kernel are left out (with none left,
// nothing is timed), and a second call reads the cache. Heads of 80 take
// the 128-wide builds, which fit lavapipe's shared memory under the
// validation layer.
func TestChooseSplitDKVEmulated(t *testing.T) {
	_, ks := openKernels(t)
	useEmulatedAttention(t, ks)
	defer func() { ks.splitDKV = false }()
	bf := AttentionShape{Batch: 1, SeqLen: 40, Heads: 2, KVHeads: 1, HeadDim: 80, Scores: RoundBF16, Softmax: RoundBF16, Values: RoundBF16, Operands: RoundBF16}
	fp := bf
	fp.SeqLen, fp.Heads, fp.Scores, fp.Softmax, fp.Values, fp.Operands = 24, 1, RoundFP16, RoundFP16, RoundFP16, RoundFP16
	scalar := bf
	scalar.Operands = NoRounding
	var uses []AttentionUse
	for _, s := range []AttentionShape{bf, fp, bf, scalar} {
		uses = AddAttention(uses, s)
	}
	if len(uses) != 3 || uses[0].Count != 2 {
		t.Fatalf("AddAttention: %+v", uses)
	}
	opt := TuneOptions{Dir: t.TempDir(), maxBatch: 1}
	c, err := ks.ChooseSplitDKV(uses, opt)
	must(t, err)
	t.Logf("%s", c.Reason)
	if len(c.Timings) != 2 || c.Timings[0].Millis > c.Timings[1].Millis || c.Split != (c.Timings[0].Tile == "split") || ks.splitDKV != c.Split {
		t.Fatalf("choice %+v, in use %v", c, ks.splitDKV)
	}
	for _, tm := range c.Timings {
		ms := 2*tm.PerProduct[0] + tm.PerProduct[1]
		if len(tm.PerProduct) != 2 || math.Abs(ms-tm.Millis) > 1e-9*ms {
			t.Errorf("%s: %.6g ms a step, want 2 × %v[0] + [1] = %.6g", tm.Tile, tm.Millis, tm.PerProduct, ms)
		}
	}
	again, err := ks.ChooseSplitDKV(uses, opt)
	must(t, err)
	if !strings.Contains(again.Reason, "cached ") || again.Split != c.Split {
		t.Errorf("second call: %+v", again)
	}
	ks.splitDKV = true
	none, err := ks.ChooseSplitDKV(uses[2:], opt)
	must(t, err)
	if none.Reason != "" || none.Timings != nil || !ks.splitDKV {
		t.Errorf("scalar shapes only: %+v", none)
	}
}

// TestCalibratedMarker: a measurement that ends the process while a
// candidate is being built or timed (here a panic, as a driver that
// hangs or crashes would end it) leaves a marker naming it; the next run
// leaves that candidate out, with a warning, caches a result that says
// why, and removes the marker; a second crash adds its candidate to those
// left out; a refresh tries them all again.
func TestCalibratedMarker(t *testing.T) {
	dir := t.TempDir()
	opt := TuneOptions{Dir: dir}
	fields := []string{"test calibration"}
	check := func(*tileCalibration) error { return nil }
	var skipped []string // what the last crashing run left out
	crash := func(at string) measureFunc {
		return func(skip map[string]string, trying func(string)) ([]TileTiming, error) {
			skipped = slices.Sorted(maps.Keys(skip))
			for _, name := range []string{"a", "b", "c"} {
				if _, ok := skip[name]; ok {
					continue
				}
				trying(name)
				if name == at {
					panic("device lost")
				}
			}
			return nil, errors.New("not reached")
		}
	}
	run := func(m measureFunc) (cal *tileCalibration, warnings []string, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("crashed: %v", r)
			}
		}()
		cal, _, warnings, err = calibrated("test", "t-", fields, opt, check, m)
		return cal, warnings, err
	}
	if _, _, err := run(crash("b")); err == nil || !strings.Contains(err.Error(), "crashed") {
		t.Fatalf("first run: %v", err)
	}
	if _, _, err := run(crash("c")); err == nil || !slices.Equal(skipped, []string{"b"}) {
		t.Fatalf("second run: %v, left out %v", err, skipped)
	}
	var seen map[string]string
	cal, w, err := run(func(skip map[string]string, trying func(string)) ([]TileTiming, error) {
		seen = maps.Clone(skip)
		var ts []TileTiming
		for _, name := range []string{"a", "b", "c"} {
			if reason, ok := skip[name]; ok {
				ts = append(ts, TileTiming{Tile: name, Error: reason})
				continue
			}
			trying(name)
			ts = append(ts, TileTiming{Tile: name, Millis: 1})
		}
		return ts, nil
	})
	if err != nil || len(seen) != 2 || seen["b"] == "" || seen["c"] == "" || !strings.Contains(seen["c"], TuneEnv+"=refresh") {
		t.Fatalf("third run: %v, left out %v", err, seen)
	}
	if best, ok := pickTile(cal.Results); !ok || best.Tile != "a" || len(w) != 2 || !strings.Contains(w[0], "b left out") {
		t.Errorf("third run: %+v, warnings %q", cal.Results, w)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.running")); len(m) != 0 {
		t.Errorf("markers left: %v", m)
	}
	opt.Cache = calcache.Refresh
	if _, _, err := run(func(skip map[string]string, trying func(string)) ([]TileTiming, error) {
		if len(skip) != 0 {
			t.Errorf("refresh leaves out %v", skip)
		}
		return []TileTiming{{Tile: "a", Millis: 1}}, nil
	}); err != nil {
		t.Fatal(err)
	}
}
