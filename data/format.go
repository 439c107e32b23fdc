package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Format says how JSONL rows become token sequences: the tokenizer, the
// chat template conversations go through, and what they are trained on.
type Format struct {
	Tok Tokenizer
	// Chat renders conversations (messages, conversations and Alpaca rows);
	// nil refuses them, naming what is missing.
	Chat   Renderer
	LossOn LossOn
	// Markers are the texts of the tokenizer's special tokens: a turn that
	// a template renders differently once later turns follow is closed at
	// the first of these after it (see RenderConversation).
	Markers []string
	// Alpaca renders Alpaca rows with the Stanford Alpaca prompt
	// (StanfordAlpaca) instead of the chat template; the output and EOS are
	// the targets.
	Alpaca bool
	// VocabSize bounds input_ids rows: the model's vocabulary, which may
	// be larger than the tokenizer's. 0 means the tokenizer's.
	VocabSize int
	// MaxRowBytes caps the text one row has tokenized (its fields, or the
	// conversation rendered through the template): tokenizing holds tens
	// of bytes of memory per byte of text. 0 means DefaultMaxRowBytes.
	MaxRowBytes int
}

// DefaultMaxRowBytes is the row cap when Format.MaxRowBytes is 0: far
// beyond a book (a novel is about 1 MB), and about 0.5 GiB of memory to
// tokenize (see the measurements with data.max_row_bytes in the recipe
// reference).
const DefaultMaxRowBytes = 16 << 20

// MaxRow is the row cap in effect.
func (f Format) MaxRow() int {
	if f.MaxRowBytes > 0 {
		return f.MaxRowBytes
	}
	return DefaultMaxRowBytes
}

// RowTooLargeError is a row with more text than Format.MaxRowBytes.
type RowTooLargeError struct {
	What  string // the field or fields, or what the template rendered
	Size  int
	Limit int
}

func (e *RowTooLargeError) Error() string {
	return fmt.Sprintf("%s %s, more than the %s a row may have (data.max_row_bytes); split the row, or raise the limit",
		e.What, byteSize(e.Size), byteSize(e.Limit))
}

// CheckRow refuses size bytes of text over the row cap; what names them
// in the error ("\"text\" is").
func (f Format) CheckRow(what string, size int) error {
	if size > f.MaxRow() {
		return &RowTooLargeError{What: what, Size: size, Limit: f.MaxRow()}
	}
	return nil
}

// ByteFormat is the format of the byte tokenizer with no chat template.
func ByteFormat() Format { return Format{Tok: NewByteTokenizer()} }

