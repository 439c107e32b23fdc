package vulkan

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mixtune/mixtune/internal/calcache"
)

// Choosing the tensor-core tile by measurement (compute.gemm_tile: auto).
//
// Which tile runs a format's products fastest depends on the device, its
// driver and the products' shapes: on an H100 the coopmat2 128×256 tile
// ran TinyLlama's bf16 products 1.1–1.4× faster than the others measured,
// and what suits an AMD or Intel driver, or the next NVIDIA one, only a
// measurement says. So, as compute.blas: auto does for the CPU's
// backends, ChooseTile times every tile that runs on the device at the
// run's own products, each weighted by how often a step runs it, and puts
// the fastest in use; the result is cached per device, driver, kernels
// and shapes. Tiles sum K in different orders, so the choice changes a
// run's last bits: it is recorded (run.json), and a resumed run keeps it.

// GemmShape is one product shape of a step: what the tuner times.
type GemmShape struct {
	M, N, K        int
	TransA, TransB bool
	B16            bool // B stored as 16-bit values of format BHalf
	BHalf          Half
	Operands       Rounding
	Count          int // how many such products a step runs
}

// AddShape counts one product of g's shape into shapes.
func AddShape(shapes []GemmShape, g GemmArgs) []GemmShape {
	s := GemmShape{M: g.M, N: g.N, K: g.K, TransA: g.TransA, TransB: g.TransB, B16: g.B16, Operands: g.Operands}
	if g.B16 {
		s.BHalf = g.BHalf
	}
	for i := range shapes {
		c := shapes[i]
		c.Count = 0
		if c == s {
			shapes[i].Count++
			return shapes
		}
	}
	s.Count = 1
	return append(shapes, s)
}

func (s GemmShape) String() string {
	t := func(b bool) string {
		if b {
			return "ᵀ"
		}
		return ""
	}
	b := "fp32"
	if s.B16 {
		b = s.BHalf.String()
	}
	return fmt.Sprintf("%d×%d×%d A%s B%s(%s) ×%d", s.M, s.N, s.K, t(s.TransA), t(s.TransB), b, s.Count)
}

func (s GemmShape) flops() float64 { return 2 * float64(s.M) * float64(s.N) * float64(s.K) }

// TileTiming is one tile's time at a step's products.
type TileTiming struct {
	Tile    string `json:"tile"`
	Variant string `json:"variant,omitempty"`
	// Millis is Σ count × the best time of one product of each shape.
	Millis float64 `json:"ms_per_step,omitempty"`
	TFLOPS float64 `json:"tflops,omitempty"`
	// PerProduct is the best time of one product of each tuned shape, ms,
	// in the shapes' order.
	PerProduct []float64 `json:"ms_per_product,omitempty"`
	// Error says why the tile was not timed: its kernels did not build,
	// failed their self-check, or a product failed.
	Error string `json:"error,omitempty"`
}

// TileChoice is the tile ChooseTile put in use for a format, and why.
type TileChoice struct {
	Tile    string // a CoopTileNames name; "" where no tensor-core variant runs the format
	Reason  string
	Timings []TileTiming // fastest first; nil where nothing was compared
	// Warnings are problems that did not stop the choice: a cache that
	// could not be read or written, a tile left out.
	Warnings []string
}

// TuneEnv is the environment variable that sets TuneOptions.Cache:
// unset or "cache", "refresh", or "off".
const TuneEnv = "MIXTUNE_GPU_CALIBRATE"

// TuneOptions say how ChooseTile measures and caches.
type TuneOptions struct {
	Cache calcache.Mode
	// Dir holds the cached results; "" is os.UserCacheDir()/mixtune/gpu.
	Dir string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// maxBatch caps the products a timed batch holds (0: tuneBatchMax),
	// so that tests on a CPU driver finish soon.
	maxBatch int
}

// TuneOptionsFromEnv reads TuneEnv through getenv.
func TuneOptionsFromEnv(getenv func(string) string) (TuneOptions, error) {
	mode, err := calcache.ParseMode(TuneEnv, getenv(TuneEnv))
	return TuneOptions{Cache: mode}, err
}

// tuneVersion changes whenever the measure changes, so that older cached
// results are measured again.
const tuneVersion = 1

