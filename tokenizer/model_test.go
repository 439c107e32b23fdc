package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadDir(t *testing.T) {
	cases := []struct {
		dir                string
		bos, eos, pad, unk int
		addBOS, addEOS     bool
		eosIDs             []int
		maxLen             int
		template           string // a piece of the default chat template
	}{
		{"models/llama3", 128000, 128001, -1, -1, false, false, []int{128001}, 0, "<|start_header_id|>"},
		{"models/llama3_1", 128000, 128009, -1, -1, true, false, []int{128009}, 0, "<|eot_id|>"},
		{"models/qwen3", -1, 151645, 151643, -1, false, false, []int{151645}, 131072, "<|im_start|>"},
		{"models/llama2", 1, 2, -1, 0, true, false, []int{2}, 0, ""},
		{"models/deepseek_v3", 0, 1, 1, -1, true, false, []int{1}, 131072, "<｜Assistant｜>"},
		{"tiny-byte", 256, 257, 258, -1, true, false, []int{257}, 128, `'<|im_start|>assistant\n'`},
	}
	for _, c := range cases {
		t.Run(c.dir, func(t *testing.T) {
			m, err := LoadDir(filepath.Join("testdata", c.dir))
			if err != nil {
				t.Fatal(err)
			}
			got := []int{m.BOS, m.EOS, m.PAD, m.UNK}
			if want := []int{c.bos, c.eos, c.pad, c.unk}; !slices.Equal(got, want) {
				t.Errorf("BOS, EOS, PAD, UNK = %v, want %v", got, want)
			}
			if m.AddBOS != c.addBOS || m.AddEOS != c.addEOS {
				t.Errorf("AddBOS, AddEOS = %v, %v, want %v, %v", m.AddBOS, m.AddEOS, c.addBOS, c.addEOS)
			}
			if !slices.Equal(m.EOSIDs, c.eosIDs) {
				t.Errorf("EOSIDs = %v, want %v", m.EOSIDs, c.eosIDs)
			}
			if m.ModelMaxLength != c.maxLen {
				t.Errorf("ModelMaxLength = %d, want %d", m.ModelMaxLength, c.maxLen)
			}
			if !strings.Contains(m.ChatTemplate, c.template) || (c.template == "") != (m.ChatTemplate == "") {
				t.Errorf("ChatTemplate %.60q does not contain %q", m.ChatTemplate, c.template)
			}
			if m.BOS >= 0 {
				if s, _ := m.Tok.Token(m.BOS); s != m.BOSToken {
					t.Errorf("BOSToken %q, but Token(BOS) = %q", m.BOSToken, s)
				}
			}
		})
	}
}

// TestLoadDirGenerationConfig checks the eos_token_id of
// generation_config.json (an id or a list), added tokens as objects and
// named chat templates.
func TestLoadDirGenerationConfig(t *testing.T) {
	dir := t.TempDir()
	tokJSON, err := os.ReadFile("testdata/tiny-byte/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tokenizer.json", string(tokJSON))
	write("tokenizer_config.json", `{"bos_token": {"__type": "AddedToken", "content": "<|im_start|>"}, "eos_token": "<|im_end|>",
		"pad_token": null, "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
		"model_max_length": 1000000000000000019884624838656}`)
	for _, c := range []struct {
		gen  string
		want []int
	}{
		{`{"eos_token_id": 258}`, []int{257, 258}},
		{`{"eos_token_id": [257, 258, 0]}`, []int{257, 258, 0}},
		{`{"bos_token_id": 256}`, []int{257}},
	} {
		write("generation_config.json", c.gen)
		m, err := LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(m.EOSIDs, c.want) {
			t.Errorf("%s: EOSIDs %v, want %v", c.gen, m.EOSIDs, c.want)
		}
		if m.BOS != 256 || m.PAD != -1 || m.ChatTemplate != "D" || m.ChatTemplates["tool_use"] != "T" || m.ModelMaxLength != 0 {
			t.Errorf("BOS %d PAD %d templates %q %v max %d", m.BOS, m.PAD, m.ChatTemplate, m.ChatTemplates, m.ModelMaxLength)
		}
		// The template adds BOS, but add_bos_token absent and the template
		// present means AddBOS comes from the template.
		if !m.AddBOS {
			t.Errorf("AddBOS false, want true from the template")
		}
	}
	write("tokenizer_config.json", `{"eos_token": "<nope>"}`)
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), `eos_token "<nope>" is not a token`) {
		t.Fatalf("unknown eos_token: %v", err)
	}
	write("tokenizer_config.json", `{"eos_token": `)
	if _, err := LoadDir(dir); err == nil || !strings.Contains(err.Error(), "tokenizer_config.json: truncated JSON") {
		t.Fatalf("truncated tokenizer_config.json: %v", err)
	}
}
