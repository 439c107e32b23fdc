//go:build !unix && !windows

package atomicfile

import "os"

// renameNoReplace renames from to to unless to exists, by claiming the
// name first (renameByClaim): these systems offer no no-replace rename.
func renameNoReplace(from, to string) error { return renameByClaim(from, to, rawRename) }

func rawRename(from, to string) error { return os.Rename(from, to) }

func isNotEmpty(error) bool { return false }
