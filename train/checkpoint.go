package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/internal/jsonfloat"
	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/safetensors"
)

// A checkpoint is a directory checkpoints/step-NNNNNN/ holding everything
// a run needs to continue bit-identically: the trainable fp32 weights, the
// optimizer state, state.json (step, data-loader position, loss-scaler
// state, config hash, counters) and a copy of metrics.jsonl as it stood at
// that step. checkpoint.json, written last, lists each file's SHA-256; a
// checkpoint whose files do not match it is corrupt.
//
// A good checkpoint is never removed before its replacement is in place:
// a new one is written under a temporary name and renamed in; one of the
// same step that already exists is first renamed aside. Whatever moment a
// crash hits, each step has a whole checkpoint under its name or under one
// of those two names, and recoverCheckpoints puts it back.

const (
	checkpointFormat = 2
	trainableFile    = "trainable.safetensors"
	optimizerFile    = "optimizer.safetensors"
	stateFile        = "state.json"
	metricsCopyFile  = "metrics.jsonl"
	manifestFile     = "checkpoint.json"
	tmpPrefix        = ".tmp-"
	asidePrefix      = ".old-"
)

// checkpointFiles lists the files a checkpoint of format holds; format 1,
// before the copy of metrics.jsonl, is still read.
func checkpointFiles(format int) ([]string, bool) {
	switch format {
	case 1:
		return []string{trainableFile, optimizerFile, stateFile}, true
	case 2:
		return []string{trainableFile, optimizerFile, stateFile, metricsCopyFile}, true
	}
	return nil, false
}

// checkpointState is a checkpoint's state.json.
type checkpointState struct {
	Format       int                `json:"format"`
	Step         int                `json:"step"`
	ConfigHash   string             `json:"config_hash"`
	Loader       data.LoaderState   `json:"loader"`
	Scaler       *amp.ScalerState   `json:"loss_scaler,omitempty"`
	OptimStep    int64              `json:"optimizer_step"`
	OptimScalars map[string]float64 `json:"optimizer_scalars"`
	MetricsBytes int64              `json:"metrics_bytes"` // metrics.jsonl's length at this step
	Skipped      int                `json:"skipped_steps"`
	LoopSeconds  float64            `json:"loop_seconds"`
	LastLoss     jsonfloat.Float    `json:"last_loss"`
	ValBefore    *LossReport        `json:"val_before,omitempty"`
	TaskBefore   *TaskReport        `json:"task_before,omitempty"`
}

type checkpointManifest struct {
	Format int               `json:"format"`
	Step   int               `json:"step"`
	SHA256 map[string]string `json:"sha256"`
}

func checkpointName(step int) string { return fmt.Sprintf("step-%06d", step) }

