package main

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// taskRow is one fine-tuning example. Field order is the JSON order.
type taskRow struct {
	Prompt     string `json:"prompt"`
	Completion string `json:"completion"`
}

// Prompt and completion of the dates task.
func taskPrompt(d date) string     { return "Date: " + d.iso() + "\nIn words:" }
func taskCompletion(d date) string { return " " + d.us() }

// Upper bounds on the task strings, in bytes.
const (
	maxPromptBytes     = 32
	maxCompletionBytes = 20
)

// splits holds the dates of each split.
type splits struct{ train, val, test []date }

// generateTasks draws disjoint splits of distinct dates in [minYear, maxYear].
// Each split is balanced over months: month counts differ by at most one,
// and within a month every valid day of every year is equally likely.
func generateTasks(seed uint64, nTrain, nVal, nTest int) (splits, error) {
	r := newRNG(seed, "tasks/dates")
	buckets := allDates()
	for m := range buckets {
		b := buckets[m]
		r.shuffle(len(b), func(i, j int) { b[i], b[j] = b[j], b[i] })
	}
	var used [12]int
	draw := func(n int) ([]date, error) {
		months := make([]int, 12)
		for i := range months {
			months[i] = i
		}
		r.shuffle(12, func(i, j int) { months[i], months[j] = months[j], months[i] })
		var out []date
		for rank, m := range months {
			k := n / 12
			if rank < n%12 {
				k++
			}
			if used[m]+k > len(buckets[m]) {
				return nil, fmt.Errorf("not enough dates in month %d for the requested split sizes", m+1)
			}
			out = append(out, buckets[m][used[m]:used[m]+k]...)
			used[m] += k
		}
		r.shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out, nil
	}
	var s splits
	var err error
	// Test first, so that its dates do not depend on the train size.
	if s.test, err = draw(nTest); err != nil {
		return s, err
	}
	if s.val, err = draw(nVal); err != nil {
		return s, err
	}
	if s.train, err = draw(nTrain); err != nil {
		return s, err
	}
	return s, nil
}

// chatRow is one conversation of the chat variant of the dates task.
type chatRow struct {
	Messages []chatMessage `json:"messages"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// The user's request and the assistant's answer in the chat variant: the
// same dates, the date last in the request, and the answer repeating it
// before its written form ("1952-03-25 is March 25, 1952"). The repeat is a
// contiguous copy, which the tiny model learns at once; the written form
// then reads the digits a few tokens back, as in the completion form. Asked
// to answer from across the chat template's turn markers (where
// <|im_start|> is also the BOS the model was pretrained with), it reached
// only 31-40% in 800 steps.
func chatRequest(d date) string { return "Write in words: " + d.iso() }
func chatAnswer(d date) string  { return d.iso() + " is " + d.us() }

func chatJSONL(ds []date) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, d := range ds {
		row := chatRow{[]chatMessage{{"user", chatRequest(d)}, {"assistant", chatAnswer(d)}}}
		if err := enc.Encode(row); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

func taskJSONL(ds []date) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, d := range ds {
		row := taskRow{taskPrompt(d), taskCompletion(d)}
		if len(row.Prompt) > maxPromptBytes || len(row.Completion) > maxCompletionBytes {
			return nil, fmt.Errorf("task row too long: %+v", row)
		}
		if err := enc.Encode(row); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), nil
}

// promptsTxt holds the first n test prompts, JSON-encoded one per line.
func promptsTxt(ds []date, n int) ([]byte, error) {
	var buf bytes.Buffer
	for _, d := range ds[:min(n, len(ds))] {
		b, err := json.Marshal(taskPrompt(d))
		if err != nil {
			return nil, err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}
