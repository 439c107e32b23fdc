package data

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/internal/strictjson"
)

// Example is one tokenized training sequence. Target[i] reports whether
// IDs[i] is a prediction target (its loss counts when predicting it from
// IDs[:i]). Line is the 1-based line of the source file, or 0 when the
// example did not come from a file.
type Example struct {
	IDs    []int
	Target []bool
	Line   int
}

// MaxLineBytes is the longest JSONL line ParseJSONL accepts. Rows holding a
// whole book or a long pre-tokenized sequence are legitimate, so the limit is
// far above bufio.Scanner's 64 KiB default.
const MaxLineBytes = 64 << 20

// LineError is an error in one row of a JSONL file. Its message reads
// "File:Line: Err", the form editors and terminals turn into a link.
type LineError struct {
	File string
	Line int // 1-based
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

func (e *LineError) Unwrap() error { return e.Err }

// LoadJSONL reads the JSONL file at path; see ParseJSONL. Errors name path.
//
// A .parquet file is read as Parquet (see IsParquet), its errors placed
// by row group and row.
func LoadJSONL(path string, f Format) ([]Example, error) {
	if IsParquet(path) {
		return loadParquet(context.Background(), path, f, LoadOptions{})
	}
	file, err := readlimit.Open(path, readlimit.Data)
	if err != nil {
		return nil, err // *fs.PathError already names the path and the operation
	}
	defer file.Close()
	return ParseJSONL(path, file, f)
}

// ParseJSONL reads one Example per non-blank line of r. name is used in error
// messages only.
//
// Each line is a JSON object of exactly one of these kinds:
//
//	{"text": "..."}                         BOS + text + EOS; every token but BOS is a target
//	{"prompt": "...", "completion": "..."}  BOS + prompt + completion + EOS;
//	                                        only the completion and EOS are targets
//	{"input_ids": [...]}                    used as given; every token but the first is a target
//	{"messages": [{"role": ..., "content": ...}, ...]}
//	                                        a conversation through the chat template
//	{"conversations": [{"from": ..., "value": ...}, ...]}
//	                                        ShareGPT: from human, gpt or system
//	{"instruction": ..., "input": ..., "output": ...}
//	                                        Alpaca: through the chat template (or
//	                                        Format.Alpaca's prompt), loss on the output
//
// Conversations are trained on as Format.LossOn says (by default, every
// assistant turn with its end-of-turn token), with the loss mask taken from
// the rendered text's byte spans (see RenderConversation).
//
// Unknown and duplicate keys are rejected, as are an empty "text" or
// "completion" and fewer than two input_ids, since such rows train nothing.
// An empty "prompt" is allowed. A UTF-8 byte order mark at the start of r and
// blank lines are skipped, and kinds may be mixed across lines. Errors are
// *LineError values, except for a stream with no rows, which is reported as
// "name: no examples".
func ParseJSONL(name string, r io.Reader, f Format) ([]Example, error) {
	return parseJSONL(name, r, f, MaxLineBytes)
}

// parseJSONL is ParseJSONL with the line limit as a parameter, so that tests
// can exercise the limit without 64 MiB inputs.
func parseJSONL(name string, r io.Reader, f Format, maxLine int) ([]Example, error) {
	return parseLines(context.Background(), name, r, f, maxLine, LoadOptions{total: -1})
}

// LoadOptions tune how a large file is read: rows are tokenized by Workers
// goroutines (0: GOMAXPROCS), with the same result whatever their number,
// and Progress, if set, is told how many of the file's bytes are done (and
// the file's size, -1 for a reader of unknown length).
type LoadOptions struct {
	Workers  int
	Progress func(done, total int64)
	total    int64 // the file's size, for Progress; -1 when unknown
}

// Load is LoadJSONL with options. Cancelling ctx makes it return
// ctx.Err() at once (see parseLines).
func Load(ctx context.Context, path string, f Format, opt LoadOptions) ([]Example, error) {
	if IsParquet(path) {
		return loadParquet(ctx, path, f, opt)
	}
	file, err := readlimit.Open(path, readlimit.Data)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	opt.total = -1
	if st, err := file.Stat(); err == nil {
		opt.total = st.Size()
	}
	return parseLines(ctx, path, file, f, MaxLineBytes, opt)
}

// block is a run of lines parsed by one worker, and what came of them.
type block struct {
	first int      // the 1-based number of lines[0] (for Parquet, its row in the file)
	lines [][]byte // nil for a blank line
	size  int64
	ex    []Example
	err   error
	// at places an error at line n; nil for a LineError (Parquet's rows
	// are placed by row group, group the block's)
	at    func(n int, err error) error
	group int
}

// errAt places err at the block's line n in the file name.
func (b *block) errAt(name string, n int, err error) error {
	if b.at != nil {
		return b.at(n, err)
	}
	return &LineError{name, n, err}
}

// parseLines reads r's lines and parses them in blocks, on several
// goroutines, as it reads: at most a few blocks of text wait to be parsed,
// so the file's text is never held whole. The examples keep the file's
// order, and the error reported is the first line's.
//
// Cancelling ctx returns ctx.Err() at once, whatever the rows: reading
// stops at the next block, the workers at their next row, and a worker
// inside one huge row (tens of MB take seconds to tokenize) finishes it in
// the background, its result dropped. Parsing writes nothing, so nothing
// is left half done.
func parseLines(ctx context.Context, name string, r io.Reader, f Format, maxLine int, opt LoadOptions) ([]Example, error) {
	return parseBlocks(ctx, name, f, opt, func(emit func(*block)) error {
		return scanBlocks(ctx, name, r, maxLine, emit)
	})
}

// parseBlocks parses the blocks scan hands out, as parseLines says.
func parseBlocks(ctx context.Context, name string, f Format, opt LoadOptions, scan func(emit func(*block)) error) ([]Example, error) {
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var (
		blocks []*block // in the file's order; only the reading goroutine appends
		done   atomic.Int64
		wg     sync.WaitGroup
	)
	jobs := make(chan *block, workers)
	big := make(chan struct{}, 1)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range jobs {
				if ctx.Err() != nil {
					continue // drain: the reader stops soon
				}
				b.parse(ctx, name, f, big)
				if d := done.Add(b.size); opt.Progress != nil && ctx.Err() == nil {
					opt.Progress(d, opt.total)
				}
			}
		}()
	}
	var readErr error
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		readErr = scan(func(b *block) {
			blocks = append(blocks, b)
			jobs <- b
		})
		close(jobs)
		wg.Wait()
	}()
	select {
	case <-finished:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := ctx.Err(); err != nil { // blocks skipped after the cancel
		return nil, err
	}
	var out []Example
	for _, b := range blocks {
		if b.err != nil {
			return nil, b.err
		}
		out = append(out, b.ex...)
	}
	if readErr != nil {
		return nil, readErr // it is at a line after every parsed one
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no examples", name)
	}
	return out, nil
}

