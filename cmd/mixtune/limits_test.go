//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Inputs that are not files, or are far larger than their kind can be,
// are refused with exit status 2 and a message naming the file, its kind
// and the limit: before, /dev/zero was read until the runtime ran out of
// memory, and a FIFO blocked forever.
func TestInputFileLimits(t *testing.T) {
	dir, _ := workdir(t, 1)
	model := filepath.Join(dir, "model")
	// a model directory whose tokenizer.json is a symlink to /dev/zero
	zeroModel := filepath.Join(dir, "zero-model")
	if err := os.CopyFS(zeroModel, os.DirFS(model)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(zeroModel, "tokenizer.json")); err != nil {
		t.Fatal(err)
	}
	// a text larger than tokenize takes (sparse: no disk used)
	big := filepath.Join(dir, "big.txt")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, 64<<20+1); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "recipe.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	bigRecipe := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(bigRecipe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(bigRecipe, 16<<20+1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tokenize", "--model", model, "--file", "/dev/zero"}, "/dev/zero: is a device, not a regular file (a text file must be a file)"},
		{[]string{"tokenize", "--model", zeroModel, "x"}, "tokenizer.json: is a device, not a regular file (a tokenizer.json must be a file)"},
		{[]string{"tokenize", "--model", model, "--file", big}, "big.txt: the text file is 64.0 MiB (67108865 bytes), more than its limit of 64 MiB"},
		{[]string{"train", "-c", fifo}, "recipe.fifo: is a FIFO, not a regular file (a recipe must be a file)"},
		{[]string{"train", "-c", bigRecipe}, "big.yaml: the recipe is 16.0 MiB (16777217 bytes), more than its limit of 16 MiB"},
	} {
		done := make(chan struct{})
		var code int
		var stderr string
		go func() {
			code, _, stderr = runIn(t, tc.args...)
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%q did not finish", tc.args)
		}
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, want 2 with %q\n%s", tc.args, code, tc.want, stderr)
		}
	}
}
