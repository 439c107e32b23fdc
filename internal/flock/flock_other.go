//go:build !unix && !windows

package flock

import "os"

// Elsewhere (plan9, wasm) there is no advisory lock: a run directory is
// then protected only by being created atomically.
func tryLock(*os.File) error   { return nil }
func tryShared(*os.File) error { return nil }
func unlock(*os.File)          {}
