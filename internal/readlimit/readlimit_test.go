//go:build unix

package readlimit

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// zeros is an endless reader, like /dev/zero.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "config.json")
	if err := os.WriteFile(small, []byte(`{"a": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// sparse: the size is what counts, and it costs no disk
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, ModelConfig.Limit()+1); err != nil {
		t.Fatal(err)
	}
	atLimit := filepath.Join(dir, "at-limit.json")
	if err := os.WriteFile(atLimit, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(atLimit, ChatTemplate.Limit()); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	zeroLink := filepath.Join(dir, "tokenizer.json")
	if err := os.Symlink("/dev/zero", zeroLink); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, path string
		kind       Kind
		want       string // substring of the error; empty for success
	}{
		{"small", small, ModelConfig, ""},
		{"at the limit", atLimit, ChatTemplate, ""},
		{"over the limit", big, ModelConfig, "big.json: the model config is 16.0 MiB (16777217 bytes), more than its limit of 16 MiB"},
		{"dev zero", "/dev/zero", Text, "/dev/zero: is a device, not a regular file (a text file must be a file)"},
		{"symlink to dev zero", zeroLink, TokenizerJSON, "tokenizer.json: is a device, not a regular file (a tokenizer.json must be a file)"},
		{"fifo without writer", fifo, Recipe, "fifo: is a FIFO, not a regular file"},
		{"directory", dir, Data, "is a directory, not a regular file"},
		{"missing", filepath.Join(dir, "none"), RunRecord, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := ReadFile(tt.path, tt.kind)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("ReadFile did not return: it blocks")
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("ReadFile: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("ReadFile: error %v, want one containing %q", err, tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), "no such file") && !IsLimit(err):
				t.Fatalf("IsLimit(%v) is false", err)
			}
		})
	}
}

func TestReadAllStopsAtTheLimit(t *testing.T) {
	_, err := ReadAll(zeros{}, "stream", ModelConfig)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Kind != ModelConfig {
		t.Fatalf("ReadAll of an endless stream: %v, want a *TooLargeError", err)
	}
	if want := "stream: the model config is larger than its limit of 16 MiB"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	b, err := ReadAll(io.LimitReader(zeros{}, 100), "short", ModelConfig)
	if err != nil || len(b) != 100 {
		t.Fatalf("ReadAll of 100 bytes: %d bytes, %v", len(b), err)
	}
}

func TestEveryKindHasANameAndALimit(t *testing.T) {
	for k := TokenizerJSON; k <= Text; k++ {
		if strings.HasPrefix(k.String(), "Kind(") || k.Limit() <= 0 {
			t.Errorf("kind %d: name %q, limit %d", int(k), k, k.Limit())
		}
	}
}
