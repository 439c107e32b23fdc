package tokenizer

import (
	"strings"
	"testing"
)

// minimalJSON is a small valid tokenizer.json that the cases below break.
const minimalJSON = `{
 "version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [{"id": 3, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
 "normalizer": {"type": "NFC"},
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
 "post_processor": null,
 "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "dropout": null, "unk_token": null, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}
}`

func TestMinimalParses(t *testing.T) {
	tok, err := Parse("test.json", []byte(minimalJSON))
	if err != nil {
		t.Fatal(err)
	}
	if got := mustEncode(t, tok, "ab<s>", false).IDs; joinIDs(got) != "2,3" {
		t.Fatalf("Encode(ab<s>) = %v, want [2 3]", got)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct {
		name string
		json string
		want string
	}{
		{"malformed JSON", `{"version": "1.0", "model": {"type": "BPE",}}`,
			`tokenizer: test.json: malformed JSON at byte offset 43 (line 1): invalid character '}' looking for beginning of object key string`},
		{"truncated file", minimalJSON[:200],
			`tokenizer: test.json: truncated JSON: the input ends after 200 bytes, inside a value`},
		{"empty file", ``,
			`tokenizer: test.json: empty input: not a tokenizer.json`},
		{"not an object", `[1, 2]`,
			`tokenizer: test.json: not a tokenizer.json: the top level is a JSON array, not an object`},
		{"unknown model type", strings.Replace(minimalJSON, `"type": "BPE"`, `"type": "Unigram"`, 1),
			`tokenizer: test.json: $.model.type: model type "Unigram" is not supported (only BPE)`},
		{"unknown pre-tokenizer type", strings.Replace(minimalJSON, `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}`, `{"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}]}`, 1),
			`tokenizer: test.json: $.pre_tokenizer.pretokenizers[0].type: pre-tokenizer type "WhitespaceSplit" is not supported`},
		{"unknown normalizer type", strings.Replace(minimalJSON, `{"type": "NFC"}`, `{"type": "Lowercase"}`, 1),
			`tokenizer: test.json: $.normalizer.type: normalizer type "Lowercase" is not supported`},
		{"merge naming an unknown token", strings.Replace(minimalJSON, `["a b"]`, `["a b", "b c"]`, 1),
			`tokenizer: test.json: $.model.merges[1]: merge names token "c", which is not in the vocabulary`},
		{"merge giving an unknown token", strings.Replace(minimalJSON, `["a b"]`, `["a b", "b a"]`, 1),
			`tokenizer: test.json: $.model.merges[1]: the merge of "b" and "a" gives "ba", which is not in the vocabulary`},
		{"unsupported post-processor type", strings.Replace(minimalJSON, `"post_processor": null`, `"post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}`, 1),
			`tokenizer: test.json: $.post_processor.type: post-processor type "RobertaProcessing" is not supported`},
		{"template id that is not its token", strings.Replace(minimalJSON, `"post_processor": null`, `"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}}`, 1),
			`tokenizer: test.json: $.post_processor.special_tokens."<s>".ids[0]: id 0 is not the token "<s>"`},
		{"template keys are case-sensitive", strings.Replace(minimalJSON, `"post_processor": null`, `"post_processor": {"type": "TemplateProcessing", "single": [{"specialToken": {"id": "<s>", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [3], "tokens": ["<s>"]}}}`, 1),
			`tokenizer: test.json: $.post_processor.single[0].specialToken: unsupported option "specialToken"`},
		{"unsupported decoder type", strings.Replace(minimalJSON, `"decoder": {"type": "ByteLevel"}`, `"decoder": {"type": "WordPiece"}`, 1),
			`tokenizer: test.json: $.decoder.type: decoder type "WordPiece" is not supported`},
		{"duplicate vocabulary id", strings.Replace(minimalJSON, `"ab": 2`, `"ab": 2, "ba": 1`, 1),
			`tokenizer: test.json: $.model.vocab: tokens "b" and "ba" both have id 1`},
		{"added token id that HF would not give", strings.Replace(minimalJSON, `"id": 3`, `"id": 7`, 1),
			`tokenizer: test.json: $.added_tokens[0]: token "<s>" has id 7, but Hugging Face tokenizers gives it id 3 (the id of the same text in the vocabulary, or the next free id); ids must be unique and follow that rule`},
		{"dropout", strings.Replace(minimalJSON, `"dropout": null`, `"dropout": 0.1`, 1),
			`tokenizer: test.json: $.model.dropout: BPE dropout 0.1 is not supported (it makes tokenization random); it must be null or 0`},
		{"unknown option", strings.Replace(minimalJSON, `"use_regex": true}`, `"use_regex": true, "lowercase": true}`, 1),
			`tokenizer: test.json: $.pre_tokenizer.lowercase: unsupported option "lowercase"`},
		{"truncation", strings.Replace(minimalJSON, `"truncation": null`, `"truncation": {"max_length": 512}`, 1),
			`tokenizer: test.json: $.truncation: truncation is not supported (it must be null): the trainer truncates and pads itself`},
		{"bad split regex", strings.Replace(minimalJSON, `{"type": "NFC"}`, `{"type": "Replace", "pattern": {"Regex": "(a"}, "content": "b"}`, 1),
			`tokenizer: test.json: $.normalizer.pattern.Regex: regex "(a" does not compile: error parsing regexp: missing closing ) in ` + "`(a`"},
		{"unk not in vocabulary", strings.Replace(minimalJSON, `"unk_token": null`, `"unk_token": "<unk>"`, 1),
			`tokenizer: test.json: $.model.unk_token: unk_token "<unk>" is not in the vocabulary`},
		{"missing model", `{"version": "1.0"}`,
			`tokenizer: test.json: $.model: missing`},
		{"wrong version", strings.Replace(minimalJSON, `"version": "1.0"`, `"version": "2.0"`, 1),
			`tokenizer: test.json: $.version: unknown tokenizer version "2.0"`},
		{"wrong field type", strings.Replace(minimalJSON, `"add_prefix_space": false`, `"add_prefix_space": "no"`, 1),
			`tokenizer: test.json: $.pre_tokenizer.add_prefix_space: want true or false, got "no"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("test.json", []byte(c.json))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			if err.Error() != c.want {
				t.Fatalf("error\n got: %s\nwant: %s", err, c.want)
			}
		})
	}
}

func TestFromFileErrors(t *testing.T) {
	if _, err := FromFile("testdata/does-not-exist.json"); err == nil || !strings.Contains(err.Error(), "does-not-exist.json") {
		t.Fatalf("FromFile of a missing file: %v", err)
	}
	if _, err := FromFile("testdata/corpus.jsonl.gz"); err == nil || !strings.HasPrefix(err.Error(), "tokenizer: corpus.jsonl.gz: ") {
		t.Fatalf("FromFile of a non-tokenizer: %v", err)
	}
}
