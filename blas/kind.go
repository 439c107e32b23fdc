package blas

import (
	"fmt"
	"strings"
)

// Kind names a backend as recipes and flags spell it: auto, openblas,
// onednn, native or gonum. Parsing it checks the name, not whether the
// backend loads: Open does that.
type Kind string

// The backends Open knows.
const (
	KindAuto     Kind = "auto"
	KindOpenBLAS Kind = "openblas"
	KindOneDNN   Kind = "onednn"
	KindNative   Kind = "native"
	KindGonum    Kind = "gonum"
)

// UnmarshalText reads a backend name (case-insensitive; "go" is native).
func (k *Kind) UnmarshalText(b []byte) error {
	switch s := Kind(strings.ToLower(strings.TrimSpace(string(b)))); s {
	case "", KindAuto:
		*k = KindAuto
	case KindOpenBLAS, KindOneDNN, KindNative, KindGonum:
		*k = s
	case "go":
		*k = KindNative
	default:
		return fmt.Errorf("unknown matmul backend %q (want auto, openblas, onednn, native or gonum)", b)
	}
	return nil
}

// MarshalText writes the name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k), nil }

// String is the name.
func (k Kind) String() string { return string(k) }
