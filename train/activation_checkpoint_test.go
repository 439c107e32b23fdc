package train

import (
	"context"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// Activation checkpointing recomputes what the whole graph kept, op for
// op: a run with it logs the same metrics bit for bit and saves the same
// weights as a run without. The cases cover what a layer's own graph must
// get right: adapters on only some layers (layers of two kinds, so two
// layer graphs), DoRA's cached norms, dropout masks drawn per layer, a
// 16-bit frozen base, a 4-bit one (each layer's blob bound to the shared
// layer graph), low-precision casts cached per step, gradient
// accumulation, and full fine-tuning of every weight. (The fp16 full
// fine-tune found that an evaluation graph cast the training weights to
// fp16 once for good, so validation losses used the weights of the first
// evaluation; both graphs now cast them again every step.)
func TestActivationCheckpointingTrainsTheSame(t *testing.T) {
	cases := map[string][]string{
		"lora fp32":      nil,
		"dora bf16 base": {"adapter.type=dora", "adapter.dropout=0.1", "adapter.layers_to_transform=[1]", "precision=bf16", "model.base_dtype=bf16", "train.grad_accum=2"},
		"full fp16":      {"adapter.type=none", "precision=fp16", "optimizer.lr=1.0e-3"},
		"lora nf4 base":  {"model.quantize=nf4", "precision=bf16", "model.base_dtype=bf16"},
	}
	for name, sets := range cases {
		t.Run(name, func(t *testing.T) {
			dir := fixture(t)
			// and whatever the thread count: the whole graph on 3, the
			// checkpointed layers on 1
			runDir := func(ckpt, threads string) string {
				r := resumeRecipe(t, dir, append([]string{"name=ckpt-" + ckpt, "train.checkpoint_every=0", "train.steps=6",
					"compute.activation_checkpointing=" + ckpt, "compute.threads=" + threads, "compute.blas=native"}, sets...)...)
				s, err := Run(context.Background(), r, Options{Out: io.Discard})
				if err != nil {
					t.Fatal(err)
				}
				return s.RunDir
			}
			whole, ckpt := runDir("false", "3"), runDir("true", "1")
			sameMetrics(t, whole, ckpt)
			n := 0
			err := filepath.WalkDir(whole, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !strings.HasSuffix(p, ".safetensors") {
					return err
				}
				rel, _ := filepath.Rel(whole, p)
				sameFile(t, p, filepath.Join(ckpt, rel))
				n++
				return nil
			})
			if err != nil || n == 0 {
				t.Fatalf("compared %d weight files (%v)", n, err)
			}
		})
	}
}

// Under data parallelism, with gradients summed during the backward pass
// (taps on the model graph's trainable nodes, which a checkpointed layer's
// backward fills) and dropout drawn by each rank's row offset,
// checkpointing still changes nothing.
func TestActivationCheckpointingDataParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("trains several times")
	}
	dir := fixture(t)
	var runs []string
	for _, ckpt := range []string{"false", "true"} {
		s, err := runRanks(t, 2, dpRecipe(t, dir, "compute.activation_checkpointing="+ckpt), Options{Out: io.Discard, Overlap: true, BucketBytes: 256}, 0)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, s.RunDir)
	}
	compareRuns(t, runs[0], runs[1], 0)
}
