package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"slices"

	"github.com/mixtune/mixtune/internal/readlimit"
)

// Pair is one preference row tokenized: the chosen and the rejected
// sequence, each BOS + prompt + completion + EOS with the completion and
// EOS as targets (the prompt is shared and trains nothing).
type Pair struct {
	Chosen, Rejected Example
	Line             int
	// Reference holds the reference model's summed log-probabilities of
	// the chosen and rejected completion when they are computed once
	// before training (full fine-tuning, whose weights are the
	// reference's until the first step); nil otherwise.
	Reference []float64
}

// LoadPairs reads the preference JSONL file at path; see ParsePairs. A
// .parquet file is read as Parquet (see IsParquet): columns "prompt",
// "chosen" and "rejected", strings or lists of messages.
func LoadPairs(path string, f Format, seqLen int) ([]Pair, error) {
	if IsParquet(path) {
		return loadParquetPairs(path, f, seqLen)
	}
	file, err := readlimit.Open(path, readlimit.Data)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	return ParsePairs(path, file, f, seqLen)
}

// ParsePairs reads one Pair per non-blank line of r, in TRL's preference
// format, plain or conversational:
//
//	{"prompt": "...", "chosen": "...", "rejected": "..."}
//	{"prompt": [{"role": "user", "content": "..."}, ...],
//	 "chosen": [{"role": "assistant", "content": "..."}],
//	 "rejected": [{"role": "assistant", "content": "..."}]}
//
// Strings become BOS + prompt + completion + EOS; message lists go
// through the chat template (Format.Chat), the prompt's turns then the
// completion's one assistant message, whose turn alone is trained on.
//
// Each sequence must fit a row of seqLen+1 tokens (seqLen inputs, each
// predicting the next). When one does not, the prompt is truncated first,
// keeping its end (TRL's truncation_mode keep_end) after BOS; the
// completions are never cut, since a cut answer is no longer the one
// preferred. A row whose completion leaves no room for a single prompt
// token is an error, as are missing or unknown fields, an empty
// completion and chosen equal to rejected. Errors are *LineError values.
func ParsePairs(name string, r io.Reader, f Format, seqLen int) ([]Pair, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var out []Pair
	for line := 1; sc.Scan(); line++ {
		text := bytes.TrimSpace(sc.Bytes())
		if line == 1 {
			text = bytes.TrimPrefix(text, []byte("\ufeff"))
		}
		if len(text) == 0 {
			continue
		}
		p, err := parsePair(text, f, seqLen)
		if err != nil {
			return nil, &LineError{File: name, Line: line, Err: err}
		}
		p.Line = line
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no preference rows", name)
	}
	return out, nil
}

