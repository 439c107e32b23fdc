// Package flock takes an exclusive, advisory lock on a file for the life
// of a process: the operating system releases it when the process ends,
// however it ends, so a killed run never leaves a stale lock behind.
package flock

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/mixtune/mixtune/internal/readlimit"
)

// ErrLocked reports a lock another process holds.
var ErrLocked = errors.New("locked by another process")

// Lock is a held lock; Unlock (or the process's end) releases it.
type Lock struct{ f *os.File }

// Acquire creates path if needed and locks it without waiting. If another
// process holds it, the error wraps ErrLocked and names that process's
// pid, which every holder writes into the file.
func Acquire(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := tryLock(f); err != nil {
		b, _ := readlimit.ReadFile(path, readlimit.RunRecord)
		f.Close()
		if errors.Is(err, ErrLocked) {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				return nil, fmt.Errorf("%w (pid %s)", ErrLocked, pid)
			}
		}
		return nil, err
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock. The file stays, so that a waiting process
// never locks a file that is about to disappear.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	unlock(l.f)
	err := l.f.Close()
	l.f = nil
	return err
}

// Held reports whether a process holds the lock at path, for readers that
// only want to know (is this run still training?). It neither creates nor
// writes the file: it takes a shared lock, which any holder's exclusive one
// blocks, and drops it at once. A missing file is a free lock.
func Held(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	switch err := tryShared(f); {
	case errors.Is(err, ErrLocked):
		return true, nil
	case err != nil:
		return false, err
	}
	unlock(f)
	return false, nil
}
