package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mixtune/mixtune/gguf"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

// racers is how many mixtune processes write one --out at once.
const racers = 4

// raceProcesses starts racers mixtune processes with args together and
// checks that exactly one exits 0 and every other exits 2 saying that
// out already exists.
func raceProcesses(t *testing.T, out string, args ...string) {
	t.Helper()
	type result struct {
		code   int
		stderr string
	}
	results := make([]result, racers)
	cmds := make([]*exec.Cmd, racers)
	errs := make([]*bytes.Buffer, racers)
	for i := range cmds {
		cmds[i] = mixtune(args...)
		errs[i] = new(bytes.Buffer)
		cmds[i].Stderr = errs[i]
	}
	var wg sync.WaitGroup
	for i, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Wait()
			results[i] = result{c.ProcessState.ExitCode(), errs[i].String()}
		}()
	}
	wg.Wait()
	won := 0
	for i, r := range results {
		switch {
		case r.code == 0:
			won++
		case r.code != 2 || !strings.Contains(r.stderr, "--out "+out+" already exists"):
			t.Errorf("process %d: exit %d: %s", i, r.code, r.stderr)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d processes wrote %s, want exactly 1", won, racers, out)
	}
}

// onlyEntry fails unless dir holds name alone: the losers left no
// temporary file or directory.
func onlyEntry(t *testing.T, dir, name string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != name {
		t.Fatalf("%s holds %v, want only %s", dir, entries, name)
	}
}

// Concurrent exports, merges and extractions to one --out: one process
// writes it, whole and valid; the others exit 2 naming it, and leave no
// temporary files. The existence check alone let every one of them exit
// 0, each replacing (or, for a directory, mixing into) the one before.
func TestConcurrentOutputsToOnePath(t *testing.T) {
	dir := t.TempDir()
	baseDir, m := tinyBase(t, dir)
	ts, _ := peft.Targets(peft.ModelTargets(m), allModules)
	l, err := peft.New(peft.Config{R: 2, Alpha: 4, TargetModules: allModules}, ts, 1, m.Weights)
	if err != nil {
		t.Fatal(err)
	}
	adapterDir := filepath.Join(dir, "adapter")
	if err := l.Save(adapterDir, baseDir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		args  func(out string) []string
		check func(out string) error
	}{
		{"export gguf", func(out string) []string {
			return []string{"export", "gguf", "--model", baseDir, "--adapter", adapterDir, "--out", out}
		}, func(out string) error {
			p, closer, err := gguf.Open(out)
			if err != nil {
				return err
			}
			defer closer.Close()
			if p.Get("general.architecture") != "llama" {
				return fmt.Errorf("architecture %v", p.Get("general.architecture"))
			}
			_, _, err = p.Float32("token_embd.weight")
			return err
		}},
		{"merge", func(out string) []string {
			return []string{"merge", "--model", baseDir, "--adapter", adapterDir, "--out", out}
		}, func(out string) error {
			_, err := model.Load(out)
			return err
		}},
		{"extract-lora", func(out string) []string {
			return []string{"extract-lora", "--base", baseDir, "--tuned", baseDir, "--rank", "1", "--out", out}
		}, func(out string) error {
			mt, err := model.Load(baseDir)
			if err != nil {
				return err
			}
			_, err = peft.Load(out, peft.BaseOf(mt))
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent := filepath.Join(t.TempDir(), "out")
			if err := os.Mkdir(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(parent, "result")
			raceProcesses(t, out, c.args(out)...)
			if err := c.check(out); err != nil {
				t.Fatalf("the winner's %s: %v", out, err)
			}
			onlyEntry(t, parent, "result")
		})
	}
}
