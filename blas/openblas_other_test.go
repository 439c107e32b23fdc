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
	c, err := Choose(KindAuto, 2, AutoOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Backend.(Native); !ok {
		t.Errorf(`auto = %s, want the native backend`, c.Backend.Name())
	}
}
