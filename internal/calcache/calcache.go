// Package calcache keeps measured choices between runs: which BLAS
// backend is fastest on this CPU, which tensor-core tile on this GPU. Each
// measurement is one JSON file under the user's cache directory, named by
// a hash of what the result depends on, and written whole or not at all,
// so that a machine keeps one choice and a change that could alter the
// answer (another library, driver or kernel) measures again.
package calcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mixtune/mixtune/internal/atomicfile"
)

// Mode says how a calibration uses its cache.
type Mode int

const (
	// Use reads a cached result for this key, or measures and writes one.
	Use Mode = iota
	// Refresh measures again and replaces the cached result.
	Refresh
	// Off measures and neither reads nor writes the cache.
	Off
)

// ParseMode reads a Mode from the value of the environment variable
// name: unset or "cache", "refresh", or "off".
func ParseMode(name, value string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(value)) {
	case "", "cache":
		return Use, nil
	case "refresh":
		return Refresh, nil
	case "off":
		return Off, nil
	}
	return Use, fmt.Errorf("%s=%q: want cache (the default), refresh (measure again and replace the cached choice) or off (measure, and read and write no cache)", name, value)
}

// Dir is dir, or the user's cache directory's mixtune/sub where dir is "".
func Dir(dir, sub string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "mixtune", sub), nil
}

// Key is the file name's hash of the fields a result depends on.
func Key(fields []string) string {
	h := sha256.Sum256([]byte(strings.Join(fields, "\n")))
	return hex.EncodeToString(h[:12])
}

// Read decodes the JSON file at path into v. A missing file is an error
// satisfying errors.Is(err, os.ErrNotExist); one that does not decode
// says "unreadable".
func Read(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("unreadable (%v)", err)
	}
	return nil
}

// Write writes v as indented JSON to path whole or not at all
// (atomicfile), so that a reader never sees half a file, making its
// directory first.
func Write(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'))
}
