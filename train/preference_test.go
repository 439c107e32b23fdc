package train

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/model"
)

// prefConfig is a DPO recipe over prefFixture's pairs; tests edit it.
const prefConfig = `name: p
seed: 3
output_dir: OUT
model:
  path: DIR/model
data:
  train: DIR/pairs.jsonl
  validation_split: 0
  seq_len: 16
adapter:
  type: lora
  r: 4
  alpha: 8
  target_modules: [q_proj, v_proj]
train:
  objective: dpo
  steps: 2
  batch_size: 8
  eval_every: 0
  log_every: 1
optimizer:
  lr: 1.0e-2
schedule:
  warmup_steps: 0
task:
  before: false
  after: false
`

// prefFixture is fixture's model with 16 preference pairs.
func prefFixture(t *testing.T) string {
	t.Helper()
	dir := fixture(t)
	var b strings.Builder
	for i := range 16 {
		c := string(rune('a' + i))
		b.WriteString(`{"prompt": "q` + c + `=", "chosen": "` + strings.ToUpper(c) + `", "rejected": "` + c + `!"}` + "\n")
	}
	if err := os.WriteFile(filepath.Join(dir, "pairs.jsonl"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPreferenceConfigErrors(t *testing.T) {
	dir := prefFixture(t)
	for _, c := range []struct {
		sets []string
		want string // "" for a valid recipe
	}{
		{nil, ""},
		{[]string{"train.objective=orpo", "adapter.type=none"}, ""},
		{[]string{"train.objective=simpo", "preference.simpo.gamma=1"}, ""},
		{[]string{"preference.dpo.loss_type=robust", "preference.dpo.label_smoothing=0.1"}, ""},
		{[]string{"train.objective=kto"}, "must be sft, dpo, orpo or simpo"},
		{[]string{"data.mode=pack"}, "pack is refused for preference pairs"},
		{[]string{"adapter.type=none"}, ""},
		{[]string{"train.objective=orpo", "preference.dpo.beta=0.2"}, "preference.dpo"},
		{[]string{"preference.dpo.beta=-1"}, "beta -1 must be positive"},
		{[]string{"preference.dpo.loss_type=hinge"}, "preference loss \"hinge\""},
		{[]string{"preference.dpo.loss_type=ipo", "preference.dpo.label_smoothing=0.1"}, "sigmoid and robust losses only"},
	} {
		_, err := Load(writeConfig(t, dir, prefConfig), c.sets)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.sets, err, c.want)
		}
	}
}

// A recipe without an objective resolves, and so hashes, as before
// objectives existed: nothing of them is written.
func TestSFTRecipeResolvesWithoutObjective(t *testing.T) {
	dir := fixture(t)
	for _, sets := range [][]string{nil, {"train.objective=sft"}} {
		r, err := Load(writeConfig(t, dir, goodConfig), sets)
		if err != nil {
			t.Fatal(err)
		}
		y, err := r.Config.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		if s := string(y); strings.Contains(s, "objective") || strings.Contains(s, "preference") {
			t.Errorf("%v: resolved recipe mentions the objective:\n%s", sets, s)
		}
	}
}

// A bad pair is an input error naming file and line, reported before the
// run directory exists.
func TestBadPairsFailBeforeTheRunDirectory(t *testing.T) {
	dir := prefFixture(t)
	bad := filepath.Join(dir, "bad_pairs.jsonl")
	os.WriteFile(bad, []byte(`{"prompt": "a", "chosen": "b", "rejected": "c"}`+"\n"+`{"prompt": "a", "chosen": "b", "rejected": "b"}`+"\n"), 0o644)
	r, err := Load(writeConfig(t, dir, prefConfig), []string{"data.train=" + bad})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), r, Options{Out: io.Discard})
	if !IsInputError(err) || !strings.Contains(err.Error(), "bad_pairs.jsonl:2") || !strings.Contains(err.Error(), "the same") {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "runs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run directory was made: %v", err)
	}
}