// tileCandidate is a tile ChooseTile may put in use: its variant and how
// its kernels are built (buildTensor: compiled and self-checked).
type tileCandidate struct {
	tile  string
	v     GemmVariant
	build func() (gemmKernels, error)
}

// tunableTiles are the tiles whose variant for operands of format f runs
// on the device, in the order NewKernels prefers them (the first wins a
// tie): the default coopmat2 tile, then ChooseGemmFor's, then the rest.
func tunableTiles(p *PhysicalDevice, f Rounding) []string {
	var tiles []string
	for _, v := range GemmVariants() {
		if v.Operands == f && v.Supported(p) && !slices.Contains(tiles, v.Tile) {
			tiles = append(tiles, v.Tile)
		}
	}
	rank := func(t string) int {
		if t == defaultCM2Tile {
			return 0
		}
		if v, err := ChooseGemmFor(p, f); err == nil && v.Tile == t {
			return 1
		}
		return 2
	}
	slices.SortStableFunc(tiles, func(a, b string) int { return rank(a) - rank(b) })
	return tiles
}

// ChooseTile puts in use the tile that runs shapes, the products of
// format f in a step (the others are left out: another format's, and the
// thin ones split-K runs on the scalar kernel), fastest on this device,
// timing every tile tunableTiles lists, or reading the time from the
// cache opt says. It changes nothing where the device runs no tensor-core
// variant of f, where one tile runs, or where no product is of f.
func (ks *Kernels) ChooseTile(f Rounding, shapes []GemmShape, opt TuneOptions) (TileChoice, error) {
	var cands []tileCandidate
	for _, tile := range tunableTiles(ks.d.Physical, f) {
		v, err := chooseTensor(ks.d.Physical, f, tile)
		if err != nil {
			return TileChoice{}, err
		}
		cands = append(cands, tileCandidate{tile: tile, v: v, build: func() (gemmKernels, error) { return ks.buildTensor(v) }})
	}
	return ks.chooseTile(f, shapes, cands, opt)
}

func (ks *Kernels) chooseTile(f Rounding, shapes []GemmShape, cands []tileCandidate, opt TuneOptions) (TileChoice, error) {
	cur, ok := ks.gemm[f]
	if !ok {
		return TileChoice{Reason: fmt.Sprintf("no tensor-core variant runs %s products here", f)}, nil
	}
	shapes = ks.tunedShapes(f, shapes)
	switch {
	case len(shapes) == 0:
		return TileChoice{Tile: cur.v.Tile, Reason: fmt.Sprintf("%s: no %s product of the step runs on the tensor-core kernel", cur.v.Tile, f)}, nil
	case len(cands) <= 1:
		return TileChoice{Tile: cur.v.Tile, Reason: fmt.Sprintf("%s: the only %s tile that runs here", cur.v.Tile, f)}, nil
	}
	fields, err := ks.tuneKey(f, shapes, cands)
	if err != nil {
		return TileChoice{}, err
	}
	check := func(c *tileCalibration) error {
		for _, cand := range cands {
			if !c.has(cand.tile) {
				return fmt.Errorf("has no result for tile %s", cand.tile)
			}
		}
		return nil
	}
	cal, source, warnings, err := calibrated("GEMM tile", "tile-", fields, opt, check, func(skip map[string]string, trying func(string)) ([]TileTiming, error) {
		return ks.timeTiles(f, shapes, cands, cmp.Or(opt.maxBatch, tuneBatchMax), skip, trying)
	})
	if err != nil {
		return TileChoice{}, err
	}
	for _, t := range cal.Results {
		if t.Error != "" {
			warnings = append(warnings, fmt.Sprintf("GEMM tile %s left out: %s", t.Tile, t.Error))
		}
	}
	best, ok := pickTile(cal.Results)
	if !ok {
		warnings = append(warnings, fmt.Sprintf("no %s tile could be timed: %s stays", f, cur.v.Tile))
		return TileChoice{Tile: cur.v.Tile, Reason: fmt.Sprintf("%s: no tile could be timed", cur.v.Tile), Warnings: warnings}, nil
	}
	if best.Tile != cur.v.Tile {
		i := slices.IndexFunc(cands, func(c tileCandidate) bool { return c.tile == best.Tile })
		g, err := gemmKernels{}, fmt.Errorf("not a candidate") // the key names every candidate: not expected
		if i >= 0 {
			g, err = cands[i].build()
		}
		if err != nil { // timed a moment ago (or cached): the device has changed
			warnings = append(warnings, fmt.Sprintf("GEMM tile %s, the fastest, did not build now (%v): %s stays", best.Tile, err, cur.v.Tile))
			return TileChoice{Tile: cur.v.Tile, Reason: fmt.Sprintf("%s: the fastest tile did not build", cur.v.Tile), Timings: sortedTimings(cal.Results), Warnings: warnings}, nil
		}
		cur.close()
		ks.gemm[f] = g
		delete(ks.TensorErrors, f)
		delete(ks.TensorFallbacks, f)
	}
	sorted := sortedTimings(cal.Results)
	var parts []string
	for _, t := range sorted {
		if t.Error == "" {
			parts = append(parts, fmt.Sprintf("%s %.3g", t.Tile, t.Millis))
		}
	}
	reason := fmt.Sprintf("auto → %s: fastest of %s ms a step at this run's %s products (%d shapes, %.3g TFLOP/s), measured %s, %s",
		best.Tile, strings.Join(parts, ", "), f, len(shapes), best.TFLOPS, cal.Measured.UTC().Format("2006-01-02 15:04 UTC"), source)
	return TileChoice{Tile: best.Tile, Reason: reason, Timings: sorted, Warnings: warnings}, nil
}

