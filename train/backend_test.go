package train

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/dist"
)

// readJSON reads a run directory's JSON file into a map.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// summary.json names the backend that computed the run (its Name, with
// kernels or core) and why it ran, and run.json its kind and auto's
// reason: another backend rounds differently, and `mixtune compare` shows
// which one each run used.
func TestSummaryNamesBackend(t *testing.T) {
	dir := fixture(t)
	sum, err := Run(context.Background(), resumeRecipe(t, dir, "train.steps=2"), Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	s := readJSON(t, filepath.Join(sum.RunDir, summaryFile))
	if s["backend"] != "gonum (pure Go)" || s["backend_reason"] != "named by the recipe (compute.blas: gonum)" {
		t.Errorf("summary.json: backend %q, backend_reason %q", s["backend"], s["backend_reason"])
	}
	m := readJSON(t, filepath.Join(sum.RunDir, "run.json"))
	if m["blas"] != "gonum (pure Go)" || m["blas_kind"] != "gonum" {
		t.Errorf("run.json: blas %q, blas_kind %q", m["blas"], m["blas_kind"])
	}
}

// With compute.blas: auto, the banner, summary.json and run.json say
// why auto picked its backend; a resumed run keeps the backend its
// run.json says it started with, whatever a calibration would pick now
// (here: a run.json that says gonum, which auto never picks), so that it
// computes as the uninterrupted run did.
func TestResumeKeepsStartedBackend(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := fixture(t)
	r := resumeRecipe(t, dir, "compute.blas=auto")
	ctx, cancel := context.WithCancel(context.Background())
	var log strings.Builder
	sum, err := Run(ctx, r, Options{Out: &log, afterStep: func(s int) {
		if s == 5 {
			cancel()
		}
	}})
	cancel()
	if err != ErrInterrupted {
		t.Fatalf("first leg: %v, want an interruption", err)
	}
	if !strings.Contains(log.String(), "\nblas: auto → ") {
		t.Errorf("the banner does not say why auto picked its backend:\n%s", log.String())
	}
	runJSON := filepath.Join(sum.RunDir, "run.json")
	m := readJSON(t, runJSON)
	kind, _ := m["blas_kind"].(string)
	if reason, _ := m["blas_reason"].(string); !autoPicked(reason, kind) {
		t.Fatalf("run.json: blas_kind %q, blas_reason %q", kind, reason)
	}
	// the run started on gonum, as far as run.json knows
	m["blas"], m["blas_kind"] = "gonum (pure Go)", string(blas.KindGonum)
	b, _ := json.Marshal(m)
	if err := os.WriteFile(runJSON, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), r, Options{Out: io.Discard, ResumeDir: sum.RunDir}); err != nil {
		t.Fatal(err)
	}
	s := readJSON(t, filepath.Join(sum.RunDir, summaryFile))
	if reason, _ := s["backend_reason"].(string); s["backend"] != "gonum (pure Go)" || !strings.Contains(reason, "the backend this run started with") {
		t.Errorf("resumed summary.json: backend %q, backend_reason %q", s["backend"], s["backend_reason"])
	}
}

func TestBackendKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		want blas.Kind
	}{
		{"openblas (OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64; libopenblas.so.0, 2 goroutines × 1 thread)", blas.KindOpenBLAS},
		{"onednn (libdnnl.so.2 2.6.3, OpenMP, AVX2; 2 goroutines × 1 thread)", blas.KindOneDNN},
		{"native (Go, AVX2/FMA kernel)", blas.KindNative},
		{"gonum (pure Go)", blas.KindGonum},
		{"", ""}, {"cuda (H100)", ""}, {"auto", ""},
	} {
		if got := backendKind(tc.name); got != tc.want {
			t.Errorf("backendKind(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The ranks of a data-parallel job run the backend rank 0's calibration
// picked: each rank measuring on its own could pick another on a loaded
// machine, and ranks that round differently no longer train as one
// process would.
func TestRanksRunRankZerosBackend(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	comms := dist.NewLocal(2)
	parts := make([]*components, len(comms))
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		parts[i] = &components{comm: c}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = parts[i].openBackend(ComputeConfig{BLAS: blas.KindAuto, Threads: 1}, "")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	kind := strings.TrimPrefix(strings.SplitN(parts[0].blasReason, ":", 2)[0], "auto → ")
	if !autoPicked(parts[0].blasReason, kind) || parts[1].blasReason != "auto → "+kind+": picked by rank 0" {
		t.Errorf("rank 0: %q; rank 1: %q", parts[0].blasReason, parts[1].blasReason)
	}
}

// A resumed run whose backend runs other kernels than the run started on
// (here a run.json that names another native kernel) says so: its numbers
// will differ from an uninterrupted run's. The thread count is no such
// difference.
func TestResumeWarnsOfOtherKernels(t *testing.T) {
	dir := fixture(t)
	r := resumeRecipe(t, dir, "compute.blas=native")
	ctx, cancel := context.WithCancel(context.Background())
	sum, err := Run(ctx, r, Options{Out: io.Discard, afterStep: func(s int) {
		if s == 5 {
			cancel()
		}
	}})
	cancel()
	if err != ErrInterrupted {
		t.Fatalf("first leg: %v, want an interruption", err)
	}
	runJSON := filepath.Join(sum.RunDir, "run.json")
	m := readJSON(t, runJSON)
	now, _ := m["blas"].(string)
	m["blas"] = "native (Go, another kernel)"
	b, _ := json.Marshal(m)
	if err := os.WriteFile(runJSON, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	if _, err := Run(context.Background(), r, Options{Out: &log, ResumeDir: sum.RunDir}); err != nil {
		t.Fatal(err)
	}
	if want := "warning: this run started on native (Go, another kernel) and resumes on " + now + ": other kernels round differently"; !strings.Contains(log.String(), want) {
		t.Errorf("no warning %q in\n%s", want, log.String())
	}
}

func TestSameKernels(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"onednn (libdnnl.so.2 2.6.3, OpenMP, AVX2; 2 goroutines × 1 thread)", "onednn (libdnnl.so.2 2.6.3, OpenMP, AVX2; 16 goroutines × 1 thread)", true},
		{"openblas (OpenBLAS 0.3.21 Haswell; libopenblas.so.0, 2 goroutines × 1 thread)", "openblas (OpenBLAS 0.3.21 Zen; libopenblas.so.0, 2 goroutines × 1 thread)", false},
		{"native (Go, AVX2/FMA kernel)", "native (Go, AVX-512/FMA kernel)", true},
		{"native (Go, AVX2/FMA kernel)", "native (Go, portable kernel)", false},
		{"gonum (pure Go)", "gonum (pure Go)", true},
	} {
		if got := sameKernels(tc.a, tc.b); got != tc.same {
			t.Errorf("sameKernels(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

// autoPicked is whether reason is auto's for picking kind: the fastest
// of the backends it measured, or, on a machine with only Go, the one
// backend that loads.
func autoPicked(reason, kind string) bool {
	p := "auto → " + kind + ": "
	return strings.HasPrefix(reason, p+"fastest of ") ||
		kind == string(blas.KindNative) && strings.HasPrefix(reason, p) && strings.Contains(reason, ", the only backend that loads here")
}
