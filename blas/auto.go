package blas

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Choice is the backend Choose opened, and why.
type Choice struct {
	Backend Backend
	Kind    Kind
	// Reason says why auto picked Backend ("" when it was named): the
	// calibration's figures, or the run's own record on a resume.
	Reason string
	// Warnings are problems that did not stop the choice: a calibration
	// cache that could not be read or written, a library left out.
	Warnings []string
}

// Choose opens the backend kind names, as Open does; "auto" opens the
// fastest backend on this machine, by a short calibration (measure)
// cached per machine, library and thread count as opt says.
func Choose(kind Kind, threads int, opt AutoOptions) (Choice, error) {
	if kind != KindAuto && kind != "" {
		be, err := openKind(kind, threads)
		return Choice{Backend: be, Kind: kind}, err
	}
	return chooseAuto(threads, opt, realProbe{})
}

// openKind opens one named backend.
func openKind(kind Kind, threads int) (Backend, error) {
	switch kind {
	case KindOpenBLAS:
		return OpenOpenBLAS(threads)
	case KindOneDNN:
		return OpenOneDNN(threads)
	case KindNative:
		return Native{Workers: threads}, nil
	case KindGonum:
		return Gonum{}, nil
	}
	return nil, fmt.Errorf("unknown BLAS backend %q (want auto, openblas, onednn, native or gonum)", kind)
}

// candidate is a backend auto may pick.
type candidate struct {
	kind  Kind
	label string // short, for the banner: "openblas(Haswell)"
	be    Backend
}

// errNotInstalled is a library that is not on this machine: auto passes
// over it without a word, unlike one that loads but cannot be used.
var errNotInstalled = errors.New("library not found")

// probe finds the candidates and measures them; tests replace it.
type probe interface {
	// candidates are the backends that load; skipped says why a library
	// that is installed is left out.
	candidates(threads int) (cs []candidate, skipped []string)
	measure(cs []candidate) []Measurement
	cpuSeconds() float64 // the process's CPU time so far; < 0 if unknown
}

type realProbe struct{}

func (realProbe) cpuSeconds() float64 { return processCPUSeconds() }

// candidates are the backends that load: native always, OpenBLAS and
// oneDNN where their libraries load (and OpenBLAS's kernels run on this
// CPU, see openBLASCoreCheck).
func (realProbe) candidates(threads int) ([]candidate, []string) {
	cs := []candidate{{KindNative, "native(" + nativeBest.name + ")", Native{Workers: threads}}}
	var skipped []string
	skip := func(err error) {
		if !errors.Is(err, errNotInstalled) {
			skipped = append(skipped, err.Error())
		}
	}
	if ob, err := OpenOpenBLAS(threads); err == nil {
		cs = append(cs, candidate{KindOpenBLAS, "openblas(" + coreLabel(ob.core) + ")", ob})
	} else {
		skip(err)
	}
	if d, err := OpenOneDNN(threads); err == nil {
		cs = append(cs, candidate{KindOneDNN, "onednn(" + d.isaLabel() + ")", d})
	} else {
		skip(err)
	}
	return cs, skipped
}

func coreLabel(core string) string {
	if core == "" {
		return "unknown core"
	}
	return core
}

// measure checks each candidate's products and times the correct ones
// (timeShapes).
func (realProbe) measure(cs []candidate) []Measurement {
	ms := make([]Measurement, len(cs))
	var timed []Backend
	var at []int
	for i, c := range cs {
		ms[i] = Measurement{Kind: c.kind, Label: c.label, Name: c.be.Name()}
		if err := checkCorrect(c.be); err != nil {
			ms[i].Error = err.Error()
			continue
		}
		timed, at = append(timed, c.be), append(at, i)
	}
	for j, g := range timeShapes(timed, calibrationShapes, calibrationRepeats) {
		ms[at[j]].GFLOPS = g
	}
	return ms
}

// Measurement is one backend's calibration result.
type Measurement struct {
	Kind   Kind    `json:"kind"`
	Label  string  `json:"label"`
	Name   string  `json:"name"`
	GFLOPS float64 `json:"gflops"`          // Σ flops / Σ best times over calibrationShapes
	Error  string  `json:"error,omitempty"` // it computed a wrong product: never picked
}

// calibrationShapes are the products of a training step of two model
// sizes, as linear layers run them: forward x·Wᵀ, dx = dy·W, dW = dyᵀ·x,
// at 512 tokens (2.8 GFLOP per pass over them); the small one is the README's bench model (d 256, MLP
// 688), the mid one d 512, MLP 1408; and a rank-8 LoRA pair, where the
// cost of a call into a C library shows.
var calibrationShapes = []calShape{
	{false, true, 512, 688, 256}, {false, false, 512, 256, 688}, {true, false, 688, 256, 512},
	{false, true, 512, 1408, 512}, {false, false, 512, 512, 1408}, {true, false, 1408, 512, 512},
	{false, true, 512, 8, 512}, {true, false, 8, 512, 512},
}

// calibrationRepeats is how often each shape is timed after a warm-up
// call; the best time counts. 5 passes of 2.8 GFLOP take about 0.1 s per
// backend at 150 GFLOP/s.
const calibrationRepeats = 5

