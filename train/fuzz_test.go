package train_test

// Fuzz targets for the recipe loader. They use only train.Load, so that
// they hold whatever the package does inside. Recipes name files relative
// to the working directory, the package directory here, so the shipped
// recipes are used with "../" before their paths. (Chdir would not do: the
// fuzzing engine reads and writes testdata/fuzz relative to it.)

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mixtune/mixtune/internal/yamlconf"
	"github.com/mixtune/mixtune/train"
)

// shippedRecipe is configs/NAME.yaml with its paths made relative to this
// directory.
func shippedRecipe(f *testing.F, name string) string {
	b, err := os.ReadFile(filepath.Join("..", "configs", name+".yaml"))
	if err != nil {
		f.Fatal(err)
	}
	return pathsUp.ReplaceAllString(string(b), "$1../$2")
}

// pathsUp finds the repository-relative paths in a recipe.
var pathsUp = regexp.MustCompile(`(?m)(:\s*)((?:models|tasks|corpus|runs)(?:/|\s|$))`)

// loadLimit is how long one Load may take before the fuzzer calls it a
// hang: a recipe is validated before any work, in milliseconds.
const loadLimit = 10 * time.Second

// FuzzLoad: no recipe file makes Load panic, hang or allocate without
// bound, and every error is a config error that names the file and a
// line within it.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"quickstart", "reference", "pretrain_tiny", "dora_quickstart", "pissa_quickstart", "corpus_lora"} {
		f.Add([]byte(shippedRecipe(f, name)))
	}
	for _, s := range []string{
		"",
		"name: x\n",
		"- a\n",
		"name: [\n",
		"name: &a x\nseed: *a\n",
		// an alias bomb: nine levels of ten aliases each, 10^9 leaves if expanded
		"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
			"g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\ni: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]\n" +
			"adapter:\n  target_modules: *i\namp:\n  fp32_ops: *i\ndevices: *i\n",
		// init random with 10^8 layers: Load once ran out of memory listing the adapter's targets in each
		"model:\n  init: random\n  architecture: {hidden_size: 4, intermediate_size: 4, num_hidden_layers: 100000000, num_attention_heads: 2, max_position_embeddings: 8}\ndata: {train: ../tasks/dates/train.jsonl, seq_len: 4}\nadapter: {type: lora, r: 1, alpha: 1}\n",
		"model:\n  init: random\n  architecture: {hidden_size: 4611686018427387904, intermediate_size: 4611686018427387904, num_hidden_layers: 2, num_attention_heads: 2, max_position_embeddings: 9223372036854775807}\ndata: {train: ../tasks/dates/train.jsonl, seq_len: 4}\n",
		"model: {path: ../models/tiny-byte}\ndata: {train: ../tasks/dates/train.jsonl}\nadapter: {from: ../models/tiny-byte}\n",
		"model: {path: ../models/tiny-byte}\ndata: {train: ../tasks/dates/train.jsonl}\nadapter: {target_regex: '(', layers_to_transform: [-1, 9999999999]}\n",
		"model: {path: ../models/tiny-byte}\ndata: {train: ../tasks/dates/train.jsonl, seq_len: 9223372036854775807}\ntrain: {steps: -1}\nschedule: {warmup_steps: 9223372036854775807}\n",
		"model: {path: /dev/null}\ndata: {train: /dev/zero, validation: /proc/self/mem}\ntask: {eval_file: /}\n",
		"precision: fp16\namp: {init_scale: 1e308, growth_factor: 1e308, max_scale: 1e-308, low_precision_ops: [matmul, matmul, nope]}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		path := filepath.Join(t.TempDir(), "recipe.yaml")
		if err := os.WriteFile(path, src, 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r, err := train.Load(path, nil)
		if d := time.Since(start); d > loadLimit {
			t.Fatalf("Load took %v", d)
		}
		if err != nil {
			checkConfigError(t, err, path, nil, maxLines(src))
			return
		}
		if r.Path != path || string(r.Raw) != string(src) {
			t.Fatalf("the recipe records path %q and %d bytes, want %q and %d", r.Path, len(r.Raw), path, len(src))
		}
	})
}