// UseTile puts tile's variant for format f in use, as a run that started
// on it asks (a resume; the ranks of a data-parallel job taking rank 0's
// choice): built and self-checked, else an error and the variant in use
// stays.
func (ks *Kernels) UseTile(f Rounding, tile string) error {
	if g, ok := ks.gemm[f]; ok && g.v.Tile == tile {
		return nil
	}
	v, err := chooseTensor(ks.d.Physical, f, tile)
	if err != nil {
		return err
	}
	return ks.UseGemmVariant(v)
}

// TileFor is the tile of the variant running products of format f, ""
// where none runs them on tensor cores.
func (ks *Kernels) TileFor(f Rounding) string {
	if g, ok := ks.gemm[f]; ok {
		return g.v.Tile
	}
	return ""
}

// tunedShapes are shapes' products that run on f's tensor-core kernel:
// operands of f, and not split over K (those run on the scalar kernel).
func (ks *Kernels) tunedShapes(f Rounding, shapes []GemmShape) []GemmShape {
	var out []GemmShape
	for _, s := range shapes {
		if s.Operands != f || s.Count <= 0 || s.M <= 0 || s.N <= 0 || s.K <= 0 {
			continue
		}
		if chunks, _ := ks.SplitK(s.args()); chunks > 1 {
			continue
		}
		out = append(out, s)
	}
	return out
}

// args is s as a Gemm's arguments, densely laid out, buffers unset.
func (s GemmShape) args() GemmArgs {
	g := GemmArgs{M: s.M, N: s.N, K: s.K, TransA: s.TransA, TransB: s.TransB, Alpha: 1, B16: s.B16, BHalf: s.BHalf, Operands: s.Operands}
	g.Lda, g.Ldb, g.Ldc = s.K, s.N, s.N
	if s.TransA {
		g.Lda = s.M
	}
	if s.TransB {
		g.Ldb = s.K
	}
	return g
}

// tuneKey is what a tile calibration depends on: the device and its
// driver, the format, every candidate's kernels (their SPIR-V's hash) and
// the shapes.
func (ks *Kernels) tuneKey(f Rounding, shapes []GemmShape, cands []tileCandidate) ([]string, error) {
	fields := append([]string{"tile calibration " + strconv.Itoa(tuneVersion)}, ks.deviceFields()...)
	fields = append(fields, "format "+f.String(), "narrowed first "+strconv.FormatBool(ks.narrow16))
	for _, c := range cands {
		h := sha256.New()
		for _, file := range []string{c.v.F32, c.v.B16, c.v.A16} {
			if file == "" {
				continue
			}
			code, err := spirv(file)
			if err != nil {
				return nil, err
			}
			h.Write(code)
		}
		fields = append(fields, fmt.Sprintf("tile %s %s %s", c.tile, c.v.Name, hex.EncodeToString(h.Sum(nil)[:8])))
	}
	for _, s := range shapes {
		fields = append(fields, "shape "+s.String())
	}
	return fields, nil
}

