package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serve refuses a bad command line with exit 2 and a message naming what
// is wrong, and a busy address with exit 1, before serving anything.
func TestServeRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing dir", []string{"serve", filepath.Join(dir, "none")}, 2, "none is not a directory of runs"},
		{"a file", []string{"serve", file}, 2, "f is not a directory of runs"},
		{"two dirs", []string{"serve", dir, dir}, 2, "serve takes one runs directory, got 2"},
		{"bad addr", []string{"serve", "--addr", "8080", dir}, 2, `--addr "8080"`},
		{"busy addr", []string{"serve", "--addr", busy.Addr().String(), dir}, 1, "listen on " + busy.Addr().String()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runIn(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, want %d; stderr %q, want %q", code, tc.code, stderr, tc.want)
			}
		})
	}
}