// loadParquetPairs is LoadPairs for a Parquet file.
func loadParquetPairs(path string, f Format, seqLen int) ([]Pair, error) {
	var out []Pair
	err := parquetObjects(path, usePairs, func(fileRow int64, obj []byte, place func(error) error) error {
		p, err := parsePair(obj, f, seqLen)
		if err != nil {
			return place(err)
		}
		p.Line = int(fileRow) + 1
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no preference rows", path)
	}
	return out, nil
}

const (
	fChosen   = "chosen"
	fRejected = "rejected"
)

func parsePair(line []byte, f Format, seqLen int) (Pair, error) {
	fields, err := decodeObject(line, []string{fPrompt, fChosen, fRejected})
	if err != nil {
		return Pair{}, fmt.Errorf("%w (a preference row has \"prompt\", \"chosen\" and \"rejected\")", err)
	}
	lists := 0
	for _, k := range []string{fPrompt, fChosen, fRejected} {
		raw, ok := fields[k]
		if !ok {
			return Pair{}, fmt.Errorf("a preference row needs %q", k)
		}
		if raw = bytes.TrimSpace(raw); len(raw) > 0 && raw[0] == '[' {
			lists++
		}
	}
	var p Pair
	switch lists {
	case 3:
		p, err = conversationPair(fields, f)
	case 0:
		p, err = textPair(fields, f)
	default:
		return Pair{}, errors.New(`"prompt", "chosen" and "rejected" must be all strings or all message lists`)
	}
	if err != nil {
		return Pair{}, err
	}
	if err := truncatePrompts(&p, f.Tok.BOS() >= 0, seqLen+1); err != nil {
		return Pair{}, err
	}
	return p, nil
}

// textPair tokenizes a row of strings: BOS + prompt + completion + EOS.
func textPair(fields map[string]json.RawMessage, f Format) (Pair, error) {
	var s [3]string
	var err error
	for i, k := range []string{fPrompt, fChosen, fRejected} {
		if s[i], err = stringField(fields, k); err != nil {
			return Pair{}, err
		}
	}
	prompt, chosen, rejected := s[0], s[1], s[2]
	switch {
	case chosen == "":
		return Pair{}, errors.New(`"chosen" is empty`)
	case rejected == "":
		return Pair{}, errors.New(`"rejected" is empty`)
	case chosen == rejected:
		return Pair{}, errors.New(`"chosen" and "rejected" are the same: the pair prefers nothing`)
	}
	var p Pair
	if p.Chosen, err = f.document(`"prompt" and "chosen" are`, prompt, chosen); err != nil {
		return Pair{}, err
	}
	if p.Rejected, err = f.document(`"prompt" and "rejected" are`, prompt, rejected); err != nil {
		return Pair{}, err
	}
	return p, nil
}

// conversationPair renders a row of message lists through the chat
// template: the prompt's turns, then the completion, one assistant
// message, which alone is trained on (its turn with the end-of-turn
// token, as LossLastTurn marks it).
func conversationPair(fields map[string]json.RawMessage, f Format) (Pair, error) {
	prompt, err := conversationField(fields, fPrompt)
	if err != nil {
		return Pair{}, err
	}
	var done [2][]Message
	for i, k := range []string{fChosen, fRejected} {
		if done[i], err = conversationField(fields, k); err != nil {
			return Pair{}, err
		}
		if len(done[i]) != 1 || done[i][0].Role != RoleAssistant {
			return Pair{}, fmt.Errorf("%q must be one assistant message", k)
		}
		if done[i][0].Content == "" {
			return Pair{}, fmt.Errorf("%q is empty", k)
		}
	}
	if done[0][0].Content == done[1][0].Content {
		return Pair{}, errors.New(`"chosen" and "rejected" are the same: the pair prefers nothing`)
	}
	last := f
	last.LossOn = LossLastTurn
	var p Pair
	if p.Chosen, err = last.conversation(append(slices.Clone(prompt), done[0]...)); err != nil {
		return Pair{}, fmt.Errorf("prompt and chosen: %w", err)
	}
	if p.Rejected, err = last.conversation(append(slices.Clone(prompt), done[1]...)); err != nil {
		return Pair{}, fmt.Errorf("prompt and rejected: %w", err)
	}
	return p, nil
}

// truncatePrompts drops prompt tokens from the start (after BOS, if any)
// of both sequences alike until the longer one has at most limit tokens.
func truncatePrompts(p *Pair, bos bool, limit int) error {
	over := max(len(p.Chosen.IDs), len(p.Rejected.IDs)) - limit
	if over <= 0 {
		return nil
	}
	start := 0
	if bos {
		start = 1
	}
	prompt := promptLen(p.Chosen) - start
	if over >= prompt {
		return fmt.Errorf("the prompt (%d tokens) and the longer completion (%d tokens) leave no room in a row of %d tokens (data.seq_len+1): even the whole prompt cut would not fit",
			prompt, max(len(p.Chosen.IDs), len(p.Rejected.IDs))-prompt-start, limit)
	}
	for _, e := range []*Example{&p.Chosen, &p.Rejected} {
		e.IDs = append(e.IDs[:start:start], e.IDs[start+over:]...)
		e.Target = append(e.Target[:start:start], e.Target[start+over:]...)
	}
	return nil
}

// promptLen is the number of tokens before the first target.
func promptLen(e Example) int {
	for i, t := range e.Target {
		if t {
			return i
		}
	}
	return len(e.Target)
}

// PairBatch is a batch of P pairs as one model batch of 2P rows: the
// chosen sequences in rows [0, P), the rejected ones in [P, 2P), as
// TRL's concatenated_forward lays them out. Tokens holds each row's
// number of targets (its completion's length with EOS).
type PairBatch struct {
	Batch
	Pairs  int
	Tokens []int
	// Reference is the pairs' precomputed reference log-probabilities in
	// row order, when every pair has them (Pair.Reference); else nil.
	Reference []float64
	// ChosenTokens counts the targets of rows [0, P).
	ChosenTokens int
}

// PairLoader yields batches of pairs, epoch after epoch, shuffled as
// Loader shuffles rows when asked. Pairs are never packed: each sequence
// has a row of its own.
type PairLoader struct {
	pairs         []Pair
	batch, seqLen int
	shuffle       bool
	seed          uint64
	padID         int
	fp            uint64
	epoch, step   int
	order         []int // of l.epoch; nil until needed
	StepsPerEpoch int
}

// NewPairLoader returns a loader of batch pairs per batch over pairs,
// whose sequences ParsePairs has fitted to seqLen+1 tokens.
func NewPairLoader(pairs []Pair, batch, seqLen, padID int, shuffle bool, seed uint64) (*PairLoader, error) {
	if batch < 1 || seqLen < 1 || len(pairs) < batch {
		return nil, fmt.Errorf("data: %d preference pairs do not make a batch of %d", len(pairs), batch)
	}
	l := &PairLoader{pairs: pairs, batch: batch, seqLen: seqLen, padID: padID, shuffle: shuffle, seed: seed, StepsPerEpoch: len(pairs) / batch}
	h := fnv.New64a()
	fmt.Fprintf(h, "pairs batch=%d seq=%d pad=%d shuffle=%v seed=%d\n", batch, seqLen, padID, shuffle, seed)
	for _, p := range pairs {
		for _, e := range []Example{p.Chosen, p.Rejected} {
			fmt.Fprintln(h, e.IDs, e.Target)
		}
	}
	l.fp = h.Sum64()
	return l, nil
}

// Next returns the next batch; an epoch's last incomplete batch is left out.
func (l *PairLoader) Next() PairBatch {
	if l.order == nil {
		l.order = identity(len(l.pairs))
		if l.shuffle {
			l.order = permutation(len(l.pairs), l.seed, splitmix64(loaderSalt^uint64(l.epoch)))
		}
	}
	ps := make([]Pair, l.batch)
	for i := range ps {
		ps[i] = l.pairs[l.order[l.step*l.batch+i]]
	}
	if l.step++; l.step == l.StepsPerEpoch {
		l.epoch, l.step, l.order = l.epoch+1, 0, nil
	}
	return BatchPairs(ps, l.seqLen, l.padID)
}

// State is the loader's position, for a checkpoint.
func (l *PairLoader) State() LoaderState {
	return LoaderState{Epoch: l.epoch, Step: l.step, Fingerprint: l.fp}
}

// Restore moves the loader to s, as State of a loader with the same pairs
// and configuration returned it: an epoch's order depends only on the
// seed and the epoch, so the batches that follow are the saving loader's.
func (l *PairLoader) Restore(s LoaderState) error {
	switch {
	case s.Fingerprint != l.fp:
		return fmt.Errorf("data: loader state is for different pairs or configuration (fingerprint %016x, loader has %016x)", s.Fingerprint, l.fp)
	case s.Epoch < 0 || s.Step < 0 || s.Step >= l.StepsPerEpoch:
		return fmt.Errorf("data: loader state has epoch %d, step %d; an epoch has steps 0 to %d", s.Epoch, s.Step, l.StepsPerEpoch-1)
	}
	l.epoch, l.step, l.order = s.Epoch, s.Step, nil
	return nil
}

// BatchPairs lays pairs out as one PairBatch of rows of seqLen tokens.
func BatchPairs(ps []Pair, seqLen, padID int) PairBatch {
	P, L := len(ps), seqLen
	b := PairBatch{Pairs: P, Tokens: make([]int, 2*P)}
	b.Rows, b.SeqLen = 2*P, L
	b.Inputs, b.Targets, b.Positions = make([]int, 2*P*L), make([]int, 2*P*L), make([]int, 2*P*L)
	for r := range 2 * P {
		e := ps[r%P].Chosen
		if r >= P {
			e = ps[r%P].Rejected
		}
		in, tg, pos := b.Inputs[r*L:(r+1)*L], b.Targets[r*L:(r+1)*L], b.Positions[r*L:(r+1)*L]
		for t := range L {
			in[t], tg[t], pos[t] = padID, IgnoreIndex, t
			if t+1 < len(e.IDs) {
				in[t] = e.IDs[t]
				if e.Target[t+1] {
					tg[t] = e.IDs[t+1]
					b.Tokens[r]++
				}
			}
		}
		b.NumTargets += b.Tokens[r]
		if r < P {
			b.ChosenTokens += b.Tokens[r]
		}
	}
	if !slices.ContainsFunc(ps, func(p Pair) bool { return len(p.Reference) != 2 }) {
		b.Reference = make([]float64, 2*P)
		for i, p := range ps {
			b.Reference[i], b.Reference[P+i] = p.Reference[0], p.Reference[1]
		}
	}
	return b
}
