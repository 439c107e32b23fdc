package train

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/blas"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/model"
	"github.com/mixtune/mixtune/peft"
)

func TestAdapterRecipeErrors(t *testing.T) {
	dir := fixture(t)
	edit := func(old, new string) string {
		if !strings.Contains(goodConfig, old) {
			t.Fatalf("goodConfig has no %q", old)
		}
		return strings.Replace(goodConfig, old, new, 1)
	}
	cases := []struct {
		name, config string
		want         string // exact; C stands for the config path
	}{
		{"unknown type", edit("  type: lora", "  type: qlora"),
			`C:11: adapter.type: must be lora, dora or none, got "qlora"`},
		{"dropout out of range", edit("  r: 4", "  r: 4\n  dropout: 1.5"),
			`C:13: adapter.dropout: must be in [0, 1), got 1.5`},
		{"unknown init", edit("  r: 4", "  r: 4\n  init: loftq"),
			`C:13: adapter.init: must be default, gaussian or pissa, got "loftq"`},
		{"list and regex", edit("  r: 4", "  r: 4\n  target_regex: '.*q_proj'"),
			`C:13: adapter.target_regex: set target_modules (a list of names) or target_regex, not both`},
		{"bad regex", strings.Replace(edit("  r: 4", "  r: 4\n  target_regex: '(q'"), "  target_modules: [q_proj, v_proj]\n", "", 1),
			"C:13: adapter.target_regex: error parsing regexp: missing closing ): `(q`"},
		{"regex Python reads differently", strings.Replace(edit("  r: 4", "  r: 4\n  target_regex: '.*[[:alpha:]]_proj'"), "  target_modules: [q_proj, v_proj]\n", "", 1),
			`C:13: adapter.target_regex: the POSIX class [:alpha:] at offset 3 of ".*[[:alpha:]]_proj" is not read the same by Go and by Python's re (Go only: Python reads a set of its characters); use the common subset (see peft.CheckPortableRegex)`},
		{"regex matching nothing", strings.Replace(edit("  r: 4", "  r: 4\n  target_regex: 'q_proj'"), "  target_modules: [q_proj, v_proj]\n", "", 1),
			`C:13: adapter.target_regex: target_modules regex "q_proj" matches no linear module of the model (paths look like "model.layers.0.self_attn.q_proj")`},
		{"layers with a regex", strings.Replace(edit("  r: 4", "  r: 4\n  target_regex: '.*q_proj'\n  layers_to_transform: [1]"), "  target_modules: [q_proj, v_proj]\n", "", 1),
			`C:14: adapter.layers_to_transform: cannot be used with target_regex (PEFT refuses it too); put the layer numbers in the regex`},
		{"layer out of range", edit("  r: 4", "  r: 4\n  layers_to_transform: [0, 2]"),
			`C:13: adapter.layers_to_transform[1]: layer 2 does not exist (the model has layers 0 to 1)`},
		{"pissa rank above a module's size", edit("  r: 4", "  r: 12\n  init: pissa"),
			`C:12: adapter.r: init pissa takes r singular vectors: r = 12 exceeds min(out, in) = 8 of model.layers.0.self_attn.v_proj`},
		{"from a missing adapter", edit("  r: 4", "  r: 4\n  from: DIR/nope"),
			`C:13: adapter.from: open D/nope/adapter_config.json: no such file or directory`},
		{"from an adapter with modules_to_save", edit("  r: 4", "  r: 4\n  from: DIR/saves-head"),
			`C:13: adapter.from: the adapter in D/saves-head saves [lm_head] whole (modules_to_save); mixtune trains adapters only, so it cannot continue training those (merge it, or evaluate or generate with it)`},
		{"from with type none", edit("  type: lora", "  type: none\n  from: DIR/x"),
			`C:12: adapter.from: needs type lora or dora (type none trains every weight)`},
	}
	if err := os.MkdirAll(filepath.Join(dir, "saves-head"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "saves-head", peft.ConfigFile),
		[]byte(`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "modules_to_save": ["lm_head"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, dir, tc.config)
			_, err := Load(p, nil)
			want := strings.ReplaceAll(strings.ReplaceAll(tc.want, "C:", p+":"), "D/", dir+"/")
			if err == nil || err.Error() != want {
				t.Fatalf("error\n  %v\nwant\n  %q", err, want)
			}
		})
	}
}

// A DoRA run with dropout on modules picked by a regex saves a PEFT DoRA
// adapter; a second run continues from it (adapter.from), taking its
// hyperparameters, and a run resumed from resolved.yaml-style full recipes
// validates.
func TestDoRARunAndContinue(t *testing.T) {
	dir := fixture(t)
	cfg := strings.Replace(goodConfig, "  target_modules: [q_proj, v_proj]\n",
		"  type: dora\n  dropout: 0.1\n  target_regex: 'model\\.layers\\.1\\..*'\n", 1)
	cfg = strings.Replace(cfg, "  type: lora\n", "", 1)
	r, err := Load(writeConfig(t, dir, cfg), []string{"train.steps=3", "schedule.warmup_steps=1", "compute.blas=gonum"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Adapter.TargetModules != nil || r.Adapter.Init != peft.InitDefault {
		t.Fatalf("recipe adapter %+v: the regex should replace the default list, init default", r.Adapter)
	}
	sum, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(sum.RunDir, "adapter")
	m, _ := model.Load(filepath.Join(dir, "model"))
	l, err := peft.Load(saved, peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if !l.Config.UseDoRA || l.Config.Dropout != 0.1 || len(l.Modules) != 7 || !strings.HasPrefix(l.Modules[0].Path, "model.layers.1.") {
		t.Fatalf("saved adapter: %s, %d modules", l.Config, len(l.Modules))
	}

	// continue training from it: r, alpha and type come from the file
	cont := strings.Replace(goodConfig, "  r: 4\n  alpha: 8\n  target_modules: [q_proj, v_proj]\n", "  from: "+saved+"\n", 1)
	cont = strings.Replace(cont, "name: t", "name: t2", 1)
	r2, err := Load(writeConfig(t, dir, cont), []string{"train.steps=2", "schedule.warmup_steps=1", "compute.blas=gonum"})
	if err == nil || !strings.Contains(err.Error(), "adapter.type: lora differs from dora in the adapter of adapter.from") {
		t.Fatalf("type lora against a DoRA file: %v", err)
	}
	cont = strings.Replace(cont, "  type: lora\n", "", 1)
	if r2, err = Load(writeConfig(t, dir, cont), []string{"train.steps=2", "schedule.warmup_steps=1", "compute.blas=gonum"}); err != nil {
		t.Fatal(err)
	}
	if r2.Adapter.Type != "dora" || r2.Adapter.R != 4 || r2.Adapter.Dropout != 0.1 {
		t.Fatalf("continued recipe adapter %+v", r2.Adapter)
	}
	before := slices.Clone(l.Modules[0].M)
	sum2, err := Run(context.Background(), r2, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := peft.Load(filepath.Join(sum2.RunDir, "adapter"), peft.BaseOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Equal(l2.Modules[0].M, before) {
		t.Fatal("continued training did not change the magnitudes")
	}
	// the resolved recipe, every field given, validates again
	res, err := r2.Config.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(writeConfig(t, dir, string(res)), nil); err != nil {
		t.Fatalf("resolved recipe: %v", err)
	}
}

// A PiSSA run's saved adapter applies to the original base model: eval with
// it reproduces the run's final validation loss.
func TestPiSSARunSavesAnAdapterOfTheOriginalModel(t *testing.T) {
	dir := fixture(t)
	cfg := strings.Replace(goodConfig, "  r: 4\n", "  r: 4\n  init: pissa\n", 1)
	r, err := Load(writeConfig(t, dir, cfg), []string{"train.steps=3", "schedule.warmup_steps=1", "compute.blas=gonum", "task.eval_file="})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := Run(context.Background(), r, Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Eval(EvalConfig{Model: filepath.Join(dir, "model"), Adapter: filepath.Join(sum.RunDir, "adapter"),
		Data: filepath.Join(dir, "val.jsonl"), SeqLen: 16, BatchSize: 4, Mode: data.Pad, BLAS: blas.KindGonum})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run's final val loss %.6f, eval of base + saved adapter %.6f", sum.ValAfter.Loss, rep.Loss)
	if d := rep.Loss - sum.ValAfter.Loss; d > 1e-4 || d < -1e-4 {
		t.Errorf("eval of the saved PiSSA adapter on the original model gives %.6f, the run ended at %.6f", rep.Loss, sum.ValAfter.Loss)
	}
}

// DoRA on a base whose o_proj and q_proj have rows of zeros (as
// Llama-3.1-8B's o_proj does): it trains without NaN in every precision,
// from the base model's validation loss.
func TestDoRATrainsOnZeroRows(t *testing.T) {
	dir := fixture(t)
	m, err := model.Load(filepath.Join(dir, "model"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"model.layers.0.self_attn.o_proj.weight", "model.layers.1.self_attn.q_proj.weight"} {
		w := m.Weights[name]
		for _, row := range []int{0, 3, 7} {
			clear(w.Data[row*w.Shape[1] : (row+1)*w.Shape[1]])
		}
	}
	if err := m.Save(filepath.Join(dir, "model"), amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	for _, precision := range []string{"fp32", "bf16", "fp16"} {
		r, err := Load(writeConfig(t, dir, goodConfig), []string{"compute.blas=gonum", "adapter.type=dora", "precision=" + precision,
			"adapter.target_modules=[q_proj, o_proj, v_proj]", "name=dora-" + precision, "task.eval_file=", "train.log_every=1"})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := Run(context.Background(), r, Options{Out: io.Discard})
		if err != nil {
			t.Fatalf("%s: %v", precision, err)
		}
		var losses []float64
		for _, rec := range readMetrics(t, sum.RunDir) {
			if l, ok := rec["loss"]; ok {
				losses = append(losses, l)
			}
		}
		t.Logf("%s: val loss %.4f → %.4f, step losses %.4f", precision, float64(sum.ValBefore.Loss), float64(sum.ValAfter.Loss), losses)
		if len(losses) != 6 || !(float64(sum.ValAfter.Loss) < float64(sum.ValBefore.Loss)) {
			t.Fatalf("%s: losses %v, validation %v → %v", precision, losses, sum.ValBefore.Loss, sum.ValAfter.Loss)
		}
	}
}
