package train

import (
	"context"
	"encoding"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/data"
	"github.com/mixtune/mixtune/internal/yamlconf"
	"github.com/mixtune/mixtune/model"
)

// fixture writes a tiny byte-vocabulary model and small datasets into a
// temporary directory and returns it; configs in tests use paths below it.
func fixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	m, err := model.New(model.Config{VocabSize: 259, HiddenSize: 16, IntermediateSize: 24, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, MaxPositionEmbeddings: 64, RMSNormEps: 1e-5, RopeTheta: 10000,
		BOSTokenID: 256, EOSTokenID: 257, PadTokenID: 258}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(filepath.Join(dir, "model"), amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var train, val strings.Builder
	for i := 0; i < 40; i++ {
		train.WriteString(`{"prompt": "abc` + string(rune('a'+i%26)) + `=", "completion": "` + string(rune('A'+i%26)) + `"}` + "\n")
	}
	for i := 0; i < 8; i++ {
		val.WriteString(`{"prompt": "xyz` + string(rune('a'+i)) + `=", "completion": "` + string(rune('A'+i)) + `"}` + "\n")
	}
	write("train.jsonl", train.String())
	write("val.jsonl", val.String())
	write("bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"fine\"}\n{\"prompt\": \"no completion\"}\n")
	return dir
}

// goodConfig is a valid recipe over the fixture; tests edit it.
const goodConfig = `name: t
seed: 3
output_dir: OUT
model:
  path: DIR/model
data:
  train: DIR/train.jsonl
  validation: DIR/val.jsonl
  seq_len: 16
adapter:
  type: lora
  r: 4
  alpha: 8
  target_modules: [q_proj, v_proj]
train:
  steps: 6
  batch_size: 4
  eval_every: 3
  log_every: 2
optimizer:
  lr: 1.0e-2
schedule:
  warmup_steps: 2
task:
  eval_file: DIR/val.jsonl
  max_new_tokens: 4
`

func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	body = strings.ReplaceAll(strings.ReplaceAll(body, "DIR", dir), "OUT", filepath.Join(dir, "runs"))
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMalformedConfigs(t *testing.T) {
	dir := fixture(t)
	edit := func(old, new string) string {
		if !strings.Contains(goodConfig, old) {
			t.Fatalf("goodConfig has no %q", old)
		}
		return strings.Replace(goodConfig, old, new, 1)
	}
	cases := []struct {
		name, config string
		sets         []string
		want         string // exact; C stands for the config path, D for the fixture dir
	}{
		{"misspelled key", edit("  r: 4", "  rank: 4"), nil,
			`C:12: adapter: unknown field "rank" (known: alpha, dropout, from, init, layers_to_transform, r, target_modules, target_regex, type, use_rslora)`},
		{"transposed letters", edit("  alpha: 8", "  alpah: 8"), nil,
			`C:13: adapter: unknown field "alpah" (did you mean "alpha"?)`},
		{"unknown section", goodConfig + "trainer:\n  steps: 3\n", nil,
			`C:27: (top level): unknown field "trainer" (did you mean "train"?)`},
		{"wrong type: string for a number", edit("  lr: 1.0e-2", "  lr: fast"), nil,
			`C:21: optimizer.lr: expected a number, got "fast"`},
		{"wrong type: float for an integer", edit("  steps: 6", "  steps: 6.5"), nil,
			`C:16: train.steps: expected an integer, got 6.5`},
		{"wrong type: scalar for a list", edit("  target_modules: [q_proj, v_proj]", "  target_modules: q_proj"), nil,
			`C:14: adapter.target_modules: expected a list, got "q_proj"`},
		{"wrong type: list for a mapping", edit("train:\n  steps: 6\n  batch_size: 4\n  eval_every: 3\n  log_every: 2\n", "train: [1]\n"), nil,
			`C:15: train: expected a mapping of keys to values, got a list`},
		{"duplicate key", edit("  seq_len: 16", "  seq_len: 16\n  seq_len: 32"), nil,
			`C:10: data.seq_len: duplicate key (first given on line 9)`},
		{"r <= 0", edit("  r: 4", "  r: 0"), nil,
			`C:12: adapter.r: must be > 0, got 0`},
		{"learning rate <= 0", edit("  lr: 1.0e-2", "  lr: -0.1"), nil,
			`C:21: optimizer.lr: must be > 0, got -0.1`},
		{"seq_len above max_position_embeddings", edit("  seq_len: 16", "  seq_len: 65"), nil,
			`C:9: data.seq_len: 65 exceeds the model's max_position_embeddings (64)`},
		{"missing training file", edit("DIR/train.jsonl", "DIR/nope.jsonl"), nil,
			`C:7: data.train: D/nope.jsonl: no such file or directory`},
		{"missing model directory", edit("DIR/model", "DIR/nomodel"), nil,
			`C:5: model.path: read model config: open D/nomodel/config.json: no such file or directory`},
		{"unknown target module", edit("[q_proj, v_proj]", "[q_proj, qkv_proj]"), nil,
			`C:14: adapter.target_modules[1]: unknown module "qkv_proj" (known: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)`},
		{"bad enum", edit("  lr: 1.0e-2", "  lr: 1.0e-2\n  name: adam"), nil,
			`C:22: optimizer.name: must be adamw or sgd, got "adam"`},
		{"invalid YAML", edit("  r: 4", "  r: [4"), nil,
			`C:12: invalid YAML: did not find expected ',' or ']'`},
		{"missing value", edit("  r: 4", "  r:"), nil,
			`C:12: adapter.r: no value given`},
		{"--set of an unknown field", goodConfig, []string{"train.stepz=5"},
			`--set train.stepz=5: train: unknown field "stepz" (did you mean "steps"?)`},
		{"--set with a wrong type", goodConfig, []string{"train.steps=many"},
			`--set train.steps=many: train.steps: expected an integer, got "many"`},
		{"--set that breaks validation", goodConfig, []string{"optimizer.lr=0"},
			`--set optimizer.lr=0: optimizer.lr: must be > 0, got 0`},
		{"several problems at once", strings.Replace(edit("  r: 4", "  r: -1"), "  lr: 1.0e-2", "  lr: 0", 1), nil,
			"C:12: adapter.r: must be > 0, got -1\nC:21: optimizer.lr: must be > 0, got 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeConfig(t, dir, tc.config)
			_, err := Load(p, tc.sets)
			want := strings.ReplaceAll(strings.ReplaceAll(tc.want, "C:", p+":"), "D/", dir+"/")
			if err == nil {
				t.Fatalf("no error; want %q", want)
			}
			if err.Error() != want {
				t.Fatalf("error\n  %q\nwant\n  %q", err.Error(), want)
			}
		})
	}
}

