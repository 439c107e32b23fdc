package blas

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPick(t *testing.T) {
	for _, tc := range []struct {
		name string
		ms   []Measurement
		want Kind
		ok   bool
	}{
		{"fastest wins", []Measurement{{Kind: KindNative, GFLOPS: 180}, {Kind: KindOpenBLAS, GFLOPS: 250}, {Kind: KindOneDNN, GFLOPS: 310}}, KindOneDNN, true},
		// OPENBLAS_CORETYPE=Haswell on an AVX-512 machine: native's
		// AVX-512 kernel beats OpenBLAS's AVX2 one (issue 25)
		{"native beats a slow OpenBLAS", []Measurement{{Kind: KindNative, GFLOPS: 200}, {Kind: KindOpenBLAS, GFLOPS: 150}}, KindNative, true},
		{"a wrong backend is never picked", []Measurement{{Kind: KindNative, GFLOPS: 100}, {Kind: KindOneDNN, GFLOPS: 900, Error: "wrong product"}}, KindNative, true},
		{"a tie goes to the earlier one", []Measurement{{Kind: KindNative, GFLOPS: 100}, {Kind: KindOpenBLAS, GFLOPS: 100}}, KindNative, true},
		{"no time measured is no result", []Measurement{{Kind: KindNative, GFLOPS: 0}, {Kind: KindOpenBLAS, GFLOPS: 50}}, KindOpenBLAS, true},
		{"nothing usable", []Measurement{{Kind: KindOneDNN, Error: "wrong product"}}, "", false},
		{"nothing measured", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := pick(tc.ms)
			if ok != tc.ok || got.Kind != tc.want {
				t.Errorf("pick = %s, %v; want %s, %v", got.Kind, ok, tc.want, tc.ok)
			}
		})
	}
}

// namedNative is a native backend under another name, standing in for a
// library in the fake probe.
type namedNative struct {
	Native
	name string
}

func (n namedNative) Name() string { return n.name }

// fakeProbe offers fixed candidates with fixed figures and counts the
// measurements it makes.
type fakeProbe struct {
	names    map[Kind]string // the candidates and their Names, in kinds' order
	kinds    []Kind
	gflops   map[Kind]float64
	measured int
	skipped  []string // installed libraries left out
	trackCPU bool     // cpuSeconds reports CPU time
	busy     bool     // the process gets no CPU time while it measures
	cpu      float64  // CPU seconds so far, advanced by the fake clock's users
}

func (p *fakeProbe) candidates(threads int) ([]candidate, []string) {
	var cs []candidate
	for _, k := range p.kinds {
		cs = append(cs, candidate{k, string(k), namedNative{Native{Workers: threads}, p.names[k]}})
	}
	return cs, p.skipped
}

func (p *fakeProbe) measure(cs []candidate) []Measurement {
	var ms []Measurement
	for _, c := range cs {
		p.measured++
		ms = append(ms, Measurement{Kind: c.kind, Label: c.label, Name: c.be.Name(), GFLOPS: p.gflops[c.kind]})
	}
	return ms
}

// cpuSeconds is unknown (so not checked) unless trackCPU: then p.cpu, or
// 0 throughout when busy.
func (p *fakeProbe) cpuSeconds() float64 {
	switch {
	case !p.trackCPU:
		return -1
	case p.busy:
		return 0
	}
	return p.cpu
}

func newFakeProbe() *fakeProbe {
	return &fakeProbe{
		kinds:  []Kind{KindNative, KindOpenBLAS, KindOneDNN},
		names:  map[Kind]string{KindNative: "native (Go, AVX2/FMA kernel)", KindOpenBLAS: "openblas (OpenBLAS 0.3.21 Haswell)", KindOneDNN: "onednn (libdnnl.so.2 2.6.3, AVX2)"},
		gflops: map[Kind]float64{KindNative: 180, KindOpenBLAS: 250, KindOneDNN: 310},
	}
}

