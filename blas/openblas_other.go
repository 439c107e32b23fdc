//go:build !((darwin || freebsd || linux || netbsd) && !android && !faketime)

package blas

import (
	"fmt"
	"runtime"
)

// OpenOpenBLAS reports the OpenBLAS backend unavailable: mixtune loads
// OpenBLAS with dlopen (purego), which this platform does not have. "auto"
// then runs on Native.
func OpenOpenBLAS(threads int) (*OpenBLAS, error) {
	return nil, fmt.Errorf("load OpenBLAS: %w: not available on %s (mixtune loads it with dlopen, on Linux, macOS, FreeBSD and NetBSD only); use --blas native", errNotInstalled, runtime.GOOS)
}
