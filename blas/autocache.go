package blas

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/cpu"

	"github.com/mixtune/mixtune/internal/calcache"
)

// CacheMode says how auto uses its calibration cache.
type CacheMode = calcache.Mode

const (
	// CacheUse reads a cached calibration for this machine, or measures
	// and writes one.
	CacheUse = calcache.Use
	// CacheRefresh measures again and replaces the cached calibration.
	CacheRefresh = calcache.Refresh
	// CacheOff measures and neither reads nor writes the cache.
	CacheOff = calcache.Off
)

// CalibrateEnv is the environment variable that sets the CacheMode:
// unset or "cache", "refresh", or "off".
const CalibrateEnv = "MIXTUNE_BLAS_CALIBRATE"

// AutoOptions says how auto chooses.
type AutoOptions struct {
	Cache CacheMode
	// Dir holds the cached calibrations; "" is os.UserCacheDir()/mixtune/blas.
	Dir string
	// Getenv reads the environment for the cache key (OPENBLAS_CORETYPE
	// and the like); nil is os.Getenv.
	Getenv func(string) string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// AutoOptionsFromEnv reads CalibrateEnv through getenv.
func AutoOptionsFromEnv(getenv func(string) string) (AutoOptions, error) {
	mode, err := calcache.ParseMode(CalibrateEnv, getenv(CalibrateEnv))
	return AutoOptions{Getenv: getenv, Cache: mode}, err
}

// busyShare is the share of its threads' CPU time below which the
// calibration counts as measured on a busy machine, and is not cached: on
// an idle 2-core Zen 3 it gets about 90% (small products run on one
// thread); with other processes compiling beside it, 10-30%.
const busyShare = 0.6

// calibration is one cached result: the key it was measured under, in
// words and hashed, and the measurements.
type calibration struct {
	Key      string        `json:"key"`
	KeyText  []string      `json:"key_fields"`
	Measured time.Time     `json:"measured"`
	Results  []Measurement `json:"results"`
}

// calibrationVersion changes whenever the shapes or the measure change,
// so that older cached results are measured again.
const calibrationVersion = 1

// keyFields is what the result of a calibration depends on: the CPU and
// the features its kernels use, each candidate's library, version,
// kernels and path (its Name), the environment variables that change
// which kernels a library runs, and the thread count.
func keyFields(cs []candidate, threads int, getenv func(string) string) []string {
	f := []string{
		"calibration " + strconv.Itoa(calibrationVersion),
		"cpu " + cpuModel(),
		"arch " + runtime.GOOS + "/" + runtime.GOARCH,
		"features " + kernelFeatures(),
		"threads " + strconv.Itoa(threads),
	}
	for _, env := range []string{"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "MIXTUNE_OPENBLAS", "MIXTUNE_ONEDNN", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"} {
		f = append(f, env+"="+getenv(env))
	}
	for _, c := range cs {
		f = append(f, string(c.kind)+" "+c.be.Name())
	}
	return f
}

// cpuModel is the CPU's model name from /proc/cpuinfo where there is one.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// kernelFeatures are the CPU features the backends' kernels dispatch on.
func kernelFeatures() string {
	var fs []string
	for _, f := range []struct {
		ok   bool
		name string
	}{
		{cpu.X86.HasAVX, "avx"}, {cpu.X86.HasAVX2, "avx2"}, {cpu.X86.HasFMA, "fma"},
		{cpu.X86.HasAVX512F, "avx512f"}, {cpu.X86.HasAVX512BW, "avx512bw"}, {cpu.X86.HasAVX512VL, "avx512vl"},
		{cpu.X86.HasAVX512DQ, "avx512dq"}, {cpu.X86.HasAVX512BF16, "avx512bf16"}, {cpu.X86.HasAMXBF16, "amxbf16"},
		{cpu.ARM64.HasASIMD, "asimd"}, {cpu.ARM64.HasSVE, "sve"},
	} {
		if f.ok {
			fs = append(fs, f.name)
		}
	}
	return strings.Join(fs, ",")
}

// chooseAuto is Choose("auto"): the candidates that load, measured or
// read from the cache, and the fastest of them that computes correctly.
func chooseAuto(threads int, opt AutoOptions, p probe) (Choice, error) {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	getenv, now := opt.Getenv, opt.Now
	if getenv == nil {
		getenv = os.Getenv
	}
	if now == nil {
		now = time.Now
	}
	cs, skipped := p.candidates(threads)
	fields := keyFields(cs, threads, getenv)
	key := calcache.Key(fields)
	var warnings []string
	for _, s := range skipped {
		warnings = append(warnings, "auto left a backend out: "+s)
	}
	if len(cs) == 1 {
		// nothing to compare: a machine with only Go gets the native kernel
		// at once, with no measurement and no cache to write
		c := cs[0]
		return Choice{Backend: c.be, Kind: c.kind, Reason: fmt.Sprintf("auto → %s: %s, the only backend that loads here (no OpenBLAS or oneDNN library to compare)", c.kind, c.label), Warnings: warnings}, nil
	}
	path := ""
	if opt.Cache != CacheOff {
		dir, err := calcache.Dir(opt.Dir, "blas")
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("no cache for the BLAS calibration (%v): measuring each run", err))
		} else {
			path = filepath.Join(dir, key+".json")
		}
	}
	var cal *calibration
	source := ""
	if path != "" && opt.Cache == CacheUse {
		c, err := readCalibration(path, key, cs)
		switch {
		case err == nil:
			cal, source = c, "cached "+path
		case !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
			warnings = append(warnings, fmt.Sprintf("BLAS calibration cache %s: %v: measuring again", path, err))
		}
	}
	if cal == nil {
		t0, cpu0 := now(), p.cpuSeconds()
		cal = &calibration{Key: key, KeyText: fields, Measured: t0}
		cal.Results = p.measure(cs)
		wall, cpu := now().Sub(t0).Seconds(), p.cpuSeconds()-cpu0
		source = fmt.Sprintf("in %.1f s", wall)
		share := cpu / (wall * float64(threads))
		busy := cpu0 >= 0 && wall > 0 && share < busyShare
		switch {
		case busy:
			warnings = append(warnings, fmt.Sprintf("the machine was busy while auto measured the BLAS backends (they got %.0f%% of %d CPUs): the choice may not hold, and is measured again next run", 100*share, threads))
			source += fmt.Sprintf(" on a busy machine (%.0f%% of %d CPUs), not cached", 100*share, threads)
		case path == "":
			source += ", not cached"
		default:
			if err := calcache.Write(path, cal); err != nil {
				warnings = append(warnings, fmt.Sprintf("could not cache the BLAS calibration: %v", err))
				source += ", not cached"
			} else {
				source += ", cached " + path
			}
		}
	}
	best, ok := pick(cal.Results)
	if !ok {
		return Choice{}, fmt.Errorf("blas: auto: no backend computed correctly: %+v", cal.Results)
	}
	for _, m := range cal.Results {
		if m.Error != "" {
			warnings = append(warnings, fmt.Sprintf("%s left out: %s", m.Label, m.Error))
		}
	}
	for _, c := range cs {
		if c.kind == best.Kind {
			return Choice{Backend: c.be, Kind: c.kind, Reason: reason(best, cal.Results, cal.Measured, source), Warnings: warnings}, nil
		}
	}
	return Choice{}, fmt.Errorf("blas: auto: %s was measured but is not a candidate", best.Kind)
}

// readCalibration reads a cached calibration and checks that it is the
// one for key and has a result for every candidate.
func readCalibration(path, key string, cs []candidate) (*calibration, error) {
	var c calibration
	if err := calcache.Read(path, &c); err != nil {
		return nil, err
	}
	if c.Key != key {
		return nil, fmt.Errorf("holds key %q, not %q", c.Key, key)
	}
	for _, cand := range cs {
		found := false
		for _, m := range c.Results {
			found = found || m.Kind == cand.kind
		}
		if !found {
			return nil, fmt.Errorf("has no result for %s", cand.kind)
		}
	}
	return &c, nil
}
