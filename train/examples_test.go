package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The recipes in configs/examples are what a user points at a downloaded
// model. Each is loaded as shipped, only its paths moved to the family's
// test model (model/testdata/families: the family's real config.json
// layout with random weights, and a 40-token byte-level tokenizer with a
// chat template), and trained for two steps on chat rows.
func TestExampleRecipesTrainTheirFamily(t *testing.T) {
	family := map[string]string{
		"llama3.2-1b-instruct":  "llama3.2",
		"llama3.1-8b-qlora":     "llama3.2-bf16",
		"smollm2-135m-instruct": "llama-linear-bias",
		"tinyllama-1.1b-chat":   "llama-linear-bias-bf16",
		"mistral-7b-instruct":   "mistral-bf16",
		"qwen2.5-0.5b-instruct": "qwen2.5",
		"qwen3-0.6b":            "qwen3-bf16",
	}
	files, err := filepath.Glob("../configs/examples/*.yaml")
	if err != nil || len(files) != len(family) {
		t.Fatalf("configs/examples holds %d recipes (%v), want one per family: %v", len(files), err, family)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		fam, ok := family[name]
		if !ok {
			t.Fatalf("%s: no test model for this example; add it to the table", path)
		}
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			modelDir := familyModel(t, tmp, fam)
			train := filepath.Join(tmp, "train.jsonl")
			var rows strings.Builder
			for i := range 24 {
				row, _ := json.Marshal(map[string]any{"messages": []map[string]string{
					{"role": "user", "content": fmt.Sprintf("the %s thing", strings.Repeat("a", i%5+1))},
					{"role": "assistant", "content": "the answer in the end"},
				}})
				rows.Write(append(row, '\n'))
			}
			if err := os.WriteFile(train, []byte(rows.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			paths := []string{"model.path=" + modelDir, "data.train=" + train, "output_dir=" + tmp, "data.cache=false"}
			if _, err := Load(path, paths); err != nil { // as shipped
				t.Fatal(err)
			}
			r, err := Load(path, append(paths, "data.seq_len=32", "train.steps=2", "schedule.warmup_steps=1",
				"train.batch_size=2", "train.grad_accum=2", "train.eval_every=0", "train.checkpoint_every=0"))
			if err != nil {
				t.Fatal(err)
			}
			sum, err := Run(context.Background(), r, Options{Out: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Steps != 2 || sum.ValAfter == nil {
				t.Fatalf("summary %+v", sum)
			}
		})
	}
}

// familyModel copies a family fixture with a byte-level tokenizer whose
// chat template uses only what its 40 tokens can spell.
func familyModel(t *testing.T, tmp, fam string) string {
	t.Helper()
	dir := filepath.Join(tmp, "model")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join("../model/testdata/families", fam)
	for from, to := range map[string]string{
		filepath.Join(src, "config.json"):        "config.json",
		filepath.Join(src, "model.safetensors"):  "model.safetensors",
		"../gguf/testdata/family_tokenizer.json": "tokenizer.json",
	} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if to == "config.json" {
			b = longContext(t, b)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := json.Marshal(map[string]any{
		"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "add_bos_token": false,
		"chat_template": "{% for m in messages %}{{ bos_token + m['role'] + '\\n' + m['content'] + eos_token }}{% endfor %}" +
			"{% if add_generation_prompt %}{{ bos_token + 'assistant\\n' }}{% endif %}",
	})
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// longContext raises a fixture config's max_position_embeddings (64 in
// some) to what the published models have, so that the examples' seq_len
// validates as it would against the real model.
func longContext(t *testing.T, config []byte) []byte {
	var m map[string]any
	if err := json.Unmarshal(config, &m); err != nil {
		t.Fatal(err)
	}
	if n, _ := m["max_position_embeddings"].(float64); n < 8192 {
		m["max_position_embeddings"] = 8192
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
