package train

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/data"
)

// The shipped model's tokenizer.json expresses the byte tokenizer: auto
// picks it, and it gives the byte tokenizer's ids, specials and examples
// on the quickstart data and the chat data, so the model trained on bytes
// keeps working through the Hugging Face path.
func TestTinyByteTokenizerIsTheByteTokenizer(t *testing.T) {
	text, err := loadText("../models/tiny-byte", 259, TextConfig{LossOn: data.LossAssistant})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} { // scripts/make_base_model.sh copies them
		shipped, err1 := os.ReadFile(filepath.Join("../models/tiny-byte", f))
		fixture, err2 := os.ReadFile(filepath.Join("../tokenizer/testdata/tiny-byte", f))
		if err1 != nil || err2 != nil || !bytes.Equal(shipped, fixture) {
			t.Fatalf("models/tiny-byte/%s is not tokenizer/testdata/tiny-byte's (%v, %v)", f, err1, err2)
		}
	}
	hf, ok := text.Format.Tok.(*hfTokenizer)
	if !ok {
		t.Fatalf("auto resolved to %T, not the model's tokenizer.json", text.Format.Tok)
	}
	bt := data.NewByteTokenizer()
	if hf.BOS() != bt.BOS() || hf.EOS() != bt.EOS() || hf.PAD() != bt.PAD() || hf.VocabSize() != bt.VocabSize() {
		t.Fatalf("BOS/EOS/PAD/vocab %d/%d/%d/%d, byte tokenizer's %d/%d/%d/%d",
			hf.BOS(), hf.EOS(), hf.PAD(), hf.VocabSize(), bt.BOS(), bt.EOS(), bt.PAD(), bt.VocabSize())
	}
	if !slices.Equal(text.Stop, []int{257}) || text.Format.Chat == nil || !strings.Contains(text.TemplateName, "tiny-byte") {
		t.Fatalf("stop %v, template %q", text.Stop, text.TemplateName)
	}
	for _, s := range []string{"", "Date: 2021-03-07\nIn words:", " March 7, 2021", "héllo 😀\r\n\t"} { // (invalid UTF-8 is refused before tokenizing)
		got, spans, err := hf.Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		want, _, _ := bt.Encode(s)
		if !slices.Equal(got, want) || len(spans) != len(got) {
			t.Errorf("%q: ids %v, byte tokenizer %v", s, got, want)
		}
	}
	byteFormat := data.Format{Tok: bt, LossOn: data.LossAssistant, VocabSize: 259}
	a, err := data.LoadJSONL("../tasks/dates/train.jsonl", text.Format)
	if err != nil {
		t.Fatal(err)
	}
	b, err := data.LoadJSONL("../tasks/dates/train.jsonl", byteFormat)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("%d examples, %d with the byte tokenizer", len(a), len(b))
	}
	for i := range a {
		if !slices.Equal(a[i].IDs, b[i].IDs) || !slices.Equal(a[i].Target, b[i].Target) {
			t.Fatalf("example %d differs from the byte tokenizer's", i)
		}
	}
	// chat rows: the template writes <|im_start|> (the BOS id) first, so
	// no second one is added, and <|im_end|> closes each assistant turn
	// as a target
	chats, err := data.LoadJSONL("../tasks/dates-chat/train.jsonl", text.Format)
	if err != nil {
		t.Fatal(err)
	}
	ex := chats[0]
	if ex.IDs[0] != 256 || ex.IDs[1] == 256 {
		t.Fatalf("chat example starts %v", ex.IDs[:4])
	}
	last := len(ex.IDs) - 1
	for last >= 0 && !ex.Target[last] {
		last--
	}
	if last < 0 || ex.IDs[last] != 257 {
		t.Fatalf("the last target is not <|im_end|>: ids %v targets %v", ex.IDs, ex.Target)
	}
}

// A random initialisation takes its vocabulary and special ids from the
// tokenizer data.tokenizer names (here Llama 2's: 32,000 ids, BOS 1).
func TestRandomModelTakesTheTokenizersVocabulary(t *testing.T) {
	dir := t.TempDir()
	rows := filepath.Join(dir, "rows.jsonl")
	if err := os.WriteFile(rows, []byte(`{"text": "Hello there, world."}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(dir, "r.yaml")
	src := "model:\n  init: random\n  architecture: {hidden_size: 16, intermediate_size: 32, num_hidden_layers: 1, num_attention_heads: 2}\n" +
		"data: {train: " + rows + ", tokenizer: ../tokenizer/testdata/models/llama2, validation_split: 0}\nadapter: {type: none}\n"
	if err := os.WriteFile(recipe, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(recipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Base.VocabSize != 32000 || r.Base.BOSTokenID != 1 || r.Base.EOSTokenID != 2 {
		t.Fatalf("vocab %d, BOS %d, EOS %d; want Llama 2's 32000, 1, 2", r.Base.VocabSize, r.Base.BOSTokenID, r.Base.EOSTokenID)
	}
	if _, ok := r.text.Format.Tok.(*hfTokenizer); !ok {
		t.Fatalf("the data is tokenized by %T", r.text.Format.Tok)
	}
}