// env is a fixed environment for the cache key.
func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// The calibration is measured once per key and then read from the cache;
// a change of OpenBLAS core type, of a library, or of the thread count
// measures again, and so do CacheRefresh and CacheOff (which writes
// nothing).
func TestAutoCalibrationCache(t *testing.T) {
	dir := t.TempDir()
	p := newFakeProbe()
	clock := time.Date(2026, 11, 26, 1, 2, 0, 0, time.UTC)
	opt := AutoOptions{Dir: dir, Getenv: env(nil), Now: func() time.Time { return clock }}
	step := func(what string, threads int, opt AutoOptions, wantMeasured int) Choice {
		t.Helper()
		before := p.measured
		c, err := chooseAuto(threads, opt, p)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := p.measured - before; got != wantMeasured {
			t.Fatalf("%s: %d backends measured, want %d (reason %q)", what, got, wantMeasured, c.Reason)
		}
		if len(c.Warnings) > 0 {
			t.Fatalf("%s: warnings %q", what, c.Warnings)
		}
		return c
	}
	first := step("first run", 2, opt, 3)
	if first.Kind != KindOneDNN || !strings.HasPrefix(first.Reason, "auto → onednn: fastest of onednn 310, openblas 250, native 180 GFLOP/s at training shapes, measured 2026-11-26 01:02 UTC, in 0.0 s, cached "+dir) {
		t.Fatalf("first choice %s, reason %q", first.Kind, first.Reason)
	}
	again := step("same key", 2, opt, 0)
	if !strings.Contains(again.Reason, "measured 2026-11-26 01:02 UTC, cached "+filepath.Join(dir, "")) || again.Kind != KindOneDNN {
		t.Fatalf("cached choice %s, reason %q", again.Kind, again.Reason)
	}
	step("another thread count", 1, opt, 3)
	haswell := opt
	haswell.Getenv = env(map[string]string{"OPENBLAS_CORETYPE": "Haswell"})
	step("OPENBLAS_CORETYPE set", 2, haswell, 3)
	step("OPENBLAS_CORETYPE set, again", 2, haswell, 0)
	p.names[KindOpenBLAS] = "openblas (OpenBLAS 0.3.26 Zen)"
	step("another OpenBLAS", 2, opt, 3)
	refresh := opt
	refresh.Cache = CacheRefresh
	p.gflops[KindNative] = 400
	if c := step("refresh", 2, refresh, 3); c.Kind != KindNative {
		t.Fatalf("refresh picked %s, want the re-measured native", c.Kind)
	}
	if c := step("after a refresh", 2, opt, 0); c.Kind != KindNative {
		t.Fatalf("after a refresh: %s, want native from the refreshed cache", c.Kind)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	off := opt
	off.Cache = CacheOff
	if c := step("cache off", 2, off, 3); !strings.Contains(c.Reason, "not cached") {
		t.Fatalf("cache off: reason %q", c.Reason)
	}
	if after, _ := filepath.Glob(filepath.Join(dir, "*.json")); len(after) != len(files) {
		t.Fatalf("cache off wrote a file: %d before, %d after", len(files), len(after))
	}
}

// A damaged cache file, or a cache directory that cannot be written,
// measures and picks as without a cache, with a warning, not a failure.
func TestAutoCalibrationCacheFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir, file string) string // returns the Dir to use
		warn   string
	}{
		{"corrupt file", func(t *testing.T, dir, file string) string {
			if err := os.WriteFile(file, []byte("{not json"), 0o644); err != nil {
				t.Fatal(err)
			}
			return dir
		}, "unreadable"},
		{"file of another key", func(t *testing.T, dir, file string) string {
			if err := os.WriteFile(file, []byte(`{"key":"other","results":[]}`), 0o644); err != nil {
				t.Fatal(err)
			}
			return dir
		}, `holds key "other"`},
		{"unwritable directory", func(t *testing.T, dir, file string) string {
			blocker := filepath.Join(dir, "a-file")
			if err := os.WriteFile(blocker, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(blocker, "cache") // a directory under a file cannot be made, even by root
		}, "could not cache the BLAS calibration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := newFakeProbe()
			opt := AutoOptions{Dir: dir, Getenv: env(nil)}
			if _, err := chooseAuto(2, opt, p); err != nil { // writes the good file
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
			if len(files) != 1 {
				t.Fatalf("%d cache files, want 1", len(files))
			}
			opt.Dir = tc.damage(t, dir, files[0])
			p.measured = 0
			c, err := chooseAuto(2, opt, p)
			if err != nil {
				t.Fatalf("a cache fault failed the choice: %v", err)
			}
			if p.measured != 3 || c.Kind != KindOneDNN {
				t.Fatalf("measured %d, picked %s; want 3 and onednn", p.measured, c.Kind)
			}
			if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], tc.warn) {
				t.Fatalf("warnings %q, want one containing %q", c.Warnings, tc.warn)
			}
		})
	}
}

func TestAutoOptionsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  CacheMode
		err   bool
	}{
		{"", CacheUse, false}, {"cache", CacheUse, false}, {"refresh", CacheRefresh, false}, {"REFRESH", CacheRefresh, false},
		{"off", CacheOff, false}, {"1", 0, true}, {"force", 0, true},
	} {
		opt, err := AutoOptionsFromEnv(env(map[string]string{CalibrateEnv: tc.value}))
		if (err != nil) != tc.err || err == nil && opt.Cache != tc.want {
			t.Errorf("%s=%q: %v, %v; want %v (error %v)", CalibrateEnv, tc.value, opt.Cache, err, tc.want, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), CalibrateEnv) {
			t.Errorf("the error does not name %s: %v", CalibrateEnv, err)
		}
	}
}

func TestOpenBLASCoreCheck(t *testing.T) {
	zen3 := x86Features{avx: true, avx2: true, fma: true}
	zen4 := x86Features{avx: true, avx2: true, fma: true, avx512: true, avx512bf16: true}
	spr := x86Features{avx: true, avx2: true, fma: true, avx512: true, avx512bf16: true, amx: true}
	for _, tc := range []struct {
		core string
		f    x86Features
		ok   bool
	}{
		{"Haswell", zen3, true}, {"Zen", zen3, true}, {"Prescott", zen3, true}, {"Sandybridge", zen3, true},
		{"SkylakeX", zen3, false}, {"Cooperlake", zen3, false}, {"SapphireRapids", zen3, false},
		{"SkylakeX", zen4, true}, {"Cooperlake", zen4, true}, {"SapphireRapids", zen4, false},
		{"SapphireRapids", spr, true}, {"Haswell", x86Features{avx: true}, false}, {"", zen3, true},
	} {
		err := openBLASCoreCheck(tc.core, tc.f)
		if (err == nil) != tc.ok {
			t.Errorf("%s on %+v: %v, want ok %v", tc.core, tc.f, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tc.core) {
			t.Errorf("the error does not name the core: %v", err)
		}
	}
}

// wrongBackend adds one to a product's first element.
type wrongBackend struct{ Native }

func (w wrongBackend) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	w.Native.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	c[0]++
}

func TestCheckCorrect(t *testing.T) {
	if err := checkCorrect(Native{Workers: 2}); err != nil {
		t.Errorf("native: %v", err)
	}
	if err := checkCorrect(Gonum{}); err != nil {
		t.Errorf("gonum: %v", err)
	}
	if err := checkCorrect(wrongBackend{Native{Workers: 1}}); err == nil || !strings.Contains(err.Error(), "C[0,0]") {
		t.Errorf("a wrong product passed: %v", err)
	}
}

