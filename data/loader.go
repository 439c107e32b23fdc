package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
)

// Mode says how a Loader lays examples out in rows.
type Mode int

const (
	// Pad puts each example in its own row, truncated to SeqLen+1 tokens
	// and padded with PadID.
	Pad Mode = iota
	// Pack concatenates examples into one stream and cuts it into rows,
	// wasting no compute on padding. Tokens may attend across example
	// boundaries within a row; the targets still never ask the model to
	// predict the first token of an example from the previous one unless
	// that token is marked as a target.
	Pack
)

// String returns "pad" or "pack".
func (m Mode) String() string {
	switch m {
	case Pad:
		return "pad"
	case Pack:
		return "pack"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode reads a mode name as String writes it, ignoring case.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "pad":
		return Pad, nil
	case "pack":
		return Pack, nil
	}
	return 0, fmt.Errorf("data: unknown mode %q (want \"pad\" or \"pack\")", s)
}

// Batch is one [Rows x SeqLen] micro-batch in row-major order:
// Inputs[r*SeqLen+t] predicts Targets[r*SeqLen+t]; Targets is IgnoreIndex
// where there is no loss. NumTargets counts the non-ignored targets, the
// divisor of a mean loss over the batch.
type Batch struct {
	Rows, SeqLen int
	Inputs       []int
	Targets      []int
	NumTargets   int
}

// LoaderConfig configures a Loader.
type LoaderConfig struct {
	SeqLen    int  // tokens per row the model sees; a row consumes SeqLen+1 tokens
	BatchSize int  // rows per batch
	Mode      Mode // Pad or Pack
	Shuffle   bool // reshuffle the examples every epoch
	Seed      uint64
	// DropLast makes Next skip an epoch's last batch when it would be
	// short. Without it the short batch is filled with padding rows.
	DropLast bool
	// PadID is the input id of padding positions, normally the
	// tokenizer's PAD. Its targets are always IgnoreIndex.
	PadID int
}

// LoaderState is the position of a Loader: the batch Next returns next is
// batch Step of epoch Epoch. Fingerprint identifies the examples and the
// configuration, so that a state cannot be restored into a loader that would
// yield different batches.
type LoaderState struct {
	Epoch       int    `json:"epoch"`
	Step        int    `json:"step"`
	Fingerprint uint64 `json:"fingerprint"`
}

// Stats describes a Loader's data, for logs and sanity checks.
type Stats struct {
	Examples  int // examples given to NewLoader
	Rows      int // rows per epoch
	Truncated int // Pad mode: examples longer than SeqLen+1 tokens, whose tail is never seen
	EmptyRows int // Pad mode: rows left with no target, e.g. a prompt longer than SeqLen
	Tokens    int // tokens in all examples, before truncation
	// TargetTokens is the number of targets one pass of Batches yields:
	// the sum of their NumTargets.
	TargetTokens int
}

// Loader cuts examples into batches. Next yields an endless sequence of
// training batches, epoch after epoch; Batches yields one ordered pass for
// evaluation. A Loader is not safe for concurrent use. It keeps, and does
// not copy, the examples' IDs and Target slices: do not modify them.
type Loader struct {
	ex    []Example
	cfg   LoaderConfig
	rows  int // rows per epoch
	steps int // batches per epoch yielded by Next
	total int // tokens in all examples
	stats Stats
	fp    uint64

	epoch, step int
	plan        *plan // order of l.epoch; nil until needed
}

// plan is the row layout of one epoch.
type plan struct {
	epoch int
	order []int // example indices in epoch order
	// offsets[i] is where example order[i] starts in the packed stream;
	// offsets[len(order)] is the stream length. Pack mode only.
	offsets []int
}

