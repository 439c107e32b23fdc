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

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"github.com/mixtune/mixtune/optim"
	"github.com/mixtune/mixtune/safetensors"
)

// A checkpoint is a directory checkpoints/step-NNNNNN/ holding everything
// a run needs to continue bit-identically: the trainable fp32 weights, the
// optimizer state, and state.json (step, data-loader position, loss-scaler
// state, config hash, counters). checkpoint.json, written last, lists each
// file's SHA-256; a checkpoint whose files do not match it is corrupt.

const (
	checkpointFormat = 1
	trainableFile    = "trainable.safetensors"
	optimizerFile    = "optimizer.safetensors"
	stateFile        = "state.json"
	manifestFile     = "checkpoint.json"
)

// checkpointState is a checkpoint's state.json.
type checkpointState struct {
	Format       int                `json:"format"`
	Step         int                `json:"step"`
	ConfigHash   string             `json:"config_hash"`
	Loader       data.LoaderState   `json:"loader"`
	Scaler       *amp.ScalerState   `json:"loss_scaler,omitempty"`
	OptimStep    int64              `json:"optimizer_step"`
	OptimScalars map[string]float64 `json:"optimizer_scalars"`
	WeightVer    uint64             `json:"weight_version"`
	MetricsBytes int64              `json:"metrics_bytes"` // metrics.jsonl's length at this step
	Skipped      int                `json:"skipped_steps"`
	LoopSeconds  float64            `json:"loop_seconds"`
	LastLoss     float64            `json:"last_loss"`
	ValBefore    *LossReport        `json:"val_before,omitempty"`
	TaskBefore   *TaskReport        `json:"task_before,omitempty"`
}

type checkpointManifest struct {
	Format int               `json:"format"`
	Step   int               `json:"step"`
	SHA256 map[string]string `json:"sha256"`
}

func checkpointName(step int) string { return fmt.Sprintf("step-%06d", step) }

// writeCheckpoint writes a checkpoint atomically: files go to a temporary
// directory, each fsynced, which is renamed into place and its parent
// fsynced. A crash at any point leaves either no checkpoint or a whole one.
func writeCheckpoint(root string, st checkpointState, params []*optim.Param, opt optim.Optimizer) (string, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	tmp, err := os.MkdirTemp(root, ".tmp-"+checkpointName(st.Step)+"-")
	if err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	var ws []safetensors.Tensor
	for _, p := range params {
		ws = append(ws, safetensors.Tensor{Name: p.Name, Shape: p.Shape, Data: p.Value, Dtype: amp.FP32})
	}
	os_ := opt.State()
	st.Format, st.OptimStep, st.OptimScalars = checkpointFormat, os_.Step, os_.Scalars
	var ost []safetensors.Tensor
	for name, v := range os_.Tensors {
		ost = append(ost, safetensors.Tensor{Name: name, Shape: []int{len(v)}, Data: v, Dtype: amp.FP32})
	}
	if err := safetensors.WriteFile(filepath.Join(tmp, trainableFile), ws, nil); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	if err := safetensors.WriteFile(filepath.Join(tmp, optimizerFile), ost, map[string]string{"optimizer": opt.Name()}); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(filepath.Join(tmp, stateFile), append(b, '\n')); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	man := checkpointManifest{Format: checkpointFormat, Step: st.Step, SHA256: map[string]string{}}
	for _, f := range []string{trainableFile, optimizerFile, stateFile} {
		if man.SHA256[f], err = fileSHA256(filepath.Join(tmp, f)); err != nil {
			return "", fmt.Errorf("write checkpoint: %w", err)
		}
	}
	b, _ = json.MarshalIndent(man, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(tmp, manifestFile), append(b, '\n')); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	final := filepath.Join(root, checkpointName(st.Step))
	os.RemoveAll(final) // a checkpoint of the same step from an abandoned attempt
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	if err := atomicfile.SyncDir(root); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	return final, nil
}

// pruneCheckpoints keeps the newest keep checkpoints and removes older
// ones and leftovers of interrupted writes.
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
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			os.RemoveAll(filepath.Join(root, e.Name()))
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
	b, err := os.ReadFile(filepath.Join(dir, manifestFile))
	if err != nil {
		return nil, fmt.Errorf("missing %s", manifestFile)
	}
	var man checkpointManifest
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("%s is damaged: %v", manifestFile, err)
	}
	if man.Format != checkpointFormat {
		return nil, fmt.Errorf("checkpoint format %d, this mixtune reads %d", man.Format, checkpointFormat)
	}
	for _, f := range []string{trainableFile, optimizerFile, stateFile} {
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
	b, _ = os.ReadFile(filepath.Join(dir, stateFile))
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
	f, err := os.Open(path)
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
