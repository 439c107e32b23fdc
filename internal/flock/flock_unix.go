//go:build unix

package flock

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func tryLock(f *os.File) error { return tryFlock(f, unix.LOCK_EX) }

// tryShared takes a shared lock, which any exclusive holder blocks.
func tryShared(f *os.File) error { return tryFlock(f, unix.LOCK_SH) }

func tryFlock(f *os.File, how int) error {
	err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return ErrLocked
	}
	return err
}

func unlock(f *os.File) { unix.Flock(int(f.Fd()), unix.LOCK_UN) }
