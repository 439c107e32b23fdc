//go:build (darwin || freebsd || linux || netbsd) && !android && !faketime

package blas

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/ebitengine/purego"
)

// oneDNNCandidates are the sonames tried in order. MIXTUNE_ONEDNN, when
// set, names the library file to load instead.
var oneDNNCandidates = []string{"libdnnl.so.2", "libdnnl.so.3", "libdnnl.so", "libdnnl.3.dylib", "libdnnl.2.dylib", "libdnnl.dylib"}

// dnnlVersion mirrors dnnl_version_t (dnnl_types.h).
type dnnlVersion struct {
	major, minor, patch int32
	hash                *byte
	cpuRuntime          uint32
	gpuRuntime          uint32
}

// OpenOneDNN loads oneDNN; threads is how many goroutines share a large
// product (0: GOMAXPROCS).
func OpenOneDNN(threads int) (*OneDNN, error) {
	candidates := oneDNNCandidates
	if p := os.Getenv("MIXTUNE_ONEDNN"); p != "" {
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
		return nil, fmt.Errorf("load oneDNN: %w: %s", errNotInstalled, strings.Join(errs, "; "))
	}
	// dnnl_gemm_bf16bf16f32 is exported (extern "C") by oneDNN 1.x-3.x but
	// not declared in its public header.
	for _, sym := range []string{"dnnl_sgemm", "dnnl_gemm_bf16bf16f32", "dnnl_version"} {
		if _, err := purego.Dlsym(lib, sym); err != nil {
			return nil, fmt.Errorf("load oneDNN from %s: %w", path, err)
		}
	}
	o := &OneDNN{rowBlock: oneDNNRowBlock}
	purego.RegisterLibFunc(&o.sgemm, lib, "dnnl_sgemm")
	purego.RegisterLibFunc(&o.bgemm, lib, "dnnl_gemm_bf16bf16f32")
	var version func() *dnnlVersion
	purego.RegisterLibFunc(&version, lib, "dnnl_version")
	v := version()

	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	o.workers = threads
	runtimeName := "unknown runtime"
	switch v.cpuRuntime {
	case 1:
		runtimeName = "sequential"
	case 2:
		runtimeName = "OpenMP"
		// dlsym on the library's handle also searches its dependencies,
		// where the OpenMP runtime it links (libgomp, libiomp5) is.
		if _, err := purego.Dlsym(lib, "omp_set_num_threads"); err == nil {
			purego.RegisterLibFunc(&o.setThreads, lib, "omp_set_num_threads")
		}
	case 4:
		runtimeName = "TBB"
	case 8:
		runtimeName = "threadpool"
	}
	if v.cpuRuntime != 1 && o.setThreads == nil {
		// Its threads cannot be limited per call: results would depend on
		// how many it starts, and they would fight the Go scheduler.
		return nil, fmt.Errorf("load oneDNN from %s: its %s CPU runtime cannot be limited to one thread per call (mixtune needs the OpenMP or sequential build)", path, runtimeName)
	}
	if _, err := purego.Dlsym(lib, "dnnl_get_effective_cpu_isa"); err == nil {
		var isa func() uint32
		purego.RegisterLibFunc(&isa, lib, "dnnl_get_effective_cpu_isa")
		o.isa = isa()
	}
	isaName := o.isaLabel()
	o.name = fmt.Sprintf("onednn (%s %d.%d.%d, %s, %s; %d goroutines × 1 thread)", path, v.major, v.minor, v.patch, runtimeName, isaName, threads)
	return o, nil
}
