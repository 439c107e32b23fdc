//go:build !((darwin || freebsd || linux || netbsd) && !android && !faketime)

package blas

import (
	"fmt"
	"runtime"
)

// OpenOneDNN reports the oneDNN backend unavailable: mixtune loads oneDNN
// with dlopen (purego), which this platform does not have.
func OpenOneDNN(threads int) (*OneDNN, error) {
	return nil, fmt.Errorf("load oneDNN: %w: not available on %s (mixtune loads it with dlopen, on Linux, macOS, FreeBSD and NetBSD only); use --blas native", errNotInstalled, runtime.GOOS)
}
