//go:build unix

package atomicfile

import (
	"errors"
	"os"
	"syscall"
)

// rawRename is rename(2) itself, which replaces a file or an empty
// directory. os.Rename refuses any directory target, even the empty claim
// renameByClaim made.
func rawRename(from, to string) error {
	if err := syscall.Rename(from, to); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// isNotEmpty reports a rename of a directory onto a non-empty one.
func isNotEmpty(err error) bool { return errors.Is(err, syscall.ENOTEMPTY) }