// linesPerBlock balances the cost of handing out work against keeping
// every core busy to the end.
const linesPerBlock = 256

// splitLines reads every line of r into blocks; see scanBlocks.
func splitLines(ctx context.Context, name string, r io.Reader, maxLine int) ([]*block, error) {
	var blocks []*block
	err := scanBlocks(ctx, name, r, maxLine, func(b *block) { blocks = append(blocks, b) })
	return blocks, err
}

// scanBlocks reads r's lines (copying each) into blocks of
// linesPerBlock, handing each to emit when it is full and the last at the
// end, checking the line limit and dropping a byte order mark at the
// start. It stops with ctx.Err() when ctx is cancelled.
func scanBlocks(ctx context.Context, name string, r io.Reader, maxLine int, emit func(*block)) error {
	sc := bufio.NewScanner(r)
	// +2 leaves room for the "\r\n" that the scanner needs to see in its
	// buffer to end a line of exactly maxLine bytes.
	sc.Buffer(make([]byte, 0, min(64<<10, maxLine+2)), maxLine+2)
	var cur *block
	line := 0
	flush := func() {
		if cur != nil {
			emit(cur)
			cur = nil
		}
	}
	defer flush()
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) > maxLine {
			return &LineError{name, line, fmt.Errorf("line is longer than %s", byteSize(maxLine))}
		}
		if line == 1 {
			b = bytes.TrimPrefix(b, []byte("\uFEFF"))
		}
		if cur == nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			cur = &block{first: line}
		}
		if len(bytes.TrimSpace(b)) == 0 {
			cur.lines = append(cur.lines, nil)
		} else {
			cur.lines = append(cur.lines, bytes.Clone(b))
		}
		cur.size += int64(len(b)) + 1
		if len(cur.lines) == linesPerBlock {
			flush()
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &LineError{name, line + 1, fmt.Errorf("line is longer than %s", byteSize(maxLine))}
		}
		return &LineError{name, line + 1, err}
	}
	return nil
}

