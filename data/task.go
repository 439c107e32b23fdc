package data

import (
	"context"
	"errors"
	"fmt"

	"github.com/mixtune/mixtune/internal/readlimit"
)

// Task is one question of a generation benchmark: the prompt's token ids
// and the reply expected by exact match.
type Task struct {
	Line   int
	Prompt []int
	Want   string
}

// LoadTasks reads the first limit (0: all) questions of a task file. A
// prompt/completion row asks BOS + prompt and wants the completion; a
// conversation (messages, ShareGPT or Alpaca) ending with an assistant turn
// asks the conversation before that turn, rendered with the generation
// prompt, and wants the turn's content, as a chat model is used.
//
// A .parquet file is read as Parquet (see IsParquet), up to the limit.
func LoadTasks(path string, f Format, limit int) ([]Task, error) {
	if IsParquet(path) {
		return loadParquetTasks(path, f, limit)
	}
	blocks, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var tasks []Task
	for _, b := range blocks {
		for i, line := range b.lines {
			if line == nil {
				continue
			}
			n := b.first + i
			if err := checkText(line); err != nil {
				return nil, &LineError{path, n, err}
			}
			t, err := f.task(line)
			if err != nil {
				return nil, &LineError{path, n, err}
			}
			t.Line = n
			tasks = append(tasks, t)
			if limit > 0 && len(tasks) == limit {
				return tasks, nil
			}
		}
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("%s: no examples", path)
	}
	return tasks, nil
}

// errEnough stops reading a Parquet file once the tasks asked for are in.
var errEnough = errors.New("enough tasks")

// loadParquetTasks is LoadTasks for a Parquet file.
func loadParquetTasks(path string, f Format, limit int) ([]Task, error) {
	var tasks []Task
	err := parquetObjects(path, useRows, func(fileRow int64, obj []byte, place func(error) error) error {
		t, err := f.task(obj)
		if err != nil {
			return place(err)
		}
		t.Line = int(fileRow) + 1
		if tasks = append(tasks, t); limit > 0 && len(tasks) == limit {
			return errEnough
		}
		return nil
	})
	if err != nil && err != errEnough {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("%s: no examples", path)
	}
	return tasks, nil
}

// task turns one row into a question.
func (f Format) task(line []byte) (Task, error) {
	fields, kind, err := decodeRow(line)
	if err != nil {
		return Task{}, err
	}
	var msgs []Message
	switch kind {
	case fPrompt:
		prompt, err := stringField(fields, fPrompt)
		if err != nil {
			return Task{}, err
		}
		want, err := stringField(fields, fCompletion)
		if err != nil {
			return Task{}, err
		}
		p, err := f.prompt(prompt)
		return Task{Prompt: p, Want: want}, err
	case fInstruction:
		instruction, err1 := stringField(fields, fInstruction)
		output, err2 := stringField(fields, fOutput)
		var input string
		var err3 error
		if _, ok := fields[fInput]; ok {
			input, err3 = stringField(fields, fInput)
		}
		if err := errors.Join(err1, err2, err3); err != nil {
			return Task{}, err
		}
		if f.Alpaca {
			p, err := f.prompt(StanfordAlpaca(instruction, input))
			return Task{Prompt: p, Want: output}, err
		}
		user := instruction
		if input != "" {
			user += "\n\n" + input
		}
		msgs = []Message{{RoleUser, user}, {RoleAssistant, output}}
	case fMessages, fConversations:
		if msgs, err = conversationField(fields, kind); err != nil {
			return Task{}, err
		}
	default:
		return Task{}, errors.New(`task rows must be {"prompt", "completion"} or a conversation ending with the assistant's answer`)
	}
	last := len(msgs) - 1
	if msgs[last].Role != RoleAssistant {
		return Task{}, errors.New("a task conversation must end with the assistant's answer")
	}
	if f.Chat == nil {
		return Task{}, errors.New("a conversation row needs a chat template: the model has none; set data.chat_template (a built-in name such as chatml, or a template)")
	}
	if err := checkConversation(msgs); err != nil {
		return Task{}, err
	}
	text, err := f.Chat.Render(msgs[:last], true)
	if err != nil {
		return Task{}, err
	}
	ids, err := f.Tok.EncodeIDs(text)
	if err != nil {
		return Task{}, err
	}
	if bos := f.Tok.BOS(); bos >= 0 && (len(ids) == 0 || ids[0] != bos) {
		ids = append([]int{bos}, ids...)
	}
	return Task{Prompt: ids, Want: msgs[last].Content}, nil
}

// prompt is BOS + the encoded text.
func (f Format) prompt(text string) ([]int, error) {
	var ids []int
	if bos := f.Tok.BOS(); bos >= 0 {
		ids = append(ids, bos)
	}
	p, err := f.Tok.EncodeIDs(text)
	if err != nil {
		return nil, err
	}
	return append(ids, p...), nil
}

// readLines reads a whole file into blocks of lines.
func readLines(path string) ([]*block, error) {
	file, err := readlimit.Open(path, readlimit.Data)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return splitLines(context.Background(), path, file, MaxLineBytes)
}
