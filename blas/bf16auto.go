package blas

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/calcache"
)

// BF16Speed is what auto compares to decide where bf16 products run: the
// calibration's products (calibrationShapes) on bf16 values held as
// float32, as nn holds them, in the emulation (backend's Sgemm) and on
// the bf16 GEMM (operands rounded to bf16 as it reads them: for a GEMM
// that cannot, converted first, as nn converts them), in GFLOP/s.
type BF16Speed struct {
	Emulate, Hardware float64
	// Source says where the figures come from: measured (how long it
	// took, and whether it was cached) or a cache file.
	Source string
}

// Faster says whether the bf16 GEMM beat the emulation.
func (s BF16Speed) Faster() bool { return s.Hardware > s.Emulate }

// String is the comparison in words, for the run's reason.
func (s BF16Speed) String() string {
	return fmt.Sprintf("bf16 GEMM %.0f GFLOP/s against %.0f emulated (%s)", s.Hardware, s.Emulate, s.Source)
}

// bf16CalibrationVersion changes whenever the bf16 comparison's shapes
// or measure change, so that older cached results are measured again.
const bf16CalibrationVersion = 4 // 4: the native kernel rounds C as it stores it (GemmRound)

// bf16Repeats is how often each shape is timed after a warm-up call;
// the best time counts (about 0.1 s per GEMM at 100 GFLOP/s).
const bf16Repeats = 3

// MeasureBF16 times the emulation on backend be against the bf16 GEMM g
// (threads as the run uses them), alternating them shape by shape as the
// backend calibration does, and caches the result per machine, library
// and thread count as opt says (the backend calibration's cache and its
// MIXTUNE_BLAS_CALIBRATE modes). Warnings are cache problems and a busy
// machine, whose figures are not cached.
func MeasureBF16(be Backend, g BF16Gemmer, threads int, opt AutoOptions) (BF16Speed, []string) {
	return measureBF16(be, g, threads, opt, processCPUSeconds)
}

// measureBF16 is MeasureBF16 with the process's CPU time (< 0: unknown,
// the machine counts as quiet) passed in, for tests.
func measureBF16(be Backend, g BF16Gemmer, threads int, opt AutoOptions, cpuSeconds func() float64) (BF16Speed, []string) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	// A bf16 GEMM giving wrong products is never taken, whatever its
	// speed or a cached figure says: checked on every run (milliseconds).
	if err := CheckBF16(g); err != nil {
		return BF16Speed{Emulate: 1, Source: "checked: " + err.Error()},
			[]string{fmt.Sprintf("the bf16 GEMM %s gives wrong products here (%v): bf16 products stay on the emulation", g.Name(), err)}
	}
	getenv := opt.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	fields := []string{
		"bf16 calibration " + strconv.Itoa(bf16CalibrationVersion),
		"cpu " + cpuModel(),
		"arch " + runtime.GOOS + "/" + runtime.GOARCH,
		"features " + kernelFeatures(),
		"threads " + strconv.Itoa(threads),
		"emulate " + be.Name(),
		"hardware " + g.Name(),
	}
	for _, env := range []string{"MIXTUNE_ONEDNN", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"} {
		fields = append(fields, env+"="+getenv(env))
	}
	key := calcache.Key(fields)
	var warnings []string
	path := ""
	if opt.Cache != CacheOff {
		if dir, err := calcache.Dir(opt.Dir, "blas"); err != nil {
			warnings = append(warnings, fmt.Sprintf("no cache for the bf16 calibration (%v): measuring each run", err))
		} else {
			path = filepath.Join(dir, "bf16-"+key+".json")
		}
	}
	if path != "" && opt.Cache == CacheUse {
		c, err := readBF16Calibration(path, key)
		if err == nil {
			return BF16Speed{Emulate: c.Emulate, Hardware: c.Hardware, Source: "cached " + path}, warnings
		}
		if !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			warnings = append(warnings, fmt.Sprintf("bf16 calibration cache %s: %v: measuring again", path, err))
		}
	}
	t0, cpu0 := time.Now(), cpuSeconds()
	s := timeBF16(be, g)
	wall, cpu := time.Since(t0).Seconds(), cpuSeconds()-cpu0
	s.Source = fmt.Sprintf("measured in %.1f s", wall)
	share := cpu / (wall * float64(threads))
	switch {
	case cpu0 >= 0 && wall > 0 && share < busyShare:
		warnings = append(warnings, fmt.Sprintf("the machine was busy while auto compared the bf16 GEMM with the emulation (%.0f%% of %d CPUs): measured again next run", 100*share, threads))
		s.Source += " on a busy machine, not cached"
	case path == "":
		s.Source += ", not cached"
	default:
		c := &bf16Calibration{Key: key, KeyText: fields, Measured: t0, Emulate: s.Emulate, Hardware: s.Hardware}
		if err := calcache.Write(path, c); err != nil {
			warnings = append(warnings, fmt.Sprintf("could not cache the bf16 calibration: %v", err))
			s.Source += ", not cached"
		} else {
			s.Source += ", cached " + path
		}
	}
	return s, warnings
}

