package calcache

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  Mode
		err   bool
	}{
		{"", Use, false}, {"cache", Use, false}, {" Cache ", Use, false},
		{"refresh", Refresh, false}, {"REFRESH", Refresh, false}, {"off", Off, false},
		{"1", Use, true}, {"force", Use, true},
	} {
		got, err := ParseMode("X_CALIBRATE", tc.value)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ParseMode(%q) = %v, %v; want %v (error %v)", tc.value, got, err, tc.want, tc.err)
		}
		if err != nil && !strings.Contains(err.Error(), "X_CALIBRATE") {
			t.Errorf("ParseMode(%q): %v does not name the variable", tc.value, err)
		}
	}
}

// TestReadWrite: what Write wrote, Read reads back, into a directory
// Write makes; a missing file is os.ErrNotExist and a broken one says it
// is unreadable; keys differ with their fields and their order.
func TestReadWrite(t *testing.T) {
	type rec struct {
		Key   string  `json:"key"`
		Value float64 `json:"value"`
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "a.json")
	var got rec
	if err := Read(path, &got); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read of a missing file: %v", err)
	}
	if err := Write(path, rec{"k", 1.5}); err != nil {
		t.Fatal(err)
	}
	if err := Read(path, &got); err != nil || got != (rec{"k", 1.5}) {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	if err := os.WriteFile(path, []byte("{half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Read(path, &got); err == nil || !strings.Contains(err.Error(), "unreadable") {
		t.Fatalf("Read of a broken file: %v", err)
	}
	if Key([]string{"a", "b"}) == Key([]string{"b", "a"}) || Key([]string{"a"}) == Key([]string{"a", ""}) {
		t.Error("keys of different fields collide")
	}
	if d, err := Dir("", "gpu"); err == nil && filepath.Base(d) != "gpu" {
		t.Errorf("Dir = %s", d)
	}
	if d, _ := Dir(dir, "gpu"); d != dir {
		t.Errorf("Dir(%s) = %s", dir, d)
	}
}