// Malformed data is reported with file and line before any run directory
// is created.
func TestMalformedDatasets(t *testing.T) {
	dir := fixture(t)
	cases := []struct{ name, rows, want string }{
		{"invalid JSON", "{\"text\": \"a\"}\n{\"text\": \n", `D/d.jsonl:2: invalid JSON: unexpected end of JSON input`},
		{"prompt without completion", "{\"prompt\": \"a\"}\n", `D/d.jsonl:1: "prompt" without "completion"`},
		{"id outside the vocabulary", "{\"input_ids\": [1, 300]}\n", `D/d.jsonl:1: input_ids[1] = 300 is outside the vocabulary (size 259)`},
		{"unknown field", "{\"txt\": \"a\"}\n", `D/d.jsonl:1: unknown field "txt"`},
		{"empty file", "\n\n", `D/d.jsonl: no examples`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "d.jsonl"), []byte(tc.rows), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := Load(writeConfig(t, dir, strings.Replace(goodConfig, "DIR/train.jsonl", "DIR/d.jsonl", 1)), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Run(context.Background(), r, Options{Out: io.Discard})
			want := strings.ReplaceAll(tc.want, "D/", dir+"/")
			if err == nil || err.Error() != want {
				t.Fatalf("error %v, want %q", err, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "runs")); !os.IsNotExist(err) {
				t.Fatal("a run directory was created for a run that could not start")
			}
		})
	}
}