// On this machine: auto measures every backend that loads, picks the
// fastest, and says so. The figures are logged.
func TestAutoOnThisMachine(t *testing.T) {
	dir := t.TempDir()
	c, err := Choose(KindAuto, 0, AutoOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s\n%s", c.Backend.Name(), c.Reason)
	if !strings.HasPrefix(c.Backend.Name(), string(c.Kind)) {
		t.Errorf("picked %s (%s), reason %q", c.Kind, c.Backend.Name(), c.Reason)
	}
	if strings.HasPrefix(c.Reason, "auto → native: native") && strings.Contains(c.Reason, ", the only backend that loads here") {
		// a machine with only Go: nothing measured, nothing cached
		if files, _ := os.ReadDir(dir); len(files) != 0 {
			t.Errorf("with one backend, %d cache files written", len(files))
		}
		return
	}
	if !strings.HasPrefix(c.Reason, "auto → "+string(c.Kind)+": fastest of ") {
		t.Errorf("picked %s (%s), reason %q", c.Kind, c.Backend.Name(), c.Reason)
	}
	if strings.Contains(c.Reason, "on a busy machine") {
		t.Logf("measured on a busy machine: not cached, so the cache is not checked here (TestAutoCalibrationCache does)")
		return
	}
	again, err := Choose(KindAuto, 0, AutoOptions{Dir: dir})
	if err != nil || again.Kind != c.Kind || !strings.Contains(again.Reason, ", cached "+dir) {
		t.Errorf("second choice %s, %v, reason %q", again.Kind, err, again.Reason)
	}
}

// OPENBLAS_CORETYPE naming kernels this CPU cannot run is refused when
// OpenBLAS loads, with the core's name, instead of dying of SIGILL at the
// first product (it did, with SkylakeX on an AVX2-only Zen 3). OpenBLAS
// reads the variable once, when it is loaded, so a child process runs it.
func TestOpenBLASUnsupportedCoreType(t *testing.T) {
	if os.Getenv("MIXTUNE_TEST_CORE_CHILD") == "1" {
		o, err := OpenOpenBLAS(1)
		if err != nil {
			fmt.Println("refused:", err)
			return
		}
		c := make([]float32, 64*64)
		o.Sgemm(false, false, 64, 64, 64, 1, c, 64, c, 64, 0, c, 64)
		fmt.Printf("ran core=%s\n", o.core)
		return
	}
	if _, err := OpenOpenBLAS(1); err != nil {
		t.Skipf("no OpenBLAS: %v", err)
	}
	core := ""
	for _, c := range []string{"SkylakeX", "Cooperlake", "SapphireRapids"} {
		if openBLASCoreCheck(c, hostX86Features()) != nil {
			core = c
			break
		}
	}
	if core == "" {
		t.Skip("this CPU runs every OpenBLAS kernel family checked")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenBLASUnsupportedCoreType$")
	cmd.Env = append(os.Environ(), "MIXTUNE_TEST_CORE_CHILD=1", "OPENBLAS_CORETYPE="+core)
	out, err := cmd.CombinedOutput()
	switch s := string(out); {
	case err == nil && strings.Contains(s, "refused:") && strings.Contains(s, core):
		t.Logf("OPENBLAS_CORETYPE=%s: %s", core, strings.TrimSpace(s[strings.Index(s, "refused:"):]))
	case err == nil && strings.Contains(s, "ran core=") && !strings.Contains(s, "ran core="+core):
		t.Skipf("this OpenBLAS does not know core %s: %s", core, s)
	default:
		t.Fatalf("OPENBLAS_CORETYPE=%s: %v\n%.2000s", core, err, s)
	}
}

// TestOpenBLASReportsCore says which kernels OpenBLAS runs, for CI's log
// (.ci/run runs the backend tests once per core type the CPU supports,
// and skips a core type where this test skips: OpenBLAS then runs
// another family than OPENBLAS_CORETYPE names, as it does with a name it
// does not know, and those runs would not test what they say). It fails
// where OpenBLAS does not say which kernels it runs: auto's cache key and
// the banner need that.
func TestOpenBLASReportsCore(t *testing.T) {
	o, err := OpenOpenBLAS(1)
	if err != nil {
		t.Skipf("no OpenBLAS: %v", err)
	}
	if o.core == "" {
		t.Fatalf("%s does not name its kernels (openblas_get_corename)", o.Name())
	}
	want, set := os.LookupEnv("OPENBLAS_CORETYPE")
	t.Logf("OpenBLAS core: %s (OPENBLAS_CORETYPE %s)", coreLabel(o.core), map[bool]string{true: "= " + want, false: "unset"}[set])
	if want != "" && !strings.EqualFold(o.core, want) {
		t.Skipf("OPENBLAS_CORETYPE=%s, but OpenBLAS runs its %s kernels: this OpenBLAS does not know that name", want, coreLabel(o.core))
	}
}

// A calibration measured while other processes held the CPUs is used
// but not cached, with a warning: a busy moment must not fix the choice
// for good.
func TestAutoBusyMachineNotCached(t *testing.T) {
	for _, busy := range []bool{false, true} {
		dir := t.TempDir()
		p := newFakeProbe()
		p.trackCPU, p.busy = true, busy
		clock := time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)
		opt := AutoOptions{Dir: dir, Getenv: env(nil), Now: func() time.Time {
			clock = clock.Add(time.Second)
			p.cpu += 2 // two threads busy for the second, as far as an idle machine goes
			return clock
		}}
		for range 2 {
			c, err := chooseAuto(2, opt, p)
			if err != nil {
				t.Fatal(err)
			}
			warned := len(c.Warnings) == 1 && strings.Contains(c.Warnings[0], "the machine was busy")
			if warned != busy || strings.Contains(c.Reason, "on a busy machine") != busy {
				t.Errorf("busy %v: warnings %q, reason %q", busy, c.Warnings, c.Reason)
			}
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		wantFiles, wantMeasured := 1, 3
		if busy {
			wantFiles, wantMeasured = 0, 6
		}
		if len(files) != wantFiles || p.measured != wantMeasured {
			t.Errorf("busy %v: %d cache files, %d measured; want %d, %d", busy, len(files), p.measured, wantFiles, wantMeasured)
		}
	}
}

// An installed library that cannot be used (OpenBLAS with a core type
// this CPU cannot run) is left out with a warning; one that is not
// installed is left out without a word (realProbe: errNotInstalled).
func TestAutoWarnsOfUnusableLibrary(t *testing.T) {
	p := newFakeProbe()
	p.kinds = []Kind{KindNative, KindOneDNN}
	p.skipped = []string{"load OpenBLAS from libopenblas.so.0: OpenBLAS chose its SkylakeX kernels"}
	c, err := chooseAuto(2, AutoOptions{Dir: t.TempDir(), Getenv: env(nil)}, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0], "auto left a backend out: load OpenBLAS from libopenblas.so.0: OpenBLAS chose its SkylakeX kernels") {
		t.Errorf("warnings %q", c.Warnings)
	}
	t.Setenv("MIXTUNE_OPENBLAS", "/nonexistent/libopenblas.so.0")
	if _, skipped := (realProbe{}).candidates(1); len(skipped) > 0 && strings.Contains(strings.Join(skipped, " "), "OpenBLAS") {
		t.Errorf("a missing OpenBLAS is reported: %q", skipped)
	}
}

// With one backend that loads (a machine with only Go), auto takes it
// without measuring, caching or warning about a busy machine.
func TestAutoOneCandidateIsNotMeasured(t *testing.T) {
	p := newFakeProbe()
	p.kinds = []Kind{KindNative}
	p.trackCPU, p.busy = true, true
	dir := t.TempDir()
	c, err := chooseAuto(2, AutoOptions{Dir: dir, Getenv: env(nil)}, p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != KindNative || p.measured != 0 || len(c.Warnings) != 0 {
		t.Fatalf("chose %s after %d measurements, warnings %q", c.Kind, p.measured, c.Warnings)
	}
	if !strings.HasPrefix(c.Reason, "auto → native: native, the only backend that loads here") {
		t.Fatalf("reason %q", c.Reason)
	}
	if files, _ := os.ReadDir(dir); len(files) != 0 {
		t.Fatalf("wrote %d cache files", len(files))
	}
}
