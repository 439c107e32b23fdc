package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mixtune/mixtune/internal/browsertest"
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

// A real training run watched in a browser through `mixtune serve`: the
// run is listed as running, its loss chart gains points while it trains,
// and the page's own request outside the runs directory is refused.
func TestServeWatchesATrainingRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a training process and a browser")
	}
	ctx := browsertest.Start(t)
	dir, recipe := workdir(t, 100000)
	train := mixtune("train", "-c", recipe)
	if err := train.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- train.Wait() }()
	defer func() { train.Process.Kill(); <-done }()
	waitFor(t, filepath.Join(dir, "runs", "k", "metrics.jsonl"), done)

	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	serve := mixtune("serve", "--addr", addr, filepath.Join(dir, "runs"))
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { serve.Process.Kill(); serve.Wait() }()
	browsertest.WaitFor(t, "serve to listen on "+addr, 20*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	const lossChart = `svg[data-chart="loss"]`
	browsertest.Open(t, ctx, "http://"+addr+"/", lossChart)
	points := func() int { return browsertest.IntAttr(t, ctx, lossChart, "data-points") }
	browsertest.WaitFor(t, "the run's first points", 30*time.Second, func() bool { return points() > 0 })
	first := points()
	browsertest.WaitFor(t, "the chart to gain points as the run trains", 30*time.Second, func() bool { return points() > first })
	if status := browsertest.Eval[string](t, ctx, `document.querySelector('tr[data-run="k"] .status').textContent`); status != "running" {
		t.Errorf("the training run is listed as %q", status)
	}
	if code := browsertest.Status(t, ctx, "/api/runs/..%2F..%2Fmodel/detail"); code != 404 {
		t.Errorf("traversal: %d, want 404", code)
	}
}
