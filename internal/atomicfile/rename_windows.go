//go:build windows

package atomicfile

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// renameNoReplace renames from to to unless to exists, atomically:
// MoveFileEx without MOVEFILE_REPLACE_EXISTING (os.Rename passes it, and
// replaces). It moves directories too, within a volume.
func renameNoReplace(from, to string) error {
	f, err := windows.UTF16PtrFromString(from)
	if err != nil {
		return err
	}
	t, err := windows.UTF16PtrFromString(to)
	if err != nil {
		return err
	}
	if err := windows.MoveFileEx(f, t, windows.MOVEFILE_WRITE_THROUGH); err != nil {
		if errors.Is(err, windows.ERROR_FILE_EXISTS) || errors.Is(err, windows.ERROR_ALREADY_EXISTS) {
			err = os.ErrExist
		}
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// rawRename replaces to, as renameByClaim needs.
func rawRename(from, to string) error { return os.Rename(from, to) }

// isNotEmpty reports a rename of a directory onto a non-empty one.
func isNotEmpty(err error) bool { return errors.Is(err, windows.ERROR_DIR_NOT_EMPTY) }
