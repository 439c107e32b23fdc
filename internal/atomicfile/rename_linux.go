//go:build linux

package atomicfile

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames from to to unless to exists, atomically:
// renameat2 with RENAME_NOREPLACE. Kernels before 3.15 (ENOSYS) and
// filesystems without the flag (EINVAL: some FUSE, NFS, overlay setups)
// fall back to renameByClaim.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP):
		return renameByClaim(from, to, rawRename)
	}
	return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
}