// tileCalibration is one cached result: the key it was measured under,
// in words and hashed, and each tile's time.
type tileCalibration struct {
	Key      string       `json:"key"`
	KeyText  []string     `json:"key_fields"`
	Measured time.Time    `json:"measured"`
	Results  []TileTiming `json:"results"`
}

// tuneMarker is the file a measurement keeps while it runs (calibrated):
// the candidate it is building or timing, since when, and those left out.
type tuneMarker struct {
	Current  string            `json:"current"`
	Since    time.Time         `json:"since"`
	Excluded map[string]string `json:"excluded,omitempty"`
	path     string
	now      func() time.Time
}

// trying records that name is being built or timed now. The file is
// written without a sync: what it guards against ends the process, not
// the machine, and a timing writes it hundreds of times. A nil marker
// (no cache) records nothing.
func (m *tuneMarker) trying(name string) {
	if m == nil || name == m.Current {
		return
	}
	m.Current, m.Since = name, m.now()
	if b, err := json.Marshal(m); err == nil && os.MkdirAll(filepath.Dir(m.path), 0o755) == nil {
		_ = os.WriteFile(m.path, b, 0o644) // best effort: without it a crash only repeats
	}
}

// remove deletes the marker: the measurement ended without ending the
// process.
func (m *tuneMarker) remove() {
	if m != nil {
		_ = os.Remove(m.path)
	}
}

// has reports whether c holds a time, or an error, for the candidate
// named name.
func (c *tileCalibration) has(name string) bool {
	return slices.ContainsFunc(c.Results, func(t TileTiming) bool {
		return t.Tile == name && (t.Error != "" || t.Millis > 0 && !math.IsInf(t.Millis, 0))
	})
}

// measureFunc measures the candidates: those in skip not at all (their
// results carry the reason as their Error), and before building or
// timing one it calls trying with its name.
type measureFunc func(skip map[string]string, trying func(name string)) ([]TileTiming, error)

// calibrated is a measurement of the candidates fields describe: read
// from the cache (file prefix+key under opt.Dir) where opt allows it and
// check accepts it, else made by measure and, where a candidate was
// timed, written there. It returns where the result came from, for the
// banner, and warnings (what names the measurement in them).
//
// A candidate may hang or crash the driver (a kernel no GPU has run yet),
// ending the process, and the next run would do the same. So while it
// measures, a marker file beside the cached result names the candidate
// being built or timed; a run that finds one left behind leaves that
// candidate out (and those an earlier such run left out), with a
// warning, until the cache is refreshed (MIXTUNE_GPU_CALIBRATE=refresh).
func calibrated(what, prefix string, fields []string, opt TuneOptions, check func(*tileCalibration) error, measure measureFunc) (*tileCalibration, string, []string, error) {
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	key := calcache.Key(fields)
	var warnings []string
	path := ""
	if opt.Cache != calcache.Off {
		if dir, err := calcache.Dir(opt.Dir, "gpu"); err != nil {
			warnings = append(warnings, fmt.Sprintf("no cache for the %s calibration (%v): measuring each run", what, err))
		} else {
			path = filepath.Join(dir, prefix+key+".json")
		}
	}
	if path != "" && opt.Cache == calcache.Use {
		var c tileCalibration
		err := calcache.Read(path, &c)
		if err == nil && c.Key != key {
			err = fmt.Errorf("holds key %q, not %q", c.Key, key)
		}
		if err == nil {
			err = check(&c)
		}
		switch {
		case err == nil:
			return &c, "cached " + path, warnings, nil
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			warnings = append(warnings, fmt.Sprintf("%s calibration cache %s: %v: measuring again", what, path, err))
		}
	}
	skip := map[string]string{}
	var marker *tuneMarker
	if path != "" {
		marker = &tuneMarker{path: strings.TrimSuffix(path, ".json") + ".running", now: now}
		var left tuneMarker
		if opt.Cache == calcache.Use && calcache.Read(marker.path, &left) == nil {
			maps.Copy(skip, left.Excluded)
			if left.Current != "" {
				skip[left.Current] = fmt.Sprintf("a run ended at %s while it was being checked or timed (%s=refresh tries it again)", left.Since.UTC().Format("2006-01-02 15:04 UTC"), TuneEnv)
			}
			for _, name := range slices.Sorted(maps.Keys(skip)) {
				warnings = append(warnings, fmt.Sprintf("%s calibration: %s left out: %s", what, name, skip[name]))
			}
		}
		marker.Excluded = skip
	}
	t0 := now()
	timings, err := measure(skip, marker.trying)
	marker.remove()
	if err != nil {
		return nil, "", warnings, err
	}
	cal := &tileCalibration{Key: key, KeyText: fields, Measured: t0, Results: timings}
	source := fmt.Sprintf("in %.1f s", now().Sub(t0).Seconds())
	if _, ok := pickTile(timings); ok && path != "" {
		if err := calcache.Write(path, cal); err != nil {
			warnings = append(warnings, fmt.Sprintf("could not cache the %s calibration: %v", what, err))
			source += ", not cached"
		} else {
			source += ", cached " + path
		}
	} else {
		source += ", not cached"
	}
	return cal, source, warnings, nil
}

