package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// writers is how many goroutines race to publish one path.
const writers = 16

// race runs publish(i) on writers goroutines released together and
// returns their errors.
func race(publish func(i int) error) []error {
	errs := make([]error, writers)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range errs {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			errs[i] = publish(i)
		}()
	}
	start.Done()
	done.Wait()
	return errs
}

// winner checks that exactly one publish succeeded and that every other
// one got an ExistsError for path, and returns the winner.
func winner(t *testing.T, errs []error, path string) int {
	t.Helper()
	won := -1
	for i, err := range errs {
		var ee *ExistsError
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both published %s", won, i, path)
		case err == nil:
			won = i
		case !errors.As(err, &ee) || ee.Path != path || !errors.Is(err, fs.ErrExist) || err.Error() != path+" already exists":
			t.Fatalf("writer %d: %v, want %q", i, err, path+" already exists")
		}
	}
	if won < 0 {
		t.Fatal("no writer published")
	}
	return won
}

// onlyEntries fails unless dir holds exactly names: no temporary is left.
func onlyEntries(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %v, want %v", dir, got, names)
	}
}

// content is writer i's file: large enough that writes overlap.
func content(i int) string { return strings.Repeat(fmt.Sprintf("writer %d\n", i), 20000) }

// Writers racing to Create one file: exactly one wins, the file is the
// winner's whole, the others get ExistsError and leave no temporary file.
func TestCreateRace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.gguf")
	errs := race(func(i int) error {
		return Create(path, func(w io.Writer) error {
			_, err := io.WriteString(w, content(i))
			return err
		})
	})
	won := winner(t, errs, path)
	if b, _ := os.ReadFile(path); string(b) != content(won) {
		t.Fatalf("the file is not writer %d's whole content", won)
	}
	onlyEntries(t, dir, "out.gguf")
}

// Create never replaces a file that exists beforehand, and a failed write
// leaves nothing; Write replaces.
func TestCreateKeepsExistingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Create(path, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err })
	var ee *ExistsError
	if !errors.As(err, &ee) {
		t.Fatalf("Create over a file: %v", err)
	}
	boom := errors.New("boom")
	if err := Create(filepath.Join(dir, "g"), func(io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("failed write: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep" {
		t.Fatalf("Create replaced the file: %q", b)
	}
	onlyEntries(t, dir, "f")
	if err := WriteFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("Write did not replace: %q", b)
	}
}

// fillDir writes writer i's files into dir, the last one after the
// others so that a mix of two writers' files would show.
func fillDir(i int) func(dir string) error {
	return func(dir string) error {
		for _, name := range []string{"model.safetensors", "config.json"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content(i)), 0o644); err != nil {
				return err
			}
		}
		return nil
	}
}

// Writers racing to CreateDir one directory, new or made empty
// beforehand: exactly one wins, the directory holds only the winner's
// files, and no temporary directory is left.
func TestCreateDirRace(t *testing.T) {
	for _, premade := range []bool{false, true} {
		t.Run(fmt.Sprintf("premade=%v", premade), func(t *testing.T) {
			parent := t.TempDir()
			path := filepath.Join(parent, "merged")
			if premade {
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			won := winner(t, race(func(i int) error { return CreateDir(path, fillDir(i)) }), path)
			onlyEntries(t, parent, "merged")
			onlyEntries(t, path, "config.json", "model.safetensors")
			for _, name := range []string{"config.json", "model.safetensors"} {
				if b, _ := os.ReadFile(filepath.Join(path, name)); string(b) != content(won) {
					t.Fatalf("%s is not writer %d's", name, won)
				}
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o755 {
				t.Fatalf("mode %v, %v", st.Mode(), err)
			}
		})
	}
}

// CreateDir refuses a non-empty directory and a file, leaving both, and
// removes its temporary directory when fill fails.
func TestCreateDirRefuses(t *testing.T) {
	parent := t.TempDir()
	full := filepath.Join(parent, "full")
	file := filepath.Join(parent, "file")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(full, "keep"), file} {
		if err := os.WriteFile(p, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, path := range []string{full, file} {
		var ee *ExistsError
		if err := CreateDir(path, fillDir(0)); !errors.As(err, &ee) || ee.Path != path {
			t.Fatalf("CreateDir(%s): %v", path, err)
		}
	}
	boom := errors.New("boom")
	if err := CreateDir(filepath.Join(parent, "new"), func(string) error { return boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	onlyEntries(t, parent, "file", "full")
	onlyEntries(t, full, "keep")
}

// renameByClaim, the fallback where no no-replace rename exists, keeps
// the same promise under a race, for files and directories.
func TestRenameByClaimRace(t *testing.T) {
	for _, isDir := range []bool{false, true} {
		t.Run(fmt.Sprintf("dir=%v", isDir), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "out")
			tmps := make([]string, writers)
			for i := range tmps {
				tmps[i] = filepath.Join(dir, fmt.Sprintf("tmp%d", i))
				var err error
				if isDir {
					if err = os.Mkdir(tmps[i], 0o755); err == nil {
						err = fillDir(i)(tmps[i])
					}
				} else {
					err = os.WriteFile(tmps[i], []byte(content(i)), 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			errs := race(func(i int) error { return existsAs(renameByClaim(tmps[i], path, rawRename), path) })
			won := winner(t, errs, path)
			check := path
			if isDir {
				check = filepath.Join(path, "config.json")
			}
			if b, _ := os.ReadFile(check); string(b) != content(won) {
				t.Fatalf("%s is not writer %d's", check, won)
			}
			if _, err := os.Lstat(tmps[won]); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the winner's temporary name is left: %v", err)
			}
		})
	}
}
