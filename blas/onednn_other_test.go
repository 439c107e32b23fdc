//go:build !((darwin || freebsd || linux || netbsd) && !android && !faketime)

package blas

import (
	"runtime"
	"strings"
	"testing"
)

// TestOneDNNUnavailable: where oneDNN cannot be loaded, "onednn" says so
// and names the platform.
func TestOneDNNUnavailable(t *testing.T) {
	if _, err := Open("onednn", 0); err == nil || !strings.Contains(err.Error(), "not available on "+runtime.GOOS) {
		t.Errorf(`Open("onednn"): %v, want "not available on %s"`, err, runtime.GOOS)
	}
}
