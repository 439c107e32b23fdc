package data

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
)

// Mode says how a Loader lays examples out in rows.
type Mode int

const (
	// Pad puts each example in its own row, truncated to SeqLen+1 tokens
	// and padded with PadID.
	Pad Mode = iota
	// Pack puts as many examples in a row as fit, in order, and pads the
	// rest. Each example attends only to itself (Batch.Positions restart
	// at 0 for it), so a packed row computes exactly what its examples
	// would in rows of their own, with less padding. An example longer
	// than a row is cut into pieces of SeqLen+1 tokens that overlap by
	// one, so that every token but its first is still a target once; each
	// piece attends only to itself.
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
// divisor of a mean loss over the batch. Positions[i] is the position of
// input i in its example: the model's rotary position, and the number of
// tokens before it that it may attend to (a packed row holds several
// examples, each attending only to itself; padding after them forms a
// document of its own).
type Batch struct {
	Rows, SeqLen int
	Inputs       []int
	Targets      []int
	Positions    []int
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
	rows  [][]piece // what each row holds, in order
	steps int       // batches per epoch yielded by Next
	stats Stats
	fp    uint64

	epoch, step int
	plan        *plan // order of l.epoch; nil until needed
}

// piece is the tokens [off, off+n) of example ex, laid out in a row:
// inputs ids[off..off+n-2], targets ids[off+1..off+n-1].
type piece struct{ ex, off, n int }

// plan is the row order of one epoch: rows are fixed when the loader is
// made, and an epoch shuffles them.
type plan struct {
	epoch int
	order []int // row indices in epoch order
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

	l := &Loader{ex: append([]Example(nil), ex...), cfg: cfg}
	l.rows = layoutRows(l.ex, cfg)
	l.steps = (len(l.rows) + cfg.BatchSize - 1) / cfg.BatchSize
	if cfg.DropLast {
		l.steps = len(l.rows) / cfg.BatchSize
		if l.steps == 0 {
			return nil, fmt.Errorf("data: %d rows are fewer than BatchSize %d and DropLast is set", len(l.rows), cfg.BatchSize)
		}
	}
	l.stats = l.computeStats(total)
	l.fp = l.fingerprint()
	return l, nil
}

// layoutRows decides what each row holds. In Pad mode: one example, its
// first SeqLen+1 tokens. In Pack mode: pieces of at most SeqLen+1 tokens
// (a whole example, or a cut of a longer one), in order, as many as fit;
// a piece of n tokens fills n-1 input slots, its last token being only a
// target.
func layoutRows(ex []Example, cfg LoaderConfig) [][]piece {
	L := cfg.SeqLen
	rows := make([][]piece, 0, len(ex))
	if cfg.Mode == Pad {
		for i, e := range ex {
			rows = append(rows, []piece{{i, 0, min(len(e.IDs), L+1)}})
		}
		return rows
	}
	used := L // slots taken in the last row: none open yet
	for i, e := range ex {
		for off := 0; off == 0 || off+1 < len(e.IDs); off += L {
			p := piece{i, off, min(len(e.IDs)-off, L+1)}
			slots := max(p.n-1, 1)
			if used+slots > L {
				rows = append(rows, nil)
				used = 0
			}
			rows[len(rows)-1] = append(rows[len(rows)-1], p)
			used += slots
		}
	}
	return rows
}

func describe(i int, e Example) string {
	if e.Line > 0 {
		return fmt.Sprintf("example %d (line %d)", i, e.Line)
	}
	return fmt.Sprintf("example %d", i)
}

func (l *Loader) computeStats(total int) Stats {
	s := Stats{Examples: len(l.ex), Rows: len(l.rows), Tokens: total}
	targets := make([]int, len(l.ex))
	for _, row := range l.rows {
		for _, p := range row {
			for _, t := range l.ex[p.ex].Target[p.off+1 : p.off+p.n] {
				if t {
					targets[p.ex]++
				}
			}
		}
	}
	for i, e := range l.ex {
		if l.cfg.Mode == Pad && len(e.IDs) > l.cfg.SeqLen+1 {
			s.Truncated++
		}
		if targets[i] == 0 {
			s.EmptyRows++
		}
		s.TargetTokens += targets[i]
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

// Batches returns one pass over the rows in their given order, without
// shuffling and without dropping the last batch, which is filled with
// padding rows if short. It is meant for validation and does not move the
// loader.
func (l *Loader) Batches() []Batch {
	p := &plan{order: identity(len(l.rows))}
	n := (len(l.rows) + l.cfg.BatchSize - 1) / l.cfg.BatchSize
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

// makePlan returns the row order of the given epoch.
func (l *Loader) makePlan(epoch int) *plan {
	order := identity(len(l.rows))
	if l.cfg.Shuffle {
		order = permutation(len(l.rows), l.cfg.Seed, splitmix64(loaderSalt^uint64(epoch)))
	}
	return &plan{epoch: epoch, order: order}
}

// batch builds batch step of the order p.
func (l *Loader) batch(p *plan, step int) Batch {
	B, L := l.cfg.BatchSize, l.cfg.SeqLen
	b := Batch{Rows: B, SeqLen: L, Inputs: make([]int, B*L), Targets: make([]int, B*L), Positions: make([]int, B*L)}
	for r := range B {
		in, tg, pos := b.Inputs[r*L:(r+1)*L], b.Targets[r*L:(r+1)*L], b.Positions[r*L:(r+1)*L]
		slot := 0
		if row := step*B + r; row < len(l.rows) {
			for _, pc := range l.rows[p.order[row]] {
				ids, flags := l.ex[pc.ex].IDs[pc.off:pc.off+pc.n], l.ex[pc.ex].Target[pc.off:pc.off+pc.n]
				for t := 0; t < max(pc.n-1, 1); t++ {
					in[slot], tg[slot], pos[slot] = ids[t], IgnoreIndex, t
					if t+1 < pc.n && flags[t+1] {
						tg[slot] = ids[t+1]
						b.NumTargets++
					}
					slot++
				}
			}
		}
		for t := slot; t < L; t++ { // padding: a document of its own
			in[t], tg[t], pos[t] = l.cfg.PadID, IgnoreIndex, t-slot
		}
	}
	return b
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