// BigRowBytes is the line length above which a row is tokenized alone:
// one such row at a time, while other workers take smaller ones, so that
// the memory tokenization holds is that of one row of up to
// Format.MaxRowBytes plus one row of up to BigRowBytes per worker, how
// many workers there are.
const BigRowBytes = 1 << 20

// parse parses the block's lines, stopping at the first error, or with
// ctx.Err() when ctx is cancelled. big is a one-slot semaphore held while
// a line over BigRowBytes is parsed.
func (b *block) parse(ctx context.Context, name string, f Format, big chan struct{}) {
	for i, l := range b.lines {
		if l == nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			b.err = err
			return
		}
		n := b.first + i
		if err := checkText(l); err != nil {
			b.err = b.errAt(name, n, err)
			return
		}
		if len(l) > BigRowBytes {
			big <- struct{}{}
		}
		ex, err := parseRow(l, f)
		if len(l) > BigRowBytes {
			<-big
		}
		if err != nil {
			b.err = b.errAt(name, n, err)
			return
		}
		ex.Line = n
		b.ex = append(b.ex, ex)
	}
	b.lines = nil // done with the text
}

// checkText refuses a line that is not valid UTF-8, or that escapes half of
// a UTF-16 surrogate pair ("\ud800"): encoding/json would turn either into
// U+FFFD, and the model would train on replacement characters the data
// never had.
func checkText(line []byte) error {
	if i := strictjson.InvalidUTF8(line); i >= 0 {
		return fmt.Errorf("invalid UTF-8 at byte %d of the line (the file must be UTF-8 text)", i+1)
	}
	if i := strictjson.LoneSurrogate(line); i >= 0 {
		return fmt.Errorf("%s at byte %d escapes half of a UTF-16 surrogate pair, which is no character", line[i:i+6], i+1)
	}
	return nil
}

// byteSize formats n for an error message.
func byteSize(n int) string { return readlimit.Bytes(int64(n)) }

// Field names of a JSONL row.
const (
	fText          = "text"
	fPrompt        = "prompt"
	fCompletion    = "completion"
	fInputIDs      = "input_ids"
	fMessages      = "messages"
	fConversations = "conversations"
	fInstruction   = "instruction"
	fInput         = "input"
	fOutput        = "output"
)

// rowKinds are the kinds of row, each by the fields that make it, the
// first one naming it; the others must come with it.
func rowKinds() [][]string {
	return [][]string{{fText}, {fPrompt, fCompletion}, {fInputIDs}, {fMessages}, {fConversations}, {fInstruction, fOutput, fInput}}
}

// kindOf names the row's kind by its fields, or says what is wrong.
func kindOf(fields map[string]json.RawMessage) (string, error) {
	var present []string // the kinds with any of their fields, in rowKinds order
	for _, k := range rowKinds() {
		for _, f := range k {
			if _, ok := fields[f]; ok {
				present = append(present, f)
				break
			}
		}
	}
	switch {
	case len(present) == 0:
		return "", errors.New(`a row needs "text", "prompt"+"completion", "input_ids", "messages", "conversations" or "instruction"+"output"`)
	case len(present) > 1:
		return "", fmt.Errorf("both %q and %q", present[0], present[1])
	}
	for _, k := range rowKinds() {
		for _, f := range k {
			if f != present[0] {
				continue
			}
			// the kind's required fields: all but Alpaca's optional input
			for _, req := range k[:min(len(k), 2)] {
				if _, ok := fields[req]; !ok {
					return "", fmt.Errorf("%q without %q", present[0], req)
				}
			}
			return k[0], nil
		}
	}
	return "", nil
}

