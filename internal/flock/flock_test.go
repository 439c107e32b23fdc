package flock

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A second process cannot take a held lock, and learns the holder's pid;
// once the holder exits the lock is free again. flock locks belong to the
// open file, so the second holder must be another process, as in real use.
func TestLockExcludesAnotherProcess(t *testing.T) {
	if os.Getenv("FLOCK_CHILD") != "" {
		_, err := Acquire(os.Getenv("FLOCK_CHILD"))
		fmt.Print(err)
		os.Exit(0)
	}
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("checked on unix")
	}
	path := filepath.Join(t.TempDir(), ".lock")
	l, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	child := func() string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLockExcludesAnotherProcess$")
		cmd.Env = append(os.Environ(), "FLOCK_CHILD="+path)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	want := fmt.Sprintf("locked by another process (pid %d)", os.Getpid())
	if got := child(); !strings.HasPrefix(got, want) {
		t.Fatalf("second process: %q, want %q", got, want)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if got := child(); !strings.HasPrefix(got, "<nil>") {
		t.Fatalf("after unlock: %q", got)
	}
	if !errors.Is(fmt.Errorf("%w (pid 1)", ErrLocked), ErrLocked) {
		t.Fatal("ErrLocked does not wrap")
	}
}

// Held sees a lock another holder has, and sees none after Unlock or when
// the file does not exist; looking neither takes the lock nor writes the
// file. (flock locks belong to the open file, so a second open in this
// process stands for another process.)
func TestHeld(t *testing.T) {
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("checked on unix")
	}
	path := filepath.Join(t.TempDir(), ".lock")
	if held, err := Held(path); held || err != nil {
		t.Fatalf("no file: held %v, %v", held, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("Held created the file: %v", err)
	}
	l, err := Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if held, err := Held(path); !held || err != nil {
		t.Fatalf("while held: held %v, %v", held, err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatalf("Held changed the file: %q → %q", before, after)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if held, err := Held(path); held || err != nil {
		t.Fatalf("after unlock: held %v, %v", held, err)
	}
	// looking left it free: another holder can take it
	l, err = Acquire(path)
	if err != nil {
		t.Fatalf("after Held: %v", err)
	}
	l.Unlock()
}