// bf16Calibration is one cached comparison: the key it was measured
// under, in words and hashed, and the GFLOP/s of each path.
type bf16Calibration struct {
	Key      string    `json:"key"`
	KeyText  []string  `json:"key_fields"`
	Measured time.Time `json:"measured"`
	Emulate  float64   `json:"emulate_gflops"`
	Hardware float64   `json:"hardware_gflops"`
}

// readBF16Calibration reads a cached comparison and checks that it is
// the one for key.
func readBF16Calibration(path, key string) (*bf16Calibration, error) {
	var c bf16Calibration
	if err := calcache.Read(path, &c); err != nil {
		return nil, err
	}
	if c.Key != key || c.Emulate <= 0 || c.Hardware <= 0 {
		return nil, fmt.Errorf("holds key %q with %v and %v GFLOP/s, not a result for %q", c.Key, c.Emulate, c.Hardware, key)
	}
	return &c, nil
}

// timeBF16 times calibrationShapes on bf16 values held as float32: be's
// Sgemm (the emulation) and g, taking turns, best of bf16Repeats each,
// each as nn's linear layers call it, their output rounded to bf16 (as
// the precision policy rounds a linear layer's):
//   - the emulation: the product, then a rounding pass over C;
//   - NativeBF16: float32 operands rounded as they are packed, C rounded
//     block by block as the kernel finishes it, and the weight of a
//     forward or dx product (B, where A is not transposed) packed once
//     before the timing, as nn keeps a frozen weight packed (LoRA's,
//     DoRA's and QLoRA's base);
//   - any other bf16 GEMM: the operands converted to bits first (a
//     forward or dx product's weight once, outside the timing, as a
//     base stored in bf16 comes), then the product and a rounding pass
//     over C.
//
// Timing the products alone favoured the other GEMMs: on a Zen 5 host
// oneDNN's measured 608 GFLOP/s against the native kernel's 593, and the
// LoRA bench step then ran at 19,800 tokens/s on oneDNN's against 22,300
// on the native kernel's.
func timeBF16(be Backend, g BF16Gemmer) BF16Speed {
	rng := rand.New(rand.NewPCG(3, 4))
	bf16Values := func(n int) []float32 {
		x := randFloat32s(rng, n)
		for i, v := range x {
			x[i] = math.Float32frombits(uint32(amp.BF16Bits(v)) << 16)
		}
		return x
	}
	var flops, emu, hw float64
	for _, sh := range calibrationShapes {
		a, b := bf16Values(sh.m*sh.k), bf16Values(sh.k*sh.n)
		c := make([]float32, sh.m*sh.n)
		lda, ldb := sh.lds()
		ab, bb := make([]uint16, len(a)), make([]uint16, len(b))
		nb, native := g.(*NativeBF16)
		var packed *PackedBF16
		if native && !sh.transA { // B is a weight: packed once, outside the timing
			packed = nb.PackB(nil, sh.transB, sh.k, sh.n, BF16Matrix{F32: b, Ld: ldb})
		}
		roundRows := func(i0, i1, j0, j1 int) {
			for i := i0; i < i1; i++ {
				amp.BF16.RoundSlice(c[i*sh.n+j0 : i*sh.n+j1])
			}
		}
		bestE, bestH := math.Inf(1), math.Inf(1)
		for r := 0; r <= bf16Repeats; r++ { // the first call warms caches and packs
			t0 := time.Now()
			be.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, a, lda, b, ldb, 0, c, sh.n)
			roundRows(0, sh.m, 0, sh.n)
			t1 := time.Now()
			if native {
				nb.GemmRound(sh.transA, sh.transB, sh.m, sh.n, sh.k, BF16Matrix{F32: a, Ld: lda}, BF16Matrix{F32: b, Ld: ldb}, packed, c, sh.n, nil)
			} else {
				amp.BF16.Bits16Slice(ab, a) // as nn encodes them (Engine.bf16Bits)
				if sh.transA || r == 0 {
					amp.BF16.Bits16Slice(bb, b)
				}
				g.GemmBF16(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, ab, lda, bb, ldb, 0, c, sh.n)
				roundRows(0, sh.m, 0, sh.n)
			}
			if r > 0 {
				bestE, bestH = min(bestE, t1.Sub(t0).Seconds()), min(bestH, time.Since(t1).Seconds())
			}
		}
		flops += 2 * float64(sh.m) * float64(sh.n) * float64(sh.k)
		emu += bestE
		hw += bestH
	}
	return BF16Speed{Emulate: flops / emu / 1e9, Hardware: flops / hw / 1e9}
}