// NewLoader checks cfg and ex and returns a Loader positioned at the start of
// epoch 0.
func NewLoader(ex []Example, cfg LoaderConfig) (*Loader, error) {
	switch {
	case cfg.SeqLen < 1:
		return nil, fmt.Errorf("data: SeqLen is %d; it must be at least 1", cfg.SeqLen)
	case cfg.BatchSize < 1:
		return nil, fmt.Errorf("data: BatchSize is %d; it must be at least 1", cfg.BatchSize)
	case cfg.Mode != Pad && cfg.Mode != Pack:
		return nil, fmt.Errorf("data: unknown mode %v", cfg.Mode)
	case cfg.PadID < 0:
		return nil, fmt.Errorf("data: PadID is %d; it must not be negative", cfg.PadID)
	case len(ex) == 0:
		return nil, errors.New("data: loader has no examples")
	}
	total := 0
	for i, e := range ex {
		if len(e.IDs) == 0 {
			return nil, fmt.Errorf("data: %s has no tokens", describe(i, e))
		}
		if len(e.IDs) != len(e.Target) {
			return nil, fmt.Errorf("data: %s has %d IDs but %d Target flags", describe(i, e), len(e.IDs), len(e.Target))
		}
		total += len(e.IDs)
	}

	l := &Loader{ex: append([]Example(nil), ex...), cfg: cfg, total: total}
	L := cfg.SeqLen
	if cfg.Mode == Pad {
		l.rows = len(ex)
	} else {
		// Rows overlap by one token, so the stream's total-1
		// predictions fill ceil((total-1)/L) rows.
		l.rows = (total - 1 + L - 1) / L
		if l.rows == 0 {
			return nil, errors.New("data: Pack mode needs at least 2 tokens in all")
		}
	}
	l.steps = (l.rows + cfg.BatchSize - 1) / cfg.BatchSize
	if cfg.DropLast {
		l.steps = l.rows / cfg.BatchSize
		if l.steps == 0 {
			return nil, fmt.Errorf("data: %d rows are fewer than BatchSize %d and DropLast is set", l.rows, cfg.BatchSize)
		}
	}
	l.stats = l.computeStats()
	l.fp = l.fingerprint()
	return l, nil
}

func describe(i int, e Example) string {
	if e.Line > 0 {
		return fmt.Sprintf("example %d (line %d)", i, e.Line)
	}
	return fmt.Sprintf("example %d", i)
}

func (l *Loader) computeStats() Stats {
	s := Stats{Examples: len(l.ex), Rows: l.rows, Tokens: l.total}
	L := l.cfg.SeqLen
	if l.cfg.Mode == Pad {
		for _, e := range l.ex {
			if len(e.IDs) > L+1 {
				s.Truncated++
			}
			n := 0
			for _, t := range e.Target[1:min(len(e.Target), L+1)] {
				if t {
					n++
				}
			}
			if n == 0 {
				s.EmptyRows++
			}
			s.TargetTokens += n
		}
		return s
	}
	for _, e := range l.ex {
		for _, t := range e.Target {
			if t {
				s.TargetTokens++
			}
		}
	}
	// The first token of the stream is never predicted.
	if l.ex[0].Target[0] {
		s.TargetTokens--
	}
	return s
}

// fingerprint hashes everything that determines the batch sequence.
func (l *Loader) fingerprint() uint64 {
	h := fnv.New64a()
	buf := make([]byte, 0, 64)
	put := func(v uint64) { buf = binary.LittleEndian.AppendUint64(buf, v) }
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	c := l.cfg
	put(uint64(c.SeqLen))
	put(uint64(c.BatchSize))
	put(uint64(c.Mode))
	put(b2u(c.Shuffle))
	put(c.Seed)
	put(b2u(c.DropLast))
	put(uint64(c.PadID))
	put(uint64(len(l.ex)))
	for _, e := range l.ex {
		put(uint64(len(e.IDs)))
		for i, id := range e.IDs {
			put(uint64(id)<<1 | b2u(e.Target[i]))
			if len(buf) == cap(buf) {
				h.Write(buf)
				buf = buf[:0]
			}
		}
	}
	h.Write(buf)
	return h.Sum64()
}

// Next returns the next training batch. At the end of an epoch it moves on to
// the next one, reshuffled when Shuffle is set. Every batch has BatchSize
// rows; a short last batch (only without DropLast) is filled with padding
// rows whose targets are all IgnoreIndex.
func (l *Loader) Next() Batch {
	if l.plan == nil || l.plan.epoch != l.epoch {
		l.plan = l.makePlan(l.epoch)
	}
	b := l.batch(l.plan, l.step)
	l.step++
	if l.step == l.steps {
		l.epoch++
		l.step = 0
	}
	return b
}

// Epoch returns the epoch of the batch Next returns next, which is also the
// number of epochs completed.
func (l *Loader) Epoch() int { return l.epoch }

// StepsPerEpoch returns the number of batches Next yields per epoch.
func (l *Loader) StepsPerEpoch() int { return l.steps }

// Stats describes the loader's data.
func (l *Loader) Stats() Stats { return l.stats }

// State returns the loader's position, to be stored in a checkpoint.
func (l *Loader) State() LoaderState {
	return LoaderState{Epoch: l.epoch, Step: l.step, Fingerprint: l.fp}
}

