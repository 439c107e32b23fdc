package train

import (
	"context"
	"io"
	"path/filepath"
	"testing"
)

// The quickstart on the native backend logs the losses the README's
// quickstart run logged (docs/quickstart.md: an AMD EPYC with AVX2/FMA,
// 2026-11-26; its val loss 0.0245 and 99.5% are the bits an Intel Xeon
// with AVX-512 printed before), bit for bit: the native kernels sum in an
// order that depends on k alone, whatever the CPU's vector units or the
// thread count. The whole run takes minutes, so the test stops after step
// 60 and compares the validation loss before training and the first six
// logged losses, which already pass through every op of the run.
func TestQuickstartLossesOnNative(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir()) // the token cache
	out := t.TempDir()
	t.Chdir("..") // the recipe names its files from the repository's root
	r, err := Load(filepath.Join("configs", "quickstart.yaml"), []string{"compute.blas=native", "output_dir=" + out, "task.before=false"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sum, err := Run(ctx, r, Options{Out: io.Discard, afterStep: func(s int) {
		if s == 60 {
			cancel()
		}
	}})
	if err != ErrInterrupted {
		t.Fatalf("run: %v, want the interruption after step 60", err)
	}
	// the quickstart's metrics.jsonl, as printed with %v by encoding/json
	want := map[int]float64{
		10: 0.6916682720184326,
		20: 0.6802968978881836,
		30: 0.6402530074119568,
		40: 0.662095308303833,
		50: 0.6902195811271667,
		60: 0.6148186922073364,
	}
	const wantVal = 1.4915575853428498
	seen := 0
	for _, m := range readMetrics(t, sum.RunDir) {
		step := int(m["step"])
		if v, ok := m["val_loss"]; ok && step == 0 && v != wantVal {
			t.Errorf("val loss before training %v, want %v", v, wantVal)
		}
		if l, ok := m["loss"]; ok {
			if w, ok := want[step]; !ok || l != w {
				t.Errorf("step %d: loss %v, want %v", step, l, w)
			}
			seen++
		}
	}
	if seen != len(want) {
		t.Errorf("%d losses logged, want %d", seen, len(want))
	}
}