// writeCheckpoint writes a checkpoint of st.Step: files go to a temporary
// directory, each fsynced, with checkpoint.json last; a checkpoint of the
// same step that already exists is renamed aside; the new one is renamed
// into place and the directory fsynced; only then is the one aside
// removed. stage, if set, is called after each of those moments (for
// fault-injection tests).
func writeCheckpoint(root string, st checkpointState, params []*optim.Param, opt optim.Optimizer, metrics []byte, stage func(string)) (string, error) {
	if stage == nil {
		stage = func(string) {}
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix+checkpointName(st.Step)+"-")
	if err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	if err := writeCheckpointFiles(tmp, st, params, opt, metrics); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	stage("files")
	final := filepath.Join(root, checkpointName(st.Step))
	var aside string
	if _, err := os.Stat(final); err == nil {
		aside = filepath.Join(root, asidePrefix+checkpointName(st.Step)+fmt.Sprintf("-%d", time.Now().UnixNano()))
		if err := os.Rename(final, aside); err != nil {
			return "", fmt.Errorf("write checkpoint: %w", err)
		}
		stage("aside")
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	if err := atomicfile.SyncDir(root); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	stage("renamed")
	if aside != "" {
		os.RemoveAll(aside)
	}
	return final, nil
}

// writeCheckpointFiles writes a checkpoint's files into dir, each
// fsynced, checkpoint.json last.
func writeCheckpointFiles(dir string, st checkpointState, params []*optim.Param, opt optim.Optimizer, metrics []byte) error {
	var ws []safetensors.Tensor
	for _, p := range params {
		ws = append(ws, safetensors.Tensor{Name: p.Name, Shape: p.Shape, Data: p.Value, Dtype: amp.FP32})
	}
	ostate := opt.State()
	st.Format, st.OptimStep, st.OptimScalars = checkpointFormat, ostate.Step, ostate.Scalars
	var ost []safetensors.Tensor
	for name, v := range ostate.Tensors {
		ost = append(ost, safetensors.Tensor{Name: name, Shape: []int{len(v)}, Data: v, Dtype: amp.FP32})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, trainableFile), ws, nil); err != nil {
		return err
	}
	if err := safetensors.WriteFile(filepath.Join(dir, optimizerFile), ost, map[string]string{"optimizer": opt.Name()}); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, stateFile), append(b, '\n')); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, metricsCopyFile), metrics); err != nil {
		return err
	}
	man := checkpointManifest{Format: checkpointFormat, Step: st.Step, SHA256: map[string]string{}}
	files, _ := checkpointFiles(checkpointFormat)
	for _, f := range files {
		if man.SHA256[f], err = fileSHA256(filepath.Join(dir, f)); err != nil {
			return err
		}
	}
	b, _ = json.MarshalIndent(man, "", "  ")
	return atomicfile.WriteFile(filepath.Join(dir, manifestFile), append(b, '\n'))
}

// recoverCheckpoints repairs what an interrupted writeCheckpoint can
// leave: a whole checkpoint under a temporary or aside name whose step has
// none in place is renamed into place (the temporary one first: it is the
// newer); anything else under those names is removed. It returns what it
// did, one line per directory, for the log.
func recoverCheckpoints(root string) ([]string, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var notes []string
	for _, prefix := range []string{tmpPrefix, asidePrefix} {
		for _, e := range ents {
			name := e.Name()
			if !e.IsDir() || !strings.HasPrefix(name, prefix) {
				continue
			}
			dir := filepath.Join(root, name)
			var step int
			_, serr := fmt.Sscanf(strings.TrimPrefix(name, prefix), "step-%06d-", &step)
			final := filepath.Join(root, checkpointName(step))
			_, exists := os.Stat(final)
			if serr == nil && errors.Is(exists, os.ErrNotExist) {
				if _, rerr := readCheckpoint(dir); rerr == nil {
					if err := os.Rename(dir, final); err != nil {
						return notes, fmt.Errorf("recover checkpoint %s: %w", dir, err)
					}
					notes = append(notes, fmt.Sprintf("recovered the whole checkpoint %s as %s", name, checkpointName(step)))
					continue
				}
			}
			if err := os.RemoveAll(dir); err != nil {
				return notes, fmt.Errorf("remove %s: %w", dir, err)
			}
			notes = append(notes, fmt.Sprintf("removed %s, left by an interrupted checkpoint write", name))
		}
	}
	if len(notes) > 0 {
		if err := atomicfile.SyncDir(root); err != nil {
			return notes, err
		}
	}
	return notes, nil
}

// pruneCheckpoints keeps the newest keep checkpoints and removes older
// ones. It runs only after a new checkpoint is in place.
func pruneCheckpoints(root string, keep int) error {
	steps, err := listCheckpoints(root)
	if err != nil {
		return err
	}
	for i := 0; i+keep < len(steps); i++ {
		if err := os.RemoveAll(filepath.Join(root, checkpointName(steps[i]))); err != nil {
			return err
		}
	}
	return nil
}