// Restore moves the loader to s, as returned by State of a loader with the
// same examples and configuration. Because each epoch's order depends only on
// the seed and the epoch number, the batches that follow are exactly those
// the saving loader would have produced.
func (l *Loader) Restore(s LoaderState) error {
	switch {
	case s.Fingerprint != l.fp:
		return fmt.Errorf("data: loader state is for different data or configuration (fingerprint %016x, loader has %016x)", s.Fingerprint, l.fp)
	case s.Epoch < 0:
		return fmt.Errorf("data: loader state has epoch %d", s.Epoch)
	case s.Step < 0 || s.Step >= l.steps:
		return fmt.Errorf("data: loader state has step %d; an epoch has steps 0 to %d", s.Step, l.steps-1)
	}
	l.epoch, l.step = s.Epoch, s.Step
	return nil
}

// Batches returns one pass over the examples in their given order, without
// shuffling and without dropping the last batch, which is filled with
// padding rows if short. It is meant for validation and does not move the
// loader.
func (l *Loader) Batches() []Batch {
	p := l.layout(identity(len(l.ex)))
	n := (l.rows + l.cfg.BatchSize - 1) / l.cfg.BatchSize
	out := make([]Batch, n)
	for i := range out {
		out[i] = l.batch(p, i)
	}
	return out
}

func identity(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// makePlan returns the layout of the given epoch.
func (l *Loader) makePlan(epoch int) *plan {
	var order []int
	if l.cfg.Shuffle {
		order = permutation(len(l.ex), l.cfg.Seed, splitmix64(loaderSalt^uint64(epoch)))
	} else {
		order = identity(len(l.ex))
	}
	p := l.layout(order)
	p.epoch = epoch
	return p
}

func (l *Loader) layout(order []int) *plan {
	p := &plan{order: order}
	if l.cfg.Mode == Pack {
		p.offsets = make([]int, len(order)+1)
		for i, k := range order {
			p.offsets[i+1] = p.offsets[i] + len(l.ex[k].IDs)
		}
	}
	return p
}

// batch builds batch step of the layout p.
func (l *Loader) batch(p *plan, step int) Batch {
	B, L := l.cfg.BatchSize, l.cfg.SeqLen
	b := Batch{
		Rows:    B,
		SeqLen:  L,
		Inputs:  make([]int, B*L),
		Targets: make([]int, B*L),
	}
	var ids []int
	var flags []bool
	if l.cfg.Mode == Pack {
		ids, flags = make([]int, L+1), make([]bool, L+1)
	}
	for r := range B {
		in, tg := b.Inputs[r*L:(r+1)*L], b.Targets[r*L:(r+1)*L]
		row := step*B + r
		var n int // tokens of the row, at most L+1
		switch {
		case row >= l.rows:
			n = 0
		case l.cfg.Mode == Pad:
			e := l.ex[p.order[row]]
			n = min(len(e.IDs), L+1)
			ids, flags = e.IDs[:n], e.Target[:n]
		default:
			n = l.packedRow(p, row*L, ids, flags)
		}
		for t := range L {
			in[t], tg[t] = l.cfg.PadID, IgnoreIndex
			if t < n {
				in[t] = ids[t]
			}
			if t+1 < n && flags[t+1] {
				tg[t] = ids[t+1]
				b.NumTargets++
			}
		}
	}
	return b
}

// packedRow copies up to len(ids) tokens of the packed stream of p, starting
// at position start, into ids and flags and returns how many it copied.
func (l *Loader) packedRow(p *plan, start int, ids []int, flags []bool) int {
	// k is the example holding position start: the last offset <= start.
	k := sort.SearchInts(p.offsets, start+1) - 1
	n := 0
	for pos := start; n < len(ids) && k < len(p.order); k++ {
		e := l.ex[p.order[k]]
		j := pos - p.offsets[k]
		c := copy(ids[n:], e.IDs[j:])
		copy(flags[n:], e.Target[j:j+c])
		n += c
		pos += c
	}
	return n
}

// MarshalText writes "pad" or "pack".
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText reads a mode as ParseMode does.
func (m *Mode) UnmarshalText(b []byte) error {
	switch strings.ToLower(strings.TrimSpace(string(b))) {
	case "pad":
		*m = Pad
	case "pack":
		*m = Pack
	default:
		return fmt.Errorf("must be pad or pack, got %q", b)
	}
	return nil
}
