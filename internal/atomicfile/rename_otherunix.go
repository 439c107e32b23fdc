//go:build unix && !linux && !darwin

package atomicfile

// renameNoReplace renames from to to unless to exists; these systems have
// no no-replace rename that x/sys/unix offers everywhere, so it claims
// the name (renameByClaim).
func renameNoReplace(from, to string) error { return renameByClaim(from, to, rawRename) }
