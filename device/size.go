package device

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnit returns the multiplier of a lower-cased unit. KB, MB, GB and TB
// are decimal as their SI names say; a bare K, M, G or T is binary, because
// GPU memory comes in binary sizes and "8G" should mean the 8 GiB a card
// reports.
func sizeUnit(u string) (float64, bool) {
	switch u {
	case "", "b":
		return 1, true
	case "k", "kib":
		return 1 << 10, true
	case "kb":
		return 1e3, true
	case "m", "mib":
		return 1 << 20, true
	case "mb":
		return 1e6, true
	case "g", "gib":
		return 1 << 30, true
	case "gb":
		return 1e9, true
	case "t", "tib":
		return 1 << 40, true
	case "tb":
		return 1e12, true
	}
	return 0, false
}

// ParseSize reads a memory size such as "8GiB", "500MB", "1.5G", "8 GiB" or
// a plain byte count "1073741824". Units are case-insensitive; KB/MB/GB/TB
// are powers of 1000, KiB/MiB/GiB/TiB and bare K/M/G/T powers of 1024. A
// fraction is rounded to the nearest byte; plain bytes must be whole.
func ParseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	end := len(t)
	for end > 0 && (t[end-1] < '0' || t[end-1] > '9') && t[end-1] != '.' {
		end--
	}
	num, unit := strings.TrimSpace(t[:end]), strings.ToLower(strings.TrimSpace(t[end:]))
	mult, ok := sizeUnit(unit)
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KB, MB, GB, TB, KiB, MiB, GiB, TiB, K, M, G or T)", s, strings.TrimSpace(t[end:]))
	}
	if num == "" {
		return 0, fmt.Errorf("size %q: no number", s)
	}
	if mult == 1 {
		n, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("size %q: want a whole number of bytes or a unit: %w", s, err)
		}
		return n, nil
	}
	for _, c := range num {
		// ParseFloat would also take "Inf", "1e3" and hex floats.
		if (c < '0' || c > '9') && c != '.' {
			return 0, fmt.Errorf("size %q: %q is not a decimal number", s, num)
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	b := math.Round(f * mult)
	if b >= 1<<64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return uint64(b), nil
}

// formatBytes prints a size in binary units with one decimal, the way
// nvidia-smi's MiB figures are usually read: "24.0 GiB", "512.0 MiB".
func formatBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n), 0
	for f >= 1<<10 && i < len(units)-1 {
		f /= 1 << 10
		i++
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// Size is a memory size in bytes that configs write as ParseSize reads it.
type Size uint64

// MarshalText writes the size in the largest binary unit that divides it
// exactly ("20GiB"), or in bytes, so it reads back to the same number.
func (s Size) MarshalText() ([]byte, error) {
	n := uint64(s)
	for _, u := range []struct {
		name string
		mult uint64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return []byte(fmt.Sprintf("%d%s", n/u.mult, u.name)), nil
		}
	}
	return []byte(strconv.FormatUint(n, 10)), nil
}

// UnmarshalText reads a size as ParseSize does; empty is 0.
func (s *Size) UnmarshalText(b []byte) error {
	if strings.TrimSpace(string(b)) == "" {
		*s = 0
		return nil
	}
	n, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}