type calShape struct {
	transA, transB bool
	m, n, k        int
}

// lds are the row strides of A and B stored densely.
func (sh calShape) lds() (lda, ldb int) {
	lda, ldb = sh.k, sh.n
	if sh.transA {
		lda = sh.m
	}
	if sh.transB {
		ldb = sh.k
	}
	return lda, ldb
}

// timeShapes returns, per backend, Σ flops / Σ (best of repeats) seconds
// over shapes, in GFLOP/s. The backends take turns, shape by shape and
// repeat by repeat, so that a machine whose load changes while they are
// measured slows each of them alike, and the best time of each is taken
// in the same quiet moments.
func timeShapes(bes []Backend, shapes []calShape, repeats int) []float64 {
	var flops float64
	secs := make([]float64, len(bes))
	rng := rand.New(rand.NewPCG(1, 2))
	for _, sh := range shapes {
		a := randFloat32s(rng, sh.m*sh.k)
		b := randFloat32s(rng, sh.k*sh.n)
		c := make([]float32, sh.m*sh.n)
		lda, ldb := sh.lds()
		best := make([]float64, len(bes))
		for i := range best {
			best[i] = math.Inf(1)
		}
		for r := 0; r <= repeats; r++ { // the first call warms caches and packs
			for i, be := range bes {
				t0 := time.Now()
				be.Sgemm(sh.transA, sh.transB, sh.m, sh.n, sh.k, 1, a, lda, b, ldb, 0, c, sh.n)
				if r > 0 {
					best[i] = min(best[i], time.Since(t0).Seconds())
				}
			}
		}
		flops += 2 * float64(sh.m) * float64(sh.n) * float64(sh.k)
		for i := range secs {
			secs[i] += best[i]
		}
	}
	g := make([]float64, len(bes))
	for i := range g {
		g[i] = flops / secs[i] / 1e9
	}
	return g
}

func randFloat32s(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	return x
}

// checkCorrect computes a product of odd sizes in every transpose
// combination and holds it to the float32 accumulation bound of a float64
// reference, γ_k·Σ|a||b| with γ_k = k·u/(1−k·u), u = 2⁻²⁴: any correct
// fp32 GEMM, whatever its order of summation, is within it.
func checkCorrect(be Backend) error {
	const m, n, k = 37, 45, 131
	rng := rand.New(rand.NewPCG(5, 6))
	a, b := randFloat32s(rng, m*k), randFloat32s(rng, k*n)
	ku := k * 0x1p-24
	gamma := ku / (1 - ku)
	for _, ta := range []bool{false, true} {
		for _, tb := range []bool{false, true} {
			lda, ldb := k, n
			if ta {
				lda = m
			}
			if tb {
				ldb = k
			}
			c := make([]float32, m*n)
			be.Sgemm(ta, tb, m, n, k, 1, a, lda, b, ldb, 0, c, n)
			want, abs := refProduct(ta, tb, m, n, k, a, lda, b, ldb)
			for i, got := range c {
				if !(math.Abs(float64(got)-want[i]) <= gamma*abs[i]) {
					return fmt.Errorf("wrong product (transA %v, transB %v): C[%d,%d] = %v, want %v within %.3g", ta, tb, i/n, i%n, got, want[i], gamma*abs[i])
				}
			}
		}
	}
	return nil
}

// refProduct is op(A)·op(B) (m×n, row-major) and Σ|a||b| per element,
// in float64: the reference the products are checked against.
func refProduct(ta, tb bool, m, n, k int, a []float32, lda int, b []float32, ldb int) (want, abs []float64) {
	want, abs = make([]float64, m*n), make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			for p := 0; p < k; p++ {
				ai, bi := i*lda+p, p*ldb+j
				if ta {
					ai = p*lda + i
				}
				if tb {
					bi = j*ldb + p
				}
				x := float64(a[ai]) * float64(b[bi])
				want[i*n+j] += x
				abs[i*n+j] += math.Abs(x)
			}
		}
	}
	return want, abs
}

// pick returns the fastest measurement without an error; ties go to the
// earlier one (native first). ok is false when none is usable.
func pick(ms []Measurement) (best Measurement, ok bool) {
	for _, m := range ms {
		if m.Error == "" && m.GFLOPS > 0 && (!ok || m.GFLOPS > best.GFLOPS) {
			best, ok = m, true
		}
	}
	return best, ok
}

// reason is auto's banner line: what it picked and the figures it picked
// it by, fastest first.
func reason(best Measurement, ms []Measurement, measured time.Time, source string) string {
	sorted := slices.Clone(ms)
	slices.SortStableFunc(sorted, func(a, b Measurement) int {
		switch {
		case a.GFLOPS > b.GFLOPS:
			return -1
		case a.GFLOPS < b.GFLOPS:
			return 1
		}
		return 0
	})
	var parts []string
	for _, m := range sorted {
		if m.Error != "" {
			parts = append(parts, m.Label+" wrong results")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f", m.Label, m.GFLOPS))
	}
	return fmt.Sprintf("auto → %s: fastest of %s GFLOP/s at training shapes, measured %s, %s",
		best.Kind, strings.Join(parts, ", "), measured.UTC().Format("2006-01-02 15:04 UTC"), source)
}
