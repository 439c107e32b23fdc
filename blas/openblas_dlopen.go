//go:build (darwin || freebsd || linux || netbsd) && !android && !faketime

package blas

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// openBLASCandidates are the sonames tried in order. MIXTUNE_OPENBLAS, when
// set, names the library file to load instead.
var openBLASCandidates = []string{"libopenblas.so.0", "libopenblas.so", "libopenblas.dylib"}

// OpenOpenBLAS loads OpenBLAS; threads is how many goroutines share a
// large product (0: GOMAXPROCS).
func OpenOpenBLAS(threads int) (*OpenBLAS, error) {
	candidates := openBLASCandidates
	if p := os.Getenv("MIXTUNE_OPENBLAS"); p != "" {
		candidates = []string{p}
	}
	var lib uintptr
	var path string
	var errs []string
	for _, c := range candidates {
		h, err := purego.Dlopen(c, purego.RTLD_NOW|purego.RTLD_LOCAL)
		if err == nil {
			lib, path = h, c
			break
		}
		errs = append(errs, err.Error())
	}
	if lib == 0 {
		return nil, fmt.Errorf("load OpenBLAS: %w: %s", errNotInstalled, strings.Join(errs, "; "))
	}
	for _, sym := range []string{"cblas_sgemm", "cblas_dgemm"} {
		if _, err := purego.Dlsym(lib, sym); err != nil {
			return nil, fmt.Errorf("load OpenBLAS from %s: %w", path, err)
		}
	}
	o := &OpenBLAS{}
	purego.RegisterLibFunc(&o.sgemm, lib, "cblas_sgemm")
	purego.RegisterLibFunc(&o.dgemm, lib, "cblas_dgemm")

	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	o.workers = threads
	info := fmt.Sprintf("%s, %d goroutines × 1 thread", path, threads)
	if _, err := purego.Dlsym(lib, "openblas_set_num_threads"); err == nil {
		var setThreads func(int32)
		purego.RegisterLibFunc(&setThreads, lib, "openblas_set_num_threads")
		setThreads(1)
	}
	if _, err := purego.Dlsym(lib, "openblas_get_config"); err == nil {
		var config func() *byte
		purego.RegisterLibFunc(&config, lib, "openblas_get_config")
		if s := cString(config()); s != "" {
			info = s + "; " + info
		}
	}
	if _, err := purego.Dlsym(lib, "openblas_get_corename"); err == nil {
		var corename func() *byte
		purego.RegisterLibFunc(&corename, lib, "openblas_get_corename")
		o.core = cString(corename())
		if err := openBLASCoreCheck(o.core, hostX86Features()); err != nil {
			return nil, fmt.Errorf("load OpenBLAS from %s: %w (OPENBLAS_CORETYPE=%q)", path, err, os.Getenv("OPENBLAS_CORETYPE"))
		}
	}
	o.name = "openblas (" + info + ")"
	return o, nil
}