// pickTile is the timed tile with the least time a step; a tie goes to
// the earlier (the preferred) one. ok is false when none was timed.
func pickTile(ts []TileTiming) (best TileTiming, ok bool) {
	for _, t := range ts {
		if t.Error == "" && t.Millis > 0 && (!ok || t.Millis < best.Millis) {
			best, ok = t, true
		}
	}
	return best, ok
}

// sortedTimings is ts fastest first, the untimed last, each group in its
// order.
func sortedTimings(ts []TileTiming) []TileTiming {
	s := slices.Clone(ts)
	slices.SortStableFunc(s, func(a, b TileTiming) int {
		switch {
		case a.Error != "" || b.Error != "":
			return boolInt(a.Error != "") - boolInt(b.Error != "")
		case a.Millis < b.Millis:
			return -1
		case a.Millis > b.Millis:
			return 1
		}
		return 0
	})
	return s
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// tuneRounds is how many times each tile times each shape; the best
// counts. The tiles take turns shape by shape, so that a device that
// slows down or warms up during the measurement weighs on all of them.
const tuneRounds = 3

// tuneBatchFlops is about how much work one timed batch of a shape
// holds: enough products that the batch's start and end are small beside
// it (about 1 ms at 40 TFLOP/s), at most tuneBatchMax.
const (
	tuneBatchFlops = 4e10
	tuneBatchMax   = 32
)

// timeTiles builds each candidate and times it at shapes: the time a
// step's products of f take on it. The variant in use for f is put back
// after; every candidate's kernels but the one in use are closed.
func (ks *Kernels) timeTiles(f Rounding, shapes []GemmShape, cands []tileCandidate, maxBatch int, skip map[string]string, trying func(string)) ([]TileTiming, error) {
	cur := ks.gemm[f]
	defer func() { ks.gemm[f] = cur }()
	timings := make([]TileTiming, len(cands))
	built := make([]*gemmKernels, len(cands))
	inUse := -1
	defer func() {
		for i, g := range built {
			if g != nil && i != inUse {
				g.close()
			}
		}
	}()
	for i, c := range cands {
		timings[i] = TileTiming{Tile: c.tile, Variant: c.v.Name}
		if reason, ok := skip[c.tile]; ok {
			timings[i].Error = reason
			continue
		}
		if c.v.Name == cur.v.Name {
			built[i], inUse = &cur, i
			continue
		}
		trying(c.tile)
		g, err := c.build()
		if err != nil {
			timings[i].Error = err.Error()
			continue
		}
		built[i] = &g
	}
	// Operands for the largest shape: values exact in every format.
	var maxA, maxB, maxB16, maxC int // B in fp32 and 16-bit, each as large as the program's own
	for _, s := range shapes {
		maxA, maxC = max(maxA, s.M*s.K), max(maxC, s.M*s.N)
		if s.B16 {
			maxB16 = max(maxB16, s.K*s.N)
		} else {
			maxB = max(maxB, s.K*s.N)
		}
	}
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i%7) - 3
		}
		return x
	}
	var bufs []*Buffer
	defer func() {
		for _, b := range bufs {
			b.Free()
		}
	}()
	upload := func(xs []float32, hs []uint16) (*Buffer, error) {
		size := 4 * len(xs)
		if hs != nil {
			size = 2 * len(hs)
		}
		b, err := ks.d.NewBuffer(max(size, 4))
		if err != nil {
			return nil, err
		}
		bufs = append(bufs, b)
		if hs != nil {
			return b, b.WriteUint16(0, hs)
		}
		return b, b.WriteFloat32(0, xs)
	}
	a, err := upload(fill(maxA), nil)
	if err != nil {
		return nil, err
	}
	b32, err := upload(fill(maxB), nil)
	if err != nil {
		return nil, err
	}
	c, err := upload(make([]float32, maxC), nil)
	if err != nil {
		return nil, err
	}
	var b16 *Buffer
	for _, s := range shapes {
		if s.B16 && b16 == nil {
			hs := make([]uint16, maxB16)
			for i := range hs {
				hs[i] = s.BHalf.format().Bits16(float32(i%7) - 3) // exact in both
			}
			if b16, err = upload(nil, hs); err != nil {
				return nil, err
			}
		}
	}
	bt, err := newBatchTimer(ks.d)
	if err != nil {
		return nil, err
	}
	defer bt.close()
	best := infinities(len(cands), len(shapes)) // [candidate][shape] seconds a product
	for round := 0; round < tuneRounds; round++ {
		for j, s := range shapes {
			g := s.args()
			g.A, g.B, g.C = a, b32, c
			if s.B16 {
				g.B = b16
			}
			n := int(math.Max(1, math.Min(float64(maxBatch), math.Round(tuneBatchFlops/s.flops()))))
			for i := range cands {
				if built[i] == nil || timings[i].Error != "" {
					continue
				}
				ks.gemm[f] = *built[i]
				trying(cands[i].tile)
				secs, err := bt.time(round == 0, n, func(r *Recorder) error { return ks.Gemm(r, g) })
				if err != nil {
					timings[i].Error = fmt.Sprintf("%v: %v", s, err)
					continue
				}
				best[i][j] = min(best[i][j], secs)
			}
		}
	}
	for i := range cands {
		if timings[i].Error != "" {
			continue
		}
		var secs, flops float64
		for j, s := range shapes {
			timings[i].PerProduct = append(timings[i].PerProduct, best[i][j]*1e3)
			secs += float64(s.Count) * best[i][j]
			flops += float64(s.Count) * s.flops()
		}
		timings[i].Millis = secs * 1e3
		timings[i].TFLOPS = flops / secs / 1e12
	}
	return timings, nil
}