// Fingerprint identifies everything that decides the tokens of a row:
// the tokenizer, the template, the loss mode, the Alpaca prompt, the
// vocabulary bound and the turn markers. Tokenizer and Renderer names must
// change with their content.
func (f Format) Fingerprint() string {
	h := sha256.New()
	chat := "none"
	if f.Chat != nil {
		chat = f.Chat.Name()
	}
	fmt.Fprintf(h, "tok=%s\nchat=%s\nloss=%s\nalpaca=%v\nvocab=%d\n", f.Tok.Name(), chat, f.LossOn, f.Alpaca, f.vocab())
	for _, m := range f.Markers {
		fmt.Fprintf(h, "marker=%q\n", m)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (f Format) vocab() int {
	if f.VocabSize > 0 {
		return f.VocabSize
	}
	return f.Tok.VocabSize()
}

// document is BOS + prompt + body + EOS with the body and EOS as targets.
// Prompt and body are encoded separately, so that the target boundary
// falls on a token boundary for any tokenizer.
func (f Format) document(what, prompt, body string) (Example, error) {
	if err := f.CheckRow(what, len(prompt)+len(body)); err != nil {
		return Example{}, err
	}
	tok := f.Tok
	var ids []int
	if tok.BOS() >= 0 {
		ids = append(ids, tok.BOS())
	}
	p, err := tok.EncodeIDs(prompt)
	if err != nil {
		return Example{}, err
	}
	ids = append(ids, p...)
	first := len(ids)
	b, err := tok.EncodeIDs(body)
	if err != nil {
		return Example{}, err
	}
	ids = append(ids, b...)
	if tok.EOS() >= 0 {
		ids = append(ids, tok.EOS())
	}
	target := make([]bool, len(ids))
	for i := max(first, 1); i < len(target); i++ {
		target[i] = true
	}
	return Example{IDs: ids, Target: target}, nil
}

// alpaca renders an Alpaca row: through Format.Alpaca's prompt, or as a
// user turn (the instruction, then the input after a blank line) answered
// by the output.
func (f Format) alpaca(fields map[string]json.RawMessage) (Example, error) {
	instruction, err := stringField(fields, fInstruction)
	if err != nil {
		return Example{}, err
	}
	output, err := stringField(fields, fOutput)
	if err != nil {
		return Example{}, err
	}
	var input string
	if _, ok := fields[fInput]; ok {
		if input, err = stringField(fields, fInput); err != nil {
			return Example{}, err
		}
	}
	if output == "" {
		return Example{}, errors.New(`"output" is empty`)
	}
	if f.Alpaca {
		return f.document(`"instruction", "input" and "output" in the Alpaca prompt are`, StanfordAlpaca(instruction, input), output)
	}
	user := instruction
	if input != "" {
		user += "\n\n" + input
	}
	return f.conversation([]Message{{RoleUser, user}, {RoleAssistant, output}})
}

// conversation tokenizes a rendered conversation once and takes the
// targets from the byte spans of its trained turns. BOS is added unless
// the template already wrote it.
func (f Format) conversation(msgs []Message) (Example, error) {
	if f.Chat == nil {
		return Example{}, errors.New("a conversation row needs a chat template: the model has none; set data.chat_template (a built-in name such as chatml, or a template)")
	}
	text, spans, err := RenderConversation(f.Chat, msgs, f.LossOn, f.Markers)
	if err != nil {
		return Example{}, err
	}
	if err := f.CheckRow("the conversation rendered through the chat template is", len(text)); err != nil {
		return Example{}, err
	}
	ids, tokSpans, err := f.Tok.Encode(text)
	if err != nil {
		return Example{}, err
	}
	target := targetsFromSpans(tokSpans, spans)
	if bos := f.Tok.BOS(); bos >= 0 && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]int{bos}, ids...)
		target = append([]bool{false}, target...)
	}
	n := 0
	for _, t := range target[1:] {
		if t {
			n++
		}
	}
	if n == 0 {
		return Example{}, errors.New("the conversation has no token to train on")
	}
	return Example{IDs: ids, Target: target}, nil
}

// shareGPTRoles maps ShareGPT's "from" to roles.
func shareGPTRole(from string) (string, bool) {
	switch from {
	case "human", "user":
		return RoleUser, true
	case "gpt", "assistant":
		return RoleAssistant, true
	case "system":
		return RoleSystem, true
	}
	return "", false
}

// conversationField decodes a messages or ShareGPT conversations list:
// objects with exactly the role and content keys of their kind, content a
// string.
func conversationField(fields map[string]json.RawMessage, kind string) ([]Message, error) {
	roleKey, contentKey := "role", "content"
	if kind == fConversations {
		roleKey, contentKey = "from", "value"
	}
	raw := bytes.TrimSpace(fields[kind])
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fmt.Errorf("%q must be a list of {%q, %q} objects", kind, roleKey, contentKey)
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%q must be a list of {%q, %q} objects", kind, roleKey, contentKey)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("%q is empty: the conversation has no turns", kind)
	}
	msgs := make([]Message, len(items))
	for i, it := range items {
		at := fmt.Sprintf("%s[%d]", kind, i)
		if it == nil {
			return nil, fmt.Errorf("%s must be an object", at)
		}
		for k := range it {
			if k != roleKey && k != contentKey {
				return nil, fmt.Errorf("%s: unknown field %q (want %q and %q)", at, k, roleKey, contentKey)
			}
		}
		role, err := stringField(it, roleKey)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		content, err := stringField(it, contentKey)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		if kind == fConversations {
			r, ok := shareGPTRole(role)
			if !ok {
				return nil, fmt.Errorf("%s: unknown %q %q (want human, gpt or system)", at, roleKey, role)
			}
			role = r
		} else if role != RoleSystem && role != RoleUser && role != RoleAssistant {
			return nil, fmt.Errorf("%s: unknown role %q (want system, user or assistant)", at, role)
		}
		msgs[i] = Message{Role: role, Content: content}
	}
	return msgs, nil
}

// StanfordAlpaca is the prompt of the Stanford Alpaca release, for
// Format.Alpaca: with an input, and without.
func StanfordAlpaca(instruction, input string) string {
	if strings.TrimSpace(input) == "" {
		return "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n" +
			"### Instruction:\n" + instruction + "\n\n### Response:\n"
	}
	return "Below is an instruction that describes a task, paired with an input that provides further context. " +
		"Write a response that appropriately completes the request.\n\n" +
		"### Instruction:\n" + instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n"
}
