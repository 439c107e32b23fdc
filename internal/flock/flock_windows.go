//go:build windows

package flock

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

func tryLock(f *os.File) error { return tryLockFile(f, windows.LOCKFILE_EXCLUSIVE_LOCK) }

// tryShared takes a shared lock, which any exclusive holder blocks.
func tryShared(f *os.File) error { return tryLockFile(f, 0) }

func tryLockFile(f *os.File, flags uint32) error {
	var ol windows.Overlapped
	err := windows.LockFileEx(windows.Handle(f.Fd()), flags|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	if errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
		return ErrLocked
	}
	return err
}

func unlock(f *os.File) {
	var ol windows.Overlapped
	windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, &ol)
}
