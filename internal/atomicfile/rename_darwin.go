//go:build darwin

package atomicfile

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames from to to unless to exists, atomically:
// renamex_np with RENAME_EXCL (macOS 10.12 and later). A filesystem that
// refuses the flag falls back to renameByClaim.
func renameNoReplace(from, to string) error {
	err := unix.RenamexNp(from, to, unix.RENAME_EXCL)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.ENOTSUP):
		return renameByClaim(from, to, rawRename)
	}
	return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
}
