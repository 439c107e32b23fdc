package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run's header names the chat template only when the template renders
// its data, and the task sample shows the prompt as the model sees it,
// special tokens included. (A prompt/completion run on a model with a
// chat template printed "chat template: … · loss on assistant", and a
// chat run's sample dropped <|im_start|> and <|im_end|>.)
func TestHeaderAndSampleShowWhatTheModelSees(t *testing.T) {
	dir, recipe := workdir(t, 6)
	modelDir := filepath.Join(dir, "model")
	tok := tokenizerDir(t) // tiny-byte's: its 259 ids, BOS <|im_start|>, a ChatML template
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, _ := os.ReadFile(filepath.Join(tok, f))
		if err := os.WriteFile(filepath.Join(modelDir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var conv strings.Builder
	for i := 0; i < 40; i++ {
		fmt.Fprintf(&conv, `{"messages": [{"role": "user", "content": "n=%03d?"}, {"role": "assistant", "content": "%03d!"}]}`+"\n", i, i)
	}
	chatFile := filepath.Join(dir, "chat.jsonl")
	if err := os.WriteFile(chatFile, []byte(conv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	train := filepath.Join(dir, "train.jsonl")
	first, _, _ := strings.Cut(mustRead(t, train), "\n") // {"prompt": "n=XYZ?", ...}
	prompt := strings.SplitN(first, `"`, 5)[3]
	for _, tc := range []struct {
		name       string
		sets       []string
		chat       bool   // the header names the template
		samplePart string // the sample line starts so
	}{
		{"prompt/completion", []string{"name=pc", "task.eval_file=" + train, "task.max_new_tokens=2"}, false,
			fmt.Sprintf(`  sample: "<|im_start|>%s" → `, prompt)},
		{"chat", []string{"name=chat", "data.seq_len=48", "data.train=" + chatFile, "task.eval_file=" + chatFile, "task.max_new_tokens=2"}, true,
			`  sample: "<|im_start|>user\nn=000?<|im_end|>\n<|im_start|>assistant\n" → `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"train", "-c", recipe}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			code, _, stderr := runIn(t, args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			tokLine := ""
			for _, l := range strings.Split(stderr, "\n") {
				if strings.HasPrefix(l, "tokenizer: ") {
					tokLine = l
				}
			}
			if got := strings.Contains(tokLine, "chat template:") && strings.Contains(tokLine, "loss on assistant"); got != tc.chat {
				t.Errorf("header names the chat template: %v, want %v\n%s", got, tc.chat, tokLine)
			}
			if !strings.Contains(stderr, "\n"+tc.samplePart) {
				t.Errorf("no line starting %q in\n%s", tc.samplePart, stderr)
			}
		})
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