// batchTimer times batches of a recorded command: by the GPU's
// timestamps where the device writes them, else by the host's clock
// around the submission.
type batchTimer struct {
	r        *Recorder
	timed    bool
	gpuNanos float64
}

func newBatchTimer(d *Device) (*batchTimer, error) {
	r, err := d.NewRecorder()
	if err != nil {
		return nil, err
	}
	bt := &batchTimer{r: r}
	bt.timed = r.Time(func(b BatchTime) { bt.gpuNanos = b.Nanos }) == nil
	return bt, nil
}

func (bt *batchTimer) close() { bt.r.Close() }

// time is the seconds one of n records in a batch takes; warm runs one
// first, untimed (the driver compiles a pipeline on its first use).
func (bt *batchTimer) time(warm bool, n int, record func(*Recorder) error) (float64, error) {
	batch := func(n int) error {
		for range n {
			if err := record(bt.r); err != nil {
				return err
			}
		}
		return bt.r.Submit()
	}
	if warm {
		if err := batch(1); err != nil {
			return 0, err
		}
	}
	bt.gpuNanos = 0
	t0 := time.Now()
	if err := batch(n); err != nil {
		return 0, err
	}
	secs := time.Since(t0).Seconds()
	if bt.timed && bt.gpuNanos > 0 {
		secs = bt.gpuNanos / 1e9
	}
	return secs / float64(n), nil
}

// infinities is a rows × cols table of +Inf, for the best times found.
func infinities(rows, cols int) [][]float64 {
	t := make([][]float64, rows)
	for i := range t {
		t[i] = make([]float64, cols)
		for j := range t[i] {
			t[i][j] = math.Inf(1)
		}
	}
	return t
}
