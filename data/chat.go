package data

import (
	"errors"
	"fmt"
	"strings"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Roles a conversation may use.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Renderer renders a conversation as a chat template does; with
// addGenerationPrompt the text ends where the assistant's reply begins.
type Renderer interface {
	Render(msgs []Message, addGenerationPrompt bool) (string, error)
	// Name identifies the template in errors and cache keys.
	Name() string
}

// LossOn says which tokens of a conversation are trained on.
type LossOn int

const (
	// LossAssistant trains on every assistant turn: what the model
	// generates after the generation prompt, up to and including the
	// template's end-of-turn token.
	LossAssistant LossOn = iota
	// LossLastTurn trains on the final assistant turn only.
	LossLastTurn
	// LossAll trains on every token, as a text row.
	LossAll
)

func (l LossOn) String() string {
	switch l {
	case LossLastTurn:
		return "last_turn"
	case LossAll:
		return "all"
	}
	return "assistant"
}

// MarshalText writes assistant, last_turn or all.
func (l LossOn) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText reads assistant, last_turn or all.
func (l *LossOn) UnmarshalText(b []byte) error {
	switch string(b) {
	case "assistant":
		*l = LossAssistant
	case "last_turn":
		*l = LossLastTurn
	case "all":
		*l = LossAll
	default:
		return fmt.Errorf("must be assistant, last_turn or all, got %q", b)
	}
	return nil
}

// Span is a byte range [Start, End) of a text.
type Span struct{ Start, End int }

// RenderConversation renders msgs for training and returns the text and
// the byte spans the loss is taken on.
//
// The spans come from the rendered text itself, never from tokenizing a
// reply alone and searching for it (BPE merges differ with left context,
// the trap behind completion-only masking bugs). For assistant turn i, the
// conversation up to it rendered with the generation prompt must be a
// prefix of the whole: the turn starts where that prefix ends. It ends
// where the conversation up to and including it ends (trailing
// whitespace after its end-of-turn marker left out), or, for templates
// that render earlier turns differently once later ones follow (Qwen3
// drops their reasoning), at the first occurrence in the whole text of the
// end-of-turn marker that closes the turn when rendered alone: the last
// of markers (the tokenizer's special tokens) in it.
func RenderConversation(r Renderer, msgs []Message, on LossOn, markers []string) (string, []Span, error) {
	if err := checkConversation(msgs); err != nil {
		return "", nil, err
	}
	full, err := r.Render(msgs, false)
	if err != nil {
		return "", nil, err
	}
	if on == LossAll {
		return full, []Span{{0, len(full)}}, nil
	}
	var turns []int
	for i, m := range msgs {
		if m.Role == RoleAssistant {
			turns = append(turns, i)
		}
	}
	if len(turns) == 0 {
		return "", nil, errors.New("the conversation has no assistant turn to train on")
	}
	if on == LossLastTurn {
		turns = turns[len(turns)-1:]
	}
	var spans []Span
	for _, i := range turns {
		sp, err := turnSpan(r, msgs, i, full, markers)
		if err != nil {
			return "", nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		spans = append(spans, sp)
	}
	return full, spans, nil
}

// turnSpan finds assistant turn i in full, the whole conversation rendered.
func turnSpan(r Renderer, msgs []Message, i int, full string, markers []string) (Span, error) {
	before, err := r.Render(msgs[:i], true)
	if err != nil {
		return Span{}, err
	}
	if !strings.HasPrefix(full, before) {
		return Span{}, fmt.Errorf("chat template %s renders the conversation before this turn (with the generation prompt) differently from the start of the whole conversation, so the turn cannot be located for the loss mask", r.Name())
	}
	start := len(before)
	upTo, err := r.Render(msgs[:i+1], false)
	if err != nil {
		return Span{}, err
	}
	if strings.HasPrefix(full, upTo) && len(upTo) > start {
		end := start + len(strings.TrimRight(upTo[start:], " \t\r\n"))
		if end > start {
			return Span{start, end}, nil
		}
	}
	// The turn renders differently once later turns follow: close it at
	// its end-of-turn marker.
	alone := upTo[min(start, len(upTo)):]
	marker, at := "", -1
	for _, m := range markers {
		if j := strings.LastIndex(alone, m); m != "" && j > at {
			marker, at = m, j
		}
	}
	if marker == "" {
		return Span{}, fmt.Errorf("chat template %s renders this turn differently once later turns follow, and no end-of-turn token closes it", r.Name())
	}
	j := strings.Index(full[start:], marker)
	if j < 0 {
		return Span{}, fmt.Errorf("chat template %s: the end-of-turn token %q of this turn is not in the whole conversation", r.Name(), marker)
	}
	return Span{start, start + j + len(marker)}, nil
}

// checkConversation refuses what no template renders meaningfully: an
// empty conversation or an unknown role.
func checkConversation(msgs []Message) error {
	if len(msgs) == 0 {
		return errors.New("the conversation is empty")
	}
	for i, m := range msgs {
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		default:
			return fmt.Errorf("messages[%d]: unknown role %q (want system, user or assistant)", i, m.Role)
		}
	}
	return nil
}

// targetsFromSpans marks token i a target when its first byte lies in one
// of spans; tokenSpans are the tokens' byte ranges in the text.
func targetsFromSpans(tokenSpans []Span, spans []Span) []bool {
	target := make([]bool, len(tokenSpans))
	k := 0
	for i, ts := range tokenSpans {
		for k < len(spans) && spans[k].End <= ts.Start {
			k++
		}
		if k < len(spans) && ts.Start >= spans[k].Start && ts.Start < spans[k].End && ts.End > ts.Start {
			target[i] = true
		}
	}
	return target
}
