//go:build !((darwin || freebsd || linux || netbsd) && !android && !faketime)

package dist

import (
	"fmt"
	"runtime"
)

// openMPI reports MPI unavailable: mixtune loads libmpi with dlopen
// (purego), which this platform does not have.
func openMPI(l Launch, _ Options) (Comm, error) {
	return nil, fmt.Errorf("%w: launched by %s as rank %d of %d, but mixtune loads MPI with dlopen, on Linux, macOS, FreeBSD and NetBSD only, not on %s; run one process, or set MIXTUNE_DIST=off",
		ErrNoMPI, l.Launcher, l.Rank, l.Size, runtime.GOOS)
}