// decodeRow decodes a row's fields and names its kind.
func decodeRow(line []byte) (map[string]json.RawMessage, string, error) {
	fields, err := decodeObject(line, slices.Concat(rowKinds()...))
	if err != nil {
		return nil, "", err
	}
	kind, err := kindOf(fields)
	return fields, kind, err
}

// decodeObject decodes a row's fields, refusing keys other than known.
func decodeObject(line []byte, known []string) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("a row must be a JSON object, not %s", te.Value)
		}
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if fields == nil {
		return nil, errors.New("a row must be a JSON object, not null")
	}
	if err := checkKeys(line, known); err != nil {
		return nil, err
	}
	return fields, nil
}

// parseRow turns one JSONL line into an Example. Its errors carry no
// position; the caller adds it.
func parseRow(line []byte, f Format) (Example, error) {
	fields, kind, err := decodeRow(line)
	if err != nil {
		return Example{}, err
	}
	switch kind {
	case fText:
		text, err := stringField(fields, fText)
		if err != nil {
			return Example{}, err
		}
		if text == "" {
			return Example{}, errors.New(`"text" is empty`)
		}
		return f.document(`"text" is`, "", text)
	case fPrompt:
		prompt, err := stringField(fields, fPrompt)
		if err != nil {
			return Example{}, err
		}
		completion, err := stringField(fields, fCompletion)
		if err != nil {
			return Example{}, err
		}
		if completion == "" {
			return Example{}, errors.New(`"completion" is empty`)
		}
		return f.document(`"prompt" and "completion" are`, prompt, completion)
	case fInputIDs:
		ids, err := idsField(fields[fInputIDs], f.vocab())
		if err != nil {
			return Example{}, err
		}
		target := make([]bool, len(ids))
		for i := 1; i < len(target); i++ {
			target[i] = true
		}
		return Example{IDs: ids, Target: target}, nil
	case fInstruction:
		return f.alpaca(fields)
	}
	msgs, err := conversationField(fields, kind)
	if err != nil {
		return Example{}, err
	}
	return f.conversation(msgs)
}

// checkKeys rejects keys not in known, and duplicate keys, of the (already validated)
// object in line. It walks the keys in file order, which a map cannot give,
// so that the first offending key is the one reported.
func checkKeys(line []byte, known []string) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // '{'
		return fmt.Errorf("invalid JSON: %w", err)
	}
	seen := make(map[string]bool, 4)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
		key, _ := t.(string)
		if !slices.Contains(known, key) {
			return fmt.Errorf("unknown field %q", key)
		}
		if seen[key] {
			return fmt.Errorf("duplicate field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
	}
	return nil
}

// stringField decodes fields[name], which must be a JSON string. A JSON null
// is rejected too: json.Unmarshal would silently leave the string empty.
func stringField(fields map[string]json.RawMessage, name string) (string, error) {
	raw := bytes.TrimSpace(fields[name])
	if len(raw) == 0 || raw[0] != '"' {
		return "", fmt.Errorf("%q must be a string", name)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%q: %w", name, err)
	}
	return s, nil
}

// idsField decodes a JSON array of token ids, each in [0, vocab).
func idsField(raw json.RawMessage, vocab int) ([]int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, fmt.Errorf("%q must be an array of integers", fInputIDs)
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("%q: %w", fInputIDs, err)
	}
	if len(elems) < 2 {
		return nil, fmt.Errorf("%q has %d tokens; it needs at least 2", fInputIDs, len(elems))
	}
	ids := make([]int, len(elems))
	for i, e := range elems {
		e = bytes.TrimSpace(e)
		if !isJSONInteger(e) {
			return nil, fmt.Errorf("%s[%d] is not an integer", fInputIDs, i)
		}
		v, err := strconv.Atoi(string(e))
		if err != nil || v < 0 || v >= vocab {
			// err is a range error: the literal does not even fit an int.
			return nil, fmt.Errorf("%s[%d] = %s is outside the vocabulary (size %d)", fInputIDs, i, e, vocab)
		}
		ids[i] = v
	}
	return ids, nil
}

// isJSONInteger reports whether b is a JSON number written without fraction
// or exponent. Ids written as 3.0 or 3e0 are rejected: they come from a
// float column and are more likely a bug than a token.
func isJSONInteger(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
