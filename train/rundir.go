package train

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/flock"
	"github.com/mixtune/mixtune/internal/readlimit"
)

// The run directory: created atomically under a name no other run has,
// locked for the life of the process that trains in it, and changed only
// by that process.

const (
	lockFile       = ".lock"
	configFile     = "config.yaml"
	resolvedFile   = "resolved.yaml"
	configLogFile  = "config_changes.jsonl"
	summaryFile    = "summary.json"
	maxRunSuffixes = 10000
)

// createRunDir makes output_dir/name, or name-2, name-3... when taken. Each
// candidate is claimed by os.Mkdir, which fails with EEXIST if another run
// (even one starting at the same instant) has it, so no two runs ever share
// a directory. Any other failure (output_dir is a file, a name too long, no
// permission) is reported, never retried.
func createRunDir(outputDir, name string) (string, error) {
	if err := os.MkdirAll(outputDir, 0o755); err != nil {
		return "", fmt.Errorf("create output_dir: %w", err)
	}
	dir := filepath.Join(outputDir, name)
	for i := 2; i <= maxRunSuffixes; i++ {
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("create run directory: %w", err)
		}
		dir = filepath.Join(outputDir, fmt.Sprintf("%s-%d", name, i))
	}
	return "", fmt.Errorf("create run directory: %s and %d numbered variants all exist; choose another name", filepath.Join(outputDir, name), maxRunSuffixes-1)
}

// lockRunDir takes the run directory's lock for the life of the process:
// a second process that would train in it (a second --resume, say) is
// refused rather than interleaving its steps with this one's.
func lockRunDir(dir string) (*flock.Lock, error) {
	l, err := flock.Acquire(filepath.Join(dir, lockFile))
	if errors.Is(err, flock.ErrLocked) {
		return nil, fmt.Errorf("run directory %s is in use: %w; wait for it to finish or stop it first", dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock run directory %s: %w", dir, err)
	}
	return l, nil
}

// writeRecipe records the recipe as given (config.yaml) and resolved
// (resolved.yaml, which --resume reads back).
func writeRecipe(dir string, r *Recipe) error {
	if err := atomicfile.WriteFile(filepath.Join(dir, configFile), r.Raw); err != nil {
		return err
	}
	res, err := r.Config.Resolved()
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, resolvedFile), res)
}

// configChange is one line of config_changes.jsonl: a resume under --force
// with a recipe that differs from the one the run had.
type configChange struct {
	Time     string   `json:"time"`
	Step     int      `json:"step"`
	FromHash string   `json:"from_config_hash"`
	ToHash   string   `json:"to_config_hash"`
	Changes  []string `json:"changes"`
}

// recordConfigChange makes a forced recipe change the run's recipe: it
// appends the change to config_changes.jsonl, then replaces resolved.yaml,
// so that a later plain --resume continues under the new recipe and
// accepts checkpoints written under the old one.
func recordConfigChange(dir string, step int, from string, r *Recipe, changes []string) error {
	line, err := json.Marshal(configChange{Time: time.Now().UTC().Format(time.RFC3339), Step: step,
		FromHash: from, ToHash: r.Hash(), Changes: changes})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, configLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("record the config change: %w", err)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("record the config change: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	res, err := r.Config.Resolved()
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, resolvedFile), res)
}

// approvedChange reports whether config_changes.jsonl records a forced
// change from the recipe hash from to the hash to, possibly over several
// changes.
func approvedChange(dir, from, to string) bool {
	f, err := readlimit.Open(filepath.Join(dir, configLogFile), readlimit.RunRecord)
	if err != nil {
		return false
	}
	defer f.Close()
	next := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c configChange
		if json.Unmarshal(sc.Bytes(), &c) == nil {
			next[c.FromHash] = c.ToHash
		}
	}
	for h, seen := from, map[string]bool{}; !seen[h]; h = next[h] {
		if h == to {
			return true
		}
		seen[h] = true
	}
	return false
}

// readSummary reads a finished run's summary.json; ok is false when there is
// none (the run has not finished) or it records an interrupted run.
func readSummary(dir string) (*Summary, bool) {
	b, err := readlimit.ReadFile(filepath.Join(dir, summaryFile), readlimit.RunRecord)
	if err != nil {
		return nil, false
	}
	var s Summary
	if json.Unmarshal(b, &s) != nil || s.Interrupted {
		return nil, false
	}
	return &s, true
}
