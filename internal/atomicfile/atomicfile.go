// Package atomicfile writes files so that a crash or a failed write never
// leaves a half-written file where a good one was: the data goes to a
// temporary file in the same directory, is fsynced, renamed onto the
// target, and the directory is fsynced so the rename itself is durable.
//
// Write replaces the target. Create and CreateDir publish a new file or
// directory with a rename that never replaces, so that of two commands
// writing the same output at once exactly one succeeds and the other
// learns that the output exists; checking for the target first and
// renaming afterwards would let both succeed, the second silently
// replacing the first.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// ExistsError is Create's and CreateDir's answer when the target exists:
// nothing was written, and what is there is untouched. It matches
// fs.ErrExist with errors.Is.
type ExistsError struct{ Path string }

func (e *ExistsError) Error() string { return e.Path + " already exists" }
func (e *ExistsError) Unwrap() error { return fs.ErrExist }

// WriteFile atomically replaces path with data.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write atomically replaces path with what write produces. On any error
// the target is untouched and the temporary file removed.
func Write(path string, write func(io.Writer) error) error {
	return writeAndPublish(path, write, os.Rename)
}

// Create writes a new file at path with what write produces, as Write
// does, but never replaces one: if path exists when the file is published
// (whoever made it, however late), the error is an *ExistsError, the
// temporary file is removed and path is untouched.
func Create(path string, write func(io.Writer) error) error {
	return writeAndPublish(path, write, func(tmp, path string) error {
		return existsAs(renameNoReplace(tmp, path), path)
	})
}

// writeAndPublish writes a temporary file beside path, makes it durable,
// and moves it to path with publish.
func writeAndPublish(path string, write func(io.Writer) error, publish func(tmp, path string) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, base+".tmp-*")
	if err != nil {
		return err
	}
	tmp, closed := f.Name(), false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			os.Remove(tmp)
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err = write(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	// CreateTemp makes the file 0600; a checkpoint should be as readable as
	// one written by os.WriteFile.
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	closed = true
	if err = f.Close(); err != nil {
		return err
	}
	if err = publish(tmp, path); err != nil {
		return err
	}
	// The rename is only durable once the directory entry is.
	return SyncDir(dir)
}

// CreateDir makes a new directory at path holding what fill writes: fill
// writes into a temporary directory beside path, which is then published
// whole by a rename that never replaces, so that no one sees a partial
// directory and two writers never mix their files. An empty directory at
// path (one made for the output beforehand) is taken over; anything else
// there gives an *ExistsError, and is untouched. Missing parents are
// made. On any error the temporary directory is removed.
func CreateDir(path string, fill func(dir string) error) (err error) {
	path = filepath.Clean(path)
	parent, base := filepath.Split(path)
	if parent == "" {
		parent = "."
	}
	// The parents are made as os.MkdirAll(path) would have made them.
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err = fill(tmp); err != nil {
		return err
	}
	// MkdirTemp makes the directory 0700; a model directory should be as
	// readable as one made by os.MkdirAll.
	if err = os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	if err = SyncDir(tmp); err != nil {
		return err
	}
	// rmdir removes only an empty directory, atomically: a directory
	// another writer has published (never empty) survives it, and then the
	// rename below finds it.
	if st, serr := os.Lstat(path); serr == nil && st.IsDir() {
		os.Remove(path)
	}
	if err = existsAs(renameNoReplace(tmp, path), path); err != nil {
		return err
	}
	return SyncDir(parent)
}

// existsAs turns a rename's "target exists" into an *ExistsError for
// path; a rename of a directory onto a non-empty one says ENOTEMPTY.
func existsAs(err error, path string) error {
	if err != nil && (errors.Is(err, fs.ErrExist) || isNotEmpty(err)) {
		return &ExistsError{Path: path}
	}
	return err
}

// renameByClaim is the no-replace rename where the platform has none (or
// the filesystem refuses it). A file is hard-linked under the new name,
// which fails if the name is taken, and its temporary name removed. A
// directory, which cannot be hard-linked, or a file on a filesystem
// without hard links, first claims the name by creating it exclusively
// (an empty directory, or an empty file), then is renamed over the claim,
// which only this writer made. rawRename replaces its target.
func renameByClaim(from, to string, rawRename func(from, to string) error) error {
	st, err := os.Lstat(from)
	if err != nil {
		return err
	}
	if st.IsDir() {
		if err := os.Mkdir(to, 0o700); err != nil {
			return err
		}
	} else {
		err := os.Link(from, to)
		if err == nil {
			// Published. A temporary name left behind by a failed remove
			// is litter, not a reason to report failure.
			os.Remove(from)
			return nil
		}
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		f, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		f.Close()
	}
	if err := rawRename(from, to); err != nil {
		os.Remove(to) // the claim; a directory only if still empty
		return err
	}
	return nil
}

// SyncDir fsyncs a directory, making renames and creations in it durable.
// Windows cannot: FlushFileBuffers needs a handle open for writing, which
// a directory's is not, so Sync fails there with "Access is denied" and
// every write would; NTFS journals its directory entries, and Create's
// MoveFileEx writes through.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
