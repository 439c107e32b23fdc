//go:build !((darwin || freebsd || linux || netbsd) && !android && !faketime)

package blas

import (
	"runtime"
	"strings"
	"testing"
)

// TestOpenBLASUnavailable: where OpenBLAS cannot be loaded, "openblas"
// says so and names the platform, and "auto" runs on Native.
func TestOpenBLASUnavailable(t *testing.T) {
	if _, err := Open("openblas", 0); err == nil || !strings.Contains(err.Error(), "not available on "+runtime.GOOS) {
		t.Errorf(`Open("openblas"): %v, want "not available on %s"`, err, runtime.GOOS)
	}
	be, err := Open("auto", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := be.(Native); !ok {
		t.Errorf(`Open("auto") = %s, want the native backend`, be.Name())
	}
}