// CheckBF16 computes products of bf16 values in every transpose
// combination, through both ways nn calls the GEMM (bf16 bits; for the
// native kernel, float32 operands rounded as they are packed too), at a
// ragged shape and one that spans several k slices, column blocks and
// row tiles,
// and holds each to a float64 reference within 2·γ_k·Σ|a||b|, u = 2⁻²⁴:
// the products of bf16 values are exact in fp32 and any order of fp32
// sums, pairs rounded first as VDPBF16PS rounds them included, is within
// it. Inputs are in (−1, 1), so no product is a denormal to be flushed.
// nil where g computes them correctly on this machine: auto checks every
// candidate before timing it; a run that asks for the hardware outright
// checks the one it takes.
func CheckBF16(g BF16Gemmer) error {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, sh := range [][3]int{{37, 45, 131}, {15, 1030, 1100}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b := randFloat32s(rng, m*k), randFloat32s(rng, k*n)
		ab, bb := make([]uint16, len(a)), make([]uint16, len(b))
		for i, v := range a {
			ab[i] = amp.BF16Bits(v)
			a[i] = math.Float32frombits(uint32(ab[i]) << 16)
		}
		for i, v := range b {
			bb[i] = amp.BF16Bits(v)
			b[i] = math.Float32frombits(uint32(bb[i]) << 16)
		}
		ku := float64(k) * 0x1p-24
		gamma := 2 * ku / (1 - ku)
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				lda, ldb := k, n
				if ta {
					lda = m
				}
				if tb {
					ldb = k
				}
				type way struct {
					name string
					run  func(c []float32)
				}
				ways := []way{{"bf16 bits", func(c []float32) { g.GemmBF16(ta, tb, m, n, k, 1, ab, lda, bb, ldb, 0, c, n) }}}
				if nb, ok := g.(*NativeBF16); ok {
					ways = append(ways, way{"float32 operands", func(c []float32) {
						nb.Gemm(ta, tb, m, n, k, 1, BF16Matrix{F32: a, Ld: lda}, BF16Matrix{F32: b, Ld: ldb}, nil, 0, c, n, nil)
					}})
				}
				want, abs := refProduct(ta, tb, m, n, k, a, lda, b, ldb)
				for _, w := range ways {
					c := make([]float32, m*n)
					w.run(c)
					for i, got := range c {
						if !(math.Abs(float64(got)-want[i]) <= gamma*abs[i]) {
							return fmt.Errorf("%d×%d×%d (transA %v, transB %v, %s): C[%d,%d] = %v, want %v within %.3g", m, n, k, ta, tb, w.name, i/n, i%n, got, want[i], gamma*abs[i])
						}
					}
				}
			}
		}
	}
	return nil
}
