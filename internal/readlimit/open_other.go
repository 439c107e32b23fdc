//go:build !unix

package readlimit

import "os"

// openNoBlock opens path for reading (FIFOs are a Unix matter).
func openNoBlock(path string) (*os.File, error) { return os.Open(path) }