// listCheckpoints returns the steps of the checkpoint directories, oldest first.
func listCheckpoints(root string) ([]int, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	var steps []int
	for _, e := range ents {
		var s int
		if e.IsDir() && len(e.Name()) == len("step-000000") {
			if _, err := fmt.Sscanf(e.Name(), "step-%06d", &s); err == nil {
				steps = append(steps, s)
			}
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// loadedCheckpoint is a verified checkpoint read back.
type loadedCheckpoint struct {
	Dir     string
	State   checkpointState
	Weights *safetensors.File
	Optim   optim.State
	Metrics []byte // metrics.jsonl as it stood; nil for a format-1 checkpoint
}

// loadLatestCheckpoint returns the newest checkpoint that verifies. A
// corrupt or truncated one is reported through warn and the previous one
// tried; it is an error if none verifies.
func loadLatestCheckpoint(root string, warn func(string)) (*loadedCheckpoint, error) {
	steps, err := listCheckpoints(root)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("no checkpoint in %s", root)
	}
	var problems []string
	for i := len(steps) - 1; i >= 0; i-- {
		dir := filepath.Join(root, checkpointName(steps[i]))
		ck, err := readCheckpoint(dir)
		if err == nil {
			return ck, nil
		}
		problems = append(problems, err.Error())
		if i > 0 {
			warn(fmt.Sprintf("checkpoint %s is unusable (%v); falling back to %s", dir, err, checkpointName(steps[i-1])))
		}
	}
	return nil, fmt.Errorf("no usable checkpoint in %s: %s", root, strings.Join(problems, "; "))
}

// readCheckpoint reads and verifies one checkpoint directory.
func readCheckpoint(dir string) (*loadedCheckpoint, error) {
	b, err := readlimit.ReadFile(filepath.Join(dir, manifestFile), readlimit.RunRecord)
	if err != nil {
		return nil, fmt.Errorf("missing %s", manifestFile)
	}
	var man checkpointManifest
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("%s is damaged: %v", manifestFile, err)
	}
	files, ok := checkpointFiles(man.Format)
	if !ok {
		return nil, fmt.Errorf("checkpoint format %d, this mixtune reads 1 and %d", man.Format, checkpointFormat)
	}
	for _, f := range files {
		want, ok := man.SHA256[f]
		if !ok {
			return nil, fmt.Errorf("%s lists no checksum for %s", manifestFile, f)
		}
		got, err := fileSHA256(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("missing %s", f)
		}
		if got != want {
			return nil, fmt.Errorf("%s fails its checksum (truncated or altered)", f)
		}
	}
	ck := &loadedCheckpoint{Dir: dir}
	if man.Format >= 2 {
		if ck.Metrics, err = readlimit.ReadFile(filepath.Join(dir, metricsCopyFile), readlimit.Metrics); err != nil {
			return nil, err
		}
	}
	b, _ = readlimit.ReadFile(filepath.Join(dir, stateFile), readlimit.RunRecord)
	if err := json.Unmarshal(b, &ck.State); err != nil {
		return nil, fmt.Errorf("%s: %v", stateFile, err)
	}
	if ck.Weights, err = safetensors.ReadFile(filepath.Join(dir, trainableFile)); err != nil {
		return nil, err
	}
	of, err := safetensors.ReadFile(filepath.Join(dir, optimizerFile))
	if err != nil {
		return nil, err
	}
	ck.Optim = optim.State{Step: ck.State.OptimStep, Scalars: ck.State.OptimScalars, Tensors: map[string][]float32{}}
	for _, name := range of.Names() {
		if ck.Optim.Tensors[name], _, err = of.Float32(name); err != nil {
			return nil, err
		}
	}
	return ck, nil
}

// restore copies the checkpoint's weights into params, checking that each
// is there with its shape.
func (ck *loadedCheckpoint) restore(params []*optim.Param) error {
	for _, p := range params {
		v, shape, err := ck.Weights.Float32(p.Name)
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
		}
		if len(v) != len(p.Value) {
			return fmt.Errorf("checkpoint %s: %s has shape %v, the run has %v", ck.Dir, p.Name, shape, p.Shape)
		}
		copy(p.Value, v)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := readlimit.Open(path, readlimit.Weights)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