// TestReferenceDocumentsEveryField keeps configs/reference.yaml complete:
// every field of Config must appear in it, and it must load as a recipe.
func TestReferenceDocumentsEveryField(t *testing.T) {
	raw, err := os.ReadFile("../configs/reference.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(t reflect.Type, prefix string) []string
	walk = func(ty reflect.Type, prefix string) []string {
		var out []string
		for i := 0; i < ty.NumField(); i++ {
			tag := strings.Split(ty.Field(i).Tag.Get("yaml"), ",")[0]
			ft := ty.Field(i).Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			out = append(out, prefix+tag)
			// a struct read from one scalar (device.Spec) is one field
			scalar := reflect.PointerTo(ft).Implements(reflect.TypeFor[encoding.TextUnmarshaler]())
			if ft.Kind() == reflect.Struct && !scalar {
				out = append(out, walk(ft, prefix+tag+".")...)
			}
		}
		return out
	}
	text := string(raw)
	for _, f := range walk(reflect.TypeOf(Config{}), "") {
		leaf := f[strings.LastIndex(f, ".")+1:]
		if !strings.Contains(text, "\n"+strings.Repeat("  ", strings.Count(f, "."))+leaf+":") {
			t.Errorf("configs/reference.yaml does not document %s", f)
		}
	}
}

// decoded is a recipe as Load has it before checking: defaults, the file
// and the overrides.
func decoded(t *testing.T, path string) *Recipe {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Defaults()
	doc, err := yamlconf.Decode(path, raw, nil, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.defaultArchitecture()
	return &Recipe{Config: cfg, Path: path, Raw: raw, doc: doc}
}

// Checking a recipe reads no file and resolves nothing: a recipe whose
// files are all missing passes the checks, and resolving it names each
// missing file at its field.
func TestCheckReadsNoFilesResolveDoes(t *testing.T) {
	dir := t.TempDir()
	r := decoded(t, writeConfig(t, dir, goodConfig)) // DIR holds no model and no data
	if errs := r.check(); len(errs) > 0 {
		t.Fatalf("check: %v", errs)
	}
	if !reflect.DeepEqual(r.Base, model.Config{}) || r.text != nil {
		t.Fatalf("check resolved: base %+v, text %v", r.Base, r.text)
	}
	var fields []string
	for _, e := range r.resolve() {
		fields = append(fields, e.Field)
	}
	if want := []string{"model.path", "data.train", "data.validation", "task.eval_file"}; !slices.Equal(fields, want) {
		t.Fatalf("resolve reported %q, want %q", fields, want)
	}
}

// A model whose vocabulary is smaller than its tokenizer's is the model's
// problem: reported at model.path (by the error's type), not at the chat
// template where other text errors go.
func TestSmallVocabularyIsTheModelsError(t *testing.T) {
	dir := fixture(t)
	r := decoded(t, writeConfig(t, dir, goodConfig))
	r.Base.VocabSize = 100 // the byte tokenizer has 259 ids
	var field string
	r.resolveText(func(f, format string, args ...any) { field = f }, data.NewByteTokenizer(), nil)
	if field != "model.path" {
		t.Fatalf("reported at %q", field)
	}
}

// init: random without an architecture section trains the architecture
// configs/reference.yaml shows, as every field left out of one takes
// the value shown there; resolved.yaml records it.
func TestRandomInitWithoutArchitecture(t *testing.T) {
	dir := fixture(t)
	body := strings.Replace(goodConfig, "  path: DIR/model\n", "  init: random\n", 1)
	r, err := Load(writeConfig(t, dir, body), nil)
	if err != nil {
		t.Fatal(err)
	}
	var a Architecture
	a.SetDefaults()
	if want := archConfig(a, data.NewByteTokenizer()); !reflect.DeepEqual(r.Base, want) {
		t.Fatalf("base %+v, want %+v", r.Base, want)
	}
	if r.Model.Architecture == nil || *r.Model.Architecture != a {
		t.Fatalf("recipe's architecture %+v", r.Model.Architecture)
	}
}
