package amp

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Class says how an op chooses its compute format, as PyTorch autocast's
// op lists do.
type Class uint8

const (
	LowPrecision  Class = iota // runs in the policy's compute format (bf16 or fp16)
	FullPrecision              // always runs in fp32
	Promote                    // runs in the widest format among its inputs
)

func (c Class) String() string {
	switch c {
	case LowPrecision:
		return "low_precision"
	case FullPrecision:
		return "fp32"
	}
	return "promote"
}

// opKinds are the op kinds a policy classifies, with what each computes:
// every computation of the Llama graph is one of them. Never written;
// OpNames and IsOp read it.
var opKinds = map[string]string{
	"linear":           "matmul of activations with a weight (projections, adapters, LM head)",
	"attention_scores": "Q·Kᵀ/√d inside attention",
	"attention_values": "softmax(scores)·V inside attention",
	"softmax":          "softmax of attention scores (statistics and exp)",
	"rmsnorm":          "RMSNorm statistics and scaling",
	"rope":             "rotary position embedding (its cos/sin tables are fp32 regardless)",
	"silu":             "SiLU gate of the MLP (exp)",
	"cross_entropy":    "log-softmax and the loss (exp/log and a reduction)",
	"add":              "residual and adapter sums",
}

// Policy is a compute format and the op lists.
type Policy struct {
	Low     Format   // the low-precision format; FP32 turns mixed precision off
	LowOps  []string // ops that run in Low
	FP32Ops []string // ops that always run in fp32
	Promote []string // ops that take the widest input format
}

// DefaultPolicy follows PyTorch's CUDA autocast lists: matmuls in low
// precision; softmax, exp/log, normalization statistics and the loss in
// fp32; sums in the widest input format.
func DefaultPolicy(low Format) Policy {
	return Policy{
		Low:     low,
		LowOps:  []string{"linear", "attention_scores", "attention_values"},
		FP32Ops: []string{"softmax", "rmsnorm", "rope", "silu", "cross_entropy"},
		Promote: []string{"add"},
	}
}

// Class returns how op computes. Validate guarantees every op is listed.
func (p Policy) Class(op string) Class {
	switch {
	case slices.Contains(p.LowOps, op):
		return LowPrecision
	case slices.Contains(p.Promote, op):
		return Promote
	}
	return FullPrecision
}

// Format is the format op computes in, given its inputs' formats.
func (p Policy) Format(op string, inputs ...Format) Format {
	switch p.Class(op) {
	case LowPrecision:
		return p.Low
	case Promote:
		return Widest(inputs...)
	}
	return FP32
}

// Move puts op in the list for class c, as a config's override does.
func (p *Policy) Move(op string, c Class) error {
	if !IsOp(op) {
		return unknownOp(op)
	}
	drop := func(l []string) []string {
		return slices.DeleteFunc(slices.Clone(l), func(s string) bool { return s == op })
	}
	p.LowOps, p.FP32Ops, p.Promote = drop(p.LowOps), drop(p.FP32Ops), drop(p.Promote)
	switch c {
	case LowPrecision:
		p.LowOps = append(p.LowOps, op)
	case FullPrecision:
		p.FP32Ops = append(p.FP32Ops, op)
	default:
		p.Promote = append(p.Promote, op)
	}
	return nil
}

// Validate checks that every op is in exactly one list and no list names
// an unknown op.
func (p Policy) Validate() error {
	seen := map[string]string{}
	for _, l := range []struct {
		name string
		ops  []string
	}{{"low_precision", p.LowOps}, {"fp32", p.FP32Ops}, {"promote", p.Promote}} {
		for _, op := range l.ops {
			if !IsOp(op) {
				return fmt.Errorf("%s: %w", l.name, unknownOp(op))
			}
			if prev, dup := seen[op]; dup {
				return fmt.Errorf("op %q is in both %s and %s", op, prev, l.name)
			}
			seen[op] = l.name
		}
	}
	for _, op := range OpNames() {
		if _, ok := seen[op]; !ok {
			return fmt.Errorf("op %q is in no list", op)
		}
	}
	return nil
}

// OpNames lists the op kinds in sorted order.
func OpNames() []string {
	names := make([]string, 0, len(opKinds))
	for n := range opKinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// IsOp reports whether op is an op kind a policy classifies.
func IsOp(op string) bool {
	_, ok := opKinds[op]
	return ok
}

func unknownOp(op string) error {
	return fmt.Errorf("unknown op %q (known: %s)", op, strings.Join(OpNames(), ", "))
}

// Moves are changes to a policy's op lists, as a recipe spells them: the
// ops to put in each class's list.
type Moves struct {
	LowPrecision, FullPrecision, Promote []string
}

// MoveError is a move that cannot be made: an unknown op, or an op that
// another list already moves.
type MoveError struct {
	Class Class // the list that names the op
	Index int   // the op's index in that list
	Err   error
}

func (e *MoveError) Error() string { return fmt.Sprintf("%s[%d]: %v", e.Class, e.Index, e.Err) }
func (e *MoveError) Unwrap() error { return e.Err }

// lists are the moves by class, in the order they are made.
func (m Moves) lists() []struct {
	c   Class
	ops []string
} {
	return []struct {
		c   Class
		ops []string
	}{{LowPrecision, m.LowPrecision}, {FullPrecision, m.FullPrecision}, {Promote, m.Promote}}
}

// Check lists every move that cannot be made, in list order: each op must
// exist and be moved once.
func (m Moves) Check() []*MoveError {
	var errs []*MoveError
	movedBy := map[string]Class{}
	for _, l := range m.lists() {
		for i, op := range l.ops {
			if !IsOp(op) {
				errs = append(errs, &MoveError{l.c, i, unknownOp(op)})
			} else if prev, dup := movedBy[op]; dup {
				errs = append(errs, &MoveError{l.c, i, fmt.Errorf("op %q is already moved to %s", op, prev)})
			}
			movedBy[op] = l.c
		}
	}
	return errs
}

// Apply returns p with every move made, or the moves that cannot be made
// (Check), joined.
func (m Moves) Apply(p Policy) (Policy, error) {
	if errs := m.Check(); len(errs) > 0 {
		joined := make([]error, len(errs))
		for i, e := range errs {
			joined[i] = e
		}
		return p, errors.Join(joined...)
	}
	for _, l := range m.lists() {
		for _, op := range l.ops {
			if err := p.Move(op, l.c); err != nil {
				return p, err
			}
		}
	}
	return p, p.Validate()
}

// Widest is the format that represents all of fs exactly: fp32 if any is
// fp32 or formats are mixed, else the common one.
func Widest(fs ...Format) Format {
	if len(fs) == 0 {
		return FP32
	}
	w := fs[0]
	for _, f := range fs[1:] {
		if f != w {
			return FP32
		}
	}
	return w
}

// String prints the three lists, for run manifests and `mixtune train --print-policy`.
func (p Policy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "compute format: %s\n", p.Low)
	for _, l := range []struct {
		name string
		ops  []string
	}{{"low precision (" + p.Low.String() + ")", p.LowOps}, {"fp32", p.FP32Ops}, {"promote (widest input)", p.Promote}} {
		ops := slices.Clone(l.ops)
		sort.Strings(ops)
		fmt.Fprintf(&b, "  %-24s %s\n", l.name+":", strings.Join(ops, ", "))
	}
	return b.String()
}