// Preference pairs read from Parquet (written by DuckDB) train as their
// JSONL does, bit for bit; a Parquet file without a column the pairs need
// is an input error naming the file and column, before the run directory.
func TestPreferencePairsFromParquet(t *testing.T) {
	dir := prefFixture(t)
	pq := func(name string) string {
		p, err := filepath.Abs(filepath.Join("..", "data", "testdata", "parquet", name))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var losses [2][]float64
	for i, file := range []string{"pairs.jsonl", "pairs.parquet"} {
		r, err := Load(writeConfig(t, dir, prefConfig), []string{"data.train=" + pq(file), "train.batch_size=3", "data.seq_len=40", "compute.blas=gonum", "name=" + file})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := Run(context.Background(), r, Options{Out: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range readMetrics(t, sum.RunDir) {
			if l, ok := m["loss"]; ok {
				losses[i] = append(losses[i], l)
			}
		}
	}
	if len(losses[0]) == 0 || !slices.Equal(losses[0], losses[1]) {
		t.Errorf("losses from JSONL %v, from Parquet %v", losses[0], losses[1])
	}
	os.RemoveAll(filepath.Join(dir, "runs"))
	r, err := Load(writeConfig(t, dir, prefConfig), []string{"data.train=" + pq("bad_pairs_missing_rejected.parquet")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(context.Background(), r, Options{Out: io.Discard})
	if !IsInputError(err) || !strings.Contains(err.Error(), `bad_pairs_missing_rejected.parquet: no column "rejected"`) {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "runs")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the run directory was made: %v", err)
	}
}

// With train.eval_every, a preference run evaluates its validation pairs
// every eval_every steps too, under TRL's eval_ names, without changing
// the training steps.
func TestPreferencePairsAtEvalEvery(t *testing.T) {
	dir := prefFixture(t)
	var logs [2][]map[string]float64
	for i, every := range []string{"0", "2"} {
		r, err := Load(writeConfig(t, dir, prefConfig), []string{"compute.blas=gonum", "train.steps=5", "train.batch_size=4", "name=every" + every,
			"train.eval_every=" + every, "data.validation=" + filepath.Join(dir, "pairs.jsonl")})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := Run(context.Background(), r, Options{Out: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		logs[i] = readMetrics(t, sum.RunDir)
	}
	evals := func(ms []map[string]float64) (steps []int) {
		for _, m := range ms {
			if _, ok := m["eval_rewards/accuracies"]; ok {
				steps = append(steps, int(m["step"]))
			}
		}
		return steps
	}
	if got := evals(logs[0]); !slices.Equal(got, []int{0, 5}) {
		t.Errorf("eval_every 0: validation pairs at steps %v, want before and after", got)
	}
	if got := evals(logs[1]); !slices.Equal(got, []int{0, 2, 4, 5}) {
		t.Errorf("eval_every 2: validation pairs at steps %v, want 0, 2, 4 and 5", got)
	}
	var losses [2][]float64
	for i, ms := range logs {
		for _, m := range ms {
			if l, ok := m["loss"]; ok {
				losses[i] = append(losses[i], l)
			}
		}
	}
	if len(losses[0]) != 5 || !slices.Equal(losses[0], losses[1]) {
		t.Errorf("training losses %v without evaluations, %v with", losses[0], losses[1])
	}
}

// Every objective trains end to end and logs TRL's metrics; the first
// step's policy is the reference (LoRA's B starts at 0), so DPO's loss
// there is log 2 and its rewards 0. Two micro-batches of 4 pairs take the
// step one batch of 8 takes: the same loss and gradient norm, to fp32
// rounding of the sums over pairs.
func TestPreferenceRuns(t *testing.T) {
	dir := prefFixture(t)
	run := func(sets ...string) ([]map[string]float64, *Summary) {
		t.Helper()
		r, err := Load(writeConfig(t, dir, prefConfig), append(sets, "compute.blas=gonum"))
		if err != nil {
			t.Fatal(err)
		}
		sum, err := Run(context.Background(), r, Options{Out: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		return readMetrics(t, sum.RunDir), sum
	}
	names := []string{"rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen", "logps/rejected"}
	for _, obj := range []string{"dpo", "orpo", "simpo"} {
		ms, sum := run("train.objective="+obj, "name="+obj, "data.validation="+filepath.Join(dir, "pairs.jsonl"), "train.batch_size=6")
		if sum.PreferenceBefore == nil || sum.PreferenceAfter == nil {
			t.Fatalf("%s: no validation metrics: %+v", obj, sum)
		}
		if obj == "dpo" && (sum.PreferenceBefore["eval_rewards/accuracies"] != 0 || math.Abs(sum.PreferenceBefore["eval_loss"]-math.Ln2) > 1e-6) {
			t.Errorf("dpo before training, policy = reference: %v", sum.PreferenceBefore)
		}
		var steps []map[string]float64
		for _, m := range ms {
			if _, ok := m["loss"]; ok {
				steps = append(steps, m)
			}
		}
		ms = steps
		if len(ms) != 2 {
			t.Fatalf("%s: %d metrics lines", obj, len(ms))
		}
		for _, k := range names {
			if _, ok := ms[0][k]; !ok {
				t.Errorf("%s: metrics.jsonl lacks %s", obj, k)
			}
		}
		if obj == "dpo" && (math.Abs(ms[0]["loss"]-math.Ln2) > 1e-6 || ms[0]["rewards/margins"] != 0) {
			t.Errorf("dpo's first step: loss %v, margin %v; want log 2 and 0", ms[0]["loss"], ms[0]["rewards/margins"])
		}
	}
	// full fine-tuning: the reference is computed before the first step,
	// whose policy it equals; evaluated on the same pairs after training,
	// the policy has moved from it
	ms, sum := run("name=full", "adapter.type=none", "data.cache=false", "data.validation="+filepath.Join(dir, "pairs.jsonl"))
	if math.Abs(ms[1]["loss"]-math.Ln2) > 1e-6 || sum.PreferenceAfter["eval_rewards/margins"] == 0 {
		t.Errorf("full fine-tuning: first step's loss %v, margin after %v", ms[1]["loss"], sum.PreferenceAfter["eval_rewards/margins"])
	}
	one, _ := run("name=one")
	two, _ := run("name=two", "train.batch_size=4", "train.grad_accum=2")
	for _, k := range append(names, "loss", "grad_norm") {
		a, b := one[0][k], two[0][k]
		if math.Abs(a-b) > 1e-5*math.Max(1, math.Abs(a)) {
			t.Errorf("%s: %.9g in one batch of 8, %.9g in two of 4", k, a, b)
		}
	}
}

// A preference run interrupted and resumed takes the steps an
// uninterrupted one takes, on the same pairs: bit-identical metrics.
func TestPreferenceResumeIsBitIdentical(t *testing.T) {
	dir := prefFixture(t)
	recipe := func(name string) *Recipe {
		r, err := Load(writeConfig(t, dir, prefConfig), []string{"name=" + name, "train.steps=6", "train.batch_size=4",
			"train.checkpoint_every=2", "compute.blas=gonum"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	resumesBitIdentical(t, recipe, 3) // step 3: mid-epoch (4 batches an epoch)
}

// resumesBitIdentical runs recipe("full") to the end, and recipe("cut")
// interrupted after step stopAt and resumed, and checks that the two log
// the same metrics bit for bit.
func resumesBitIdentical(t *testing.T, recipe func(name string) *Recipe, stopAt int) {
	t.Helper()
	full, err := Run(context.Background(), recipe("full"), Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first, err := Run(ctx, recipe("cut"), Options{Out: io.Discard, afterStep: func(s int) {
		if s == stopAt {
			cancel()
		}
	}})
	cancel()
	if err != ErrInterrupted {
		t.Fatalf("first leg: %v, want the interruption after step %d", err, stopAt)
	}
	if _, err := Run(context.Background(), recipe("cut"), Options{Out: io.Discard, ResumeDir: first.RunDir}); err != nil {
		t.Fatal(err)
	}
	sameMetrics(t, full.RunDir, first.RunDir)
}

// Preference pairs shared out among in-process ranks take the step one
// process takes with the same global batch, and the step of one batch of
// all the step's pairs (no accumulation): the same losses, gradient norms
// and TRL metrics, training and validation, to the fp32 summation order
// of different world sizes (the 2e-5 relative of the rows' data
// parallelism). Three ranks share 4 pairs as 1, 1 and 2, so two ranks pad
// their share. Every rank logs what rank 0 logs (runRanks checks the
// summaries), and two runs on the same ranks are bit-identical.
func TestPreferenceDataParallelMatchesOneProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("trains several times")
	}
	for _, v := range []struct {
		name string
		sets []string
	}{
		{"dpo lora", nil}, // the reference pass (adapter off) on each rank
		{"dpo full fine-tuning", []string{"adapter.type=none", "data.cache=false"}}, // reference values precomputed, shared out
		{"orpo", []string{"train.objective=orpo"}},                                  // the NLL's mean over the step's chosen tokens
	} {
		t.Run(v.name, func(t *testing.T) {
			dir := prefFixture(t)
			cfg := writeConfig(t, dir, prefConfig)
			rec := func(sets ...string) func() *Recipe {
				return func() *Recipe {
					all := append([]string{"train.steps=4", "train.eval_every=2", "compute.blas=gonum",
						"data.validation=" + filepath.Join(dir, "pairs.jsonl")}, v.sets...)
					r, err := Load(cfg, append(all, sets...))
					if err != nil {
						t.Fatal(err)
					}
					return r
				}
			}
			accum := rec("train.batch_size=4", "train.grad_accum=2")
			one, err := runRanks(t, 0, accum, Options{Out: io.Discard}, 0)
			if err != nil {
				t.Fatal(err)
			}
			big, err := runRanks(t, 0, rec("train.batch_size=8"), Options{Out: io.Discard}, 0)
			if err != nil {
				t.Fatal(err)
			}
			two, err := runRanks(t, 2, accum, Options{Out: io.Discard}, 0)
			if err != nil {
				t.Fatal(err)
			}
			three, err := runRanks(t, 3, accum, Options{Out: io.Discard, Overlap: true, BucketBytes: 256}, 0)
			if err != nil {
				t.Fatal(err)
			}
			compareRuns(t, one.RunDir, big.RunDir, 2e-5)
			compareRuns(t, one.RunDir, two.RunDir, 2e-5)
			compareRuns(t, one.RunDir, three.RunDir, 2e-5)
			for _, k := range []string{"eval_loss", "eval_rewards/accuracies", "eval_logps/chosen"} {
				a, b := one.PreferenceAfter[k], three.PreferenceAfter[k]
				if _, ok := three.PreferenceAfter[k]; !ok || math.Abs(a-b) > 2e-5*math.Max(math.Abs(a), 1e-3) {
					t.Errorf("%s after training: %v in one process, %v on 3 ranks", k, a, b)
				}
			}
			steps := 0
			for _, m := range readMetrics(t, two.RunDir) {
				if _, ok := m["loss"]; ok {
					steps++
					if _, ok := m["rewards/accuracies"]; !ok {
						t.Errorf("2 ranks: the line %v lacks TRL's metrics", m)
					}
				}
			}
			if steps != 4 {
				t.Errorf("2 ranks logged %d steps, want 4", steps)
			}
			again, err := runRanks(t, 2, accum, Options{Out: io.Discard}, 0)
			if err != nil {
				t.Fatal(err)
			}
			compareRuns(t, two.RunDir, again.RunDir, 0)
		})
	}
}

// A preference run on several ranks refuses LoRA dropout (its masks are
// keyed by a row's place in one process's batch), before anything is
// written.
func TestPreferenceDataParallelRefusesDropout(t *testing.T) {
	dir := prefFixture(t)
	cfg := writeConfig(t, dir, prefConfig)
	_, err := runRanks(t, 2, func() *Recipe {
		r, err := Load(cfg, []string{"adapter.dropout=0.1", "compute.blas=gonum"})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}, Options{Out: io.Discard}, 0)
	if err == nil || !strings.Contains(err.Error(), "adapter.dropout") || !IsInputError(err) {
		t.Fatalf("dropout on 2 ranks: %v", err)
	}
	if _, serr := os.Stat(filepath.Join(dir, "runs")); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a run directory was made: %v", serr)
	}
}

// A full fine-tuning run's reference log-probabilities are cached: a
// second run reads them (no reference pass) and trains bit for bit as the
// first; other pairs or another model miss the entry; a damaged entry is
// not used, with a warning, and computed again to the same values. Ranks
// agree: two ranks compute their entry together, then all read it.
func TestPreferenceReferenceCache(t *testing.T) {
	dir := prefFixture(t)
	userCache := testUserCache(t, dir)
	entries := func() []string {
		e, _ := filepath.Glob(filepath.Join(userCache, "mixtune", "reference", "*.reference"))
		return e
	}
	cfg := writeConfig(t, dir, prefConfig)
	recipe := func(sets ...string) func() *Recipe {
		return func() *Recipe {
			r, err := Load(cfg, append([]string{"adapter.type=none", "compute.blas=gonum", "data.validation=" + filepath.Join(dir, "pairs.jsonl")}, sets...))
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	run := func(sets ...string) (*Summary, string) {
		t.Helper()
		var out bytes.Buffer
		sum, err := Run(context.Background(), recipe(sets...)(), Options{Out: &out})
		if err != nil {
			t.Fatalf("%v: %v\n%s", sets, err, out.String())
		}
		return sum, out.String()
	}
	const computed, cached = "reference log-probabilities: computed for 32 pairs, cached in ", "reference log-probabilities: from the cache ("
	first, out := run("name=first")
	if !strings.Contains(out, computed) || len(entries()) != 1 {
		t.Fatalf("first run: %d entries, output:\n%s", len(entries()), out)
	}
	entry := entries()[0]
	second, out := run("name=second")
	if !strings.Contains(out, cached+entry+")") || strings.Contains(out, computed) {
		t.Fatalf("second run did not read the cache:\n%s", out)
	}
	compareRuns(t, first.RunDir, second.RunDir, 0)

	// a run interrupted after its first step resumes on the cached values
	// (the base model's, whatever the checkpoint holds), to the same bits
	ctx, cancel := context.WithCancel(context.Background())
	cut, err := Run(ctx, recipe("name=cut")(), Options{Out: io.Discard, afterStep: func(int) { cancel() }})
	cancel()
	if err != ErrInterrupted {
		t.Fatalf("interrupted run: %v", err)
	}
	var resumed bytes.Buffer
	if _, err := Run(context.Background(), recipe("name=cut")(), Options{Out: &resumed, ResumeDir: cut.RunDir}); err != nil {
		t.Fatalf("resume: %v\n%s", err, resumed.String())
	}
	if !strings.Contains(resumed.String(), cached+entry+")") {
		t.Errorf("the resumed run did not read the cache:\n%s", resumed.String())
	}
	compareRuns(t, first.RunDir, cut.RunDir, 0)

	// other pairs (one token changed) and another model miss
	pairs, err := os.ReadFile(filepath.Join(dir, "pairs.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.jsonl")
	if err := os.WriteFile(other, bytes.Replace(pairs, []byte(`"A"`), []byte(`"Z"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, out := run("name=other-pairs", "data.validation="+other); !strings.Contains(out, computed) {
		t.Errorf("other pairs read the cache:\n%s", out)
	}
	m, err := model.New(model.Config{VocabSize: 259, HiddenSize: 16, IntermediateSize: 24, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}, 2) // fixture's model, another seed
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(filepath.Join(dir, "model2"), amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	if _, out := run("name=other-model", "model.path="+filepath.Join(dir, "model2")); !strings.Contains(out, computed) {
		t.Errorf("another model read the cache:\n%s", out)
	}
	if n := len(entries()); n != 3 {
		t.Errorf("%d entries after 3 keys", n)
	}

	// a damaged entry: a value's bit flipped
	b, err := os.ReadFile(entry)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-sha256.Size-3] ^= 1
	if err := os.WriteFile(entry, b, 0o644); err != nil {
		t.Fatal(err)
	}
	mended, out := run("name=mended")
	if !strings.Contains(out, "warning: reference cache entry "+entry+": fails its checksum; not used") || !strings.Contains(out, computed) {
		t.Fatalf("a damaged entry:\n%s", out)
	}
	compareRuns(t, first.RunDir, mended.RunDir, 0)
	if _, out := run("name=after-mend"); !strings.Contains(out, cached) {
		t.Errorf("the rewritten entry was not read:\n%s", out)
	}

	// two ranks: their own entry (2 rows a reference batch), then read by both
	var outs [2]bytes.Buffer
	for i := range outs {
		if _, err := runRanks(t, 2, recipe("name=ranks"+string(rune('a'+i))), Options{Out: &outs[i]}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(outs[0].String(), computed) || !strings.Contains(outs[1].String(), cached) {
		t.Errorf("two ranks: first run\n%s\nsecond run\n%s", outs[0].String(), outs[1].String())
	}
	compareRuns(t, filepath.Join(dir, "runs", "ranksa"), filepath.Join(dir, "runs", "ranksb"), 0)
}

// The reference cache's key holds a model config's values, not the
// addresses of its pointers: two copies with equal values key alike.
func TestReferenceConfigKey(t *testing.T) {
	a := model.Config{HiddenSize: 16, RopeScaling: &model.RopeScaling{Type: "llama3", Factor: 8}, BnB4: &model.BnB4Config{QuantType: "nf4"}}
	b := a
	b.RopeScaling, b.BnB4 = &model.RopeScaling{Type: "llama3", Factor: 8}, &model.BnB4Config{QuantType: "nf4"}
	c := a
	c.RopeScaling = &model.RopeScaling{Type: "llama3", Factor: 4}
	if configKey(a) != configKey(b) || configKey(a) == configKey(c) || configKey(a) == configKey(model.Config{HiddenSize: 16}) {
		t.Errorf("keys: %s; %s; %s", configKey(a), configKey(b), configKey(c))
	}
}