// FuzzSets: --set overrides on a valid recipe. Nothing makes Load panic
// or hang; every error names the recipe file or one of the overrides; and
// an accepted override of a plain integer or name field takes effect (the
// last one of a key wins).
func FuzzSets(f *testing.F) {
	recipe := filepath.Join(f.TempDir(), "quickstart.yaml")
	if err := os.WriteFile(recipe, []byte(shippedRecipe(f, "quickstart")), 0o644); err != nil {
		f.Fatal(err)
	}
	if _, err := train.Load(recipe, nil); err != nil {
		f.Fatalf("the recipe the overrides apply to: %v", err)
	}
	for _, s := range []string{
		"train.steps=50",
		"train.steps=50\ntrain.steps=7",
		"seed=18446744073709551615",
		"seed=-1",
		"name=my.run-2",
		"name=../escape",
		"data.seq_len=1000000",
		"optimizer.lr=.nan",
		"optimizer.lr=1e-3\nschedule.min_lr=1",
		"adapter.target_modules=[q_proj, nope]",
		"adapter.target_modules=",
		"adapter.type=none",
		"adapter.type=dora\nadapter.init=pissa",
		"model.init=random",
		"model.init=random\nmodel.path=",
		"model.architecture.hidden_size=8",
		"model.init=random\nmodel.architecture={hidden_size: 8, intermediate_size: 8, num_hidden_layers: 0x5f5e100, num_attention_heads: 2, max_position_embeddings: 64}",
		"model={}",
		"train=1",
		"train.steps.x=1",
		"noequals",
		"=1",
		"a..b=1",
		"train.steps=[",
		"train.steps=&a 1",
		"train.steps=*a",
		"train.steps=!!binary aGVsbG8=",
		"compute.blas=openblas",
		"data.train=/dev/null",
		"data.train=../tasks/dates/test.jsonl\ndata.validation=",
		"data.train=",
		"device=GPU-0\ndevices=[0, 1]",
		"amp.low_precision_ops=[softmax]\namp.fp32_ops=[softmax]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, set string) {
		sets := strings.Split(set, "\n")
		if len(sets) > 8 {
			sets = sets[:8]
		}
		start := time.Now()
		r, err := train.Load(recipe, sets)
		if d := time.Since(start); d > loadLimit {
			t.Fatalf("Load took %v", d)
		}
		if err != nil {
			checkConfigError(t, err, recipe, sets, 60)
			return
		}
		last := map[string]string{}
		for _, s := range sets {
			k, v, _ := strings.Cut(s, "=")
			last[k] = v
		}
		for k, v := range last {
			var got string
			switch k {
			case "train.steps":
				got = strconv.Itoa(r.Train.Steps)
			case "train.batch_size":
				got = strconv.Itoa(r.Train.BatchSize)
			case "data.seq_len":
				got = strconv.Itoa(r.Data.SeqLen)
			case "seed":
				got = strconv.FormatUint(r.Seed, 10)
			case "name":
				got = r.Name
			default:
				continue
			}
			if plainValue.MatchString(v) && got != v {
				t.Fatalf("--set %s=%s accepted, but the recipe has %s", k, v, got)
			}
		}
	})
}

// plainValue is a value whose YAML reading is the string itself: a
// decimal integer without leading zeros, or a run name.
var plainValue = regexp.MustCompile(`^([1-9][0-9]*|[A-Za-z][A-Za-z0-9_-]*)$`)

// checkConfigError fails unless err is a config error each part of which
// names the recipe (with a line within it) or one of the overrides.
func checkConfigError(t *testing.T, err error, path string, sets []string, lines int) {
	t.Helper()
	if !yamlconf.IsConfigError(err) {
		t.Fatalf("error %q (%T) is not a config error", err, err)
	}
	var es yamlconf.Errors
	var e *yamlconf.Error
	switch {
	case errors.As(err, &es):
	case errors.As(err, &e):
		es = yamlconf.Errors{e}
	}
	if len(es) == 0 {
		t.Fatalf("an empty error list: %q", err)
	}
	for _, e := range es {
		msg := e.Error()
		switch {
		case e.File == path:
			if e.Line < 0 || e.Line > lines+1 {
				t.Errorf("%q: line %d is outside the recipe's %d lines", msg, e.Line, lines)
			}
		case strings.HasPrefix(e.File, "--set "):
			found := false
			for _, s := range sets {
				found = found || e.File == "--set "+s
			}
			if !found {
				t.Errorf("%q names an override that was not given (given: %q)", msg, sets)
			}
		default:
			t.Errorf("%q names %q, neither the recipe %s nor an override", msg, e.File, path)
		}
		if !strings.HasPrefix(msg, e.File) {
			t.Errorf("%q does not start with its file %q", msg, e.File)
		}
	}
}

// maxLines bounds the lines of src: YAML breaks lines at \n, \r, NEL, LS
// and PS.
func maxLines(src []byte) int {
	s := string(src)
	n := 1
	for _, brk := range []string{"\n", "\r", "\u0085", "\u2028", "\u2029"} {
		n += strings.Count(s, brk)
	}
	return n
}
