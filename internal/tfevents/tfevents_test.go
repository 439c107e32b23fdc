package tfevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// frames splits a TFRecord stream by its own reading of the format,
// checking both checksums with a CRC32C computed here, not by the package.
func frames(t *testing.T, b []byte) [][]byte {
	t.Helper()
	tab := crc32.MakeTable(crc32.Castagnoli)
	mask := func(p []byte) uint32 {
		c := crc32.Checksum(p, tab)
		return ((c >> 15) | (c << 17)) + 0xa282ead8
	}
	var out [][]byte
	for len(b) > 0 {
		if len(b) < 16 {
			t.Fatalf("%d trailing bytes", len(b))
		}
		n := binary.LittleEndian.Uint64(b[:8])
		if got, want := binary.LittleEndian.Uint32(b[8:12]), mask(b[:8]); got != want {
			t.Fatalf("record %d: length crc %#x, want %#x", len(out), got, want)
		}
		if uint64(len(b)) < 16+n {
			t.Fatalf("record %d: length %d past the end", len(out), n)
		}
		data := b[12 : 12+n]
		if got, want := binary.LittleEndian.Uint32(b[12+n:16+n]), mask(data); got != want {
			t.Fatalf("record %d: data crc %#x, want %#x", len(out), got, want)
		}
		out = append(out, data)
		b = b[16+n:]
	}
	return out
}

// decodeRaw is protoc --decode_raw's reading of one message.
func decodeRaw(t *testing.T, protoc string, msg []byte) string {
	t.Helper()
	cmd := exec.Command(protoc, "--decode_raw")
	cmd.Stdin = bytes.NewReader(msg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("protoc --decode_raw: %v: %s", err, stderr.String())
	}
	return string(out)
}

// rawText is what protoc --decode_raw prints for e: fixed64 and fixed32
// fields in hex, proto3 defaults left out.
func rawText(e Event) string {
	var s strings.Builder
	fmt.Fprintf(&s, "1: 0x%016x\n", math.Float64bits(e.WallTime))
	if e.Step != 0 {
		fmt.Fprintf(&s, "2: %d\n", e.Step)
	}
	if e.FileVersion != "" {
		fmt.Fprintf(&s, "3: %q\n", e.FileVersion)
	}
	if len(e.Values) > 0 {
		s.WriteString("5 {\n")
		for _, v := range e.Values {
			fmt.Fprintf(&s, "  1 {\n    1: %q\n    2: 0x%08x\n  }\n", v.Tag, math.Float32bits(v.Scalar))
		}
		s.WriteString("}\n")
	}
	return s.String()
}

func TestEventsReadByProtoc(t *testing.T) {
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc is not installed (Debian: apt-get install protobuf-compiler): the records are checked only by this test's own framing reader")
	}
	t0 := time.Unix(1764100000, 250_000_000)
	tests := []struct {
		name   string
		events []Event
	}{
		{"version only", nil},
		{"one scalar", []Event{{WallTime: 1764100001.5, Step: 10, Values: []Value{{"train/loss", 2.5}}}}},
		{"a step's scalars", []Event{{WallTime: 1764100002, Step: 20, Values: []Value{
			{"train/loss", 1.75}, {"train/lr", 2e-4}, {"train/grad_norm", 0.31}, {"train/tokens_per_s", 12345},
			{"train/loss_scale", 65536}}}}},
		{"step 0 and large steps", []Event{
			{WallTime: 1764100003, Step: 0, Values: []Value{{"val/loss", 3.25}}},
			{WallTime: 1764100004, Step: 1 << 40, Values: []Value{{"val/loss", 0.5}}}}},
		{"non-finite values", []Event{{WallTime: 1764100005, Step: 7, Values: []Value{
			{"train/loss", float32(math.NaN())}, {"train/grad_norm", float32(math.Inf(1))}, {"train/x", float32(math.Inf(-1))}}}}},
		{"task accuracy", []Event{{WallTime: 1764100006, Step: 100, Values: []Value{{"task/accuracy", 0.875}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Create(dir, t0, "host-a")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range tc.events {
				if err := w.Write(e); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if got, want := filepath.Base(w.Path()), "events.out.tfevents.1764100000.host-a"; got != want {
				t.Fatalf("file name %q, want %q", got, want)
			}
			b, err := os.ReadFile(w.Path())
			if err != nil {
				t.Fatal(err)
			}
			recs := frames(t, b)
			want := append([]Event{{WallTime: 1764100000.25, FileVersion: "brain.Event:2"}}, tc.events...)
			if len(recs) != len(want) {
				t.Fatalf("%d records, want %d", len(recs), len(want))
			}
			for i, rec := range recs {
				if got, w := decodeRaw(t, protoc, rec), rawText(want[i]); got != w {
					t.Errorf("record %d: protoc --decode_raw printed\n%s\nwant\n%s", i, got, w)
				}
			}
		})
	}
}

// Read gives back what was written, and keeps the whole records of a
// file cut short or damaged.
func TestReadKeepsWholeRecords(t *testing.T) {
	events := []Event{
		{WallTime: 1, Step: 1, Values: []Value{{"train/loss", 2}}},
		{WallTime: 2, Step: 2, Values: []Value{{"train/loss", 1}, {"val/loss", 1.5}}},
	}
	file := Encode(100, events)
	whole := append([]Event{{WallTime: 100, FileVersion: Version}}, events...)
	last := len(file) - len(AppendRecord(nil, events[1].Marshal()))
	flip := func(i int) []byte {
		b := bytes.Clone(file)
		b[i] ^= 1
		return b
	}
	tests := []struct {
		name    string
		file    []byte
		want    []Event
		corrupt bool
	}{
		{"whole", file, whole, false},
		{"empty", nil, nil, false},
		{"cut in the last header", file[:last+5], whole[:2], true},
		{"cut in the last data", file[:len(file)-6], whole[:2], true},
		{"last length crc damaged", flip(last + 9), whole[:2], true},
		{"last data damaged", flip(last + 14), whole[:2], true},
		{"first length damaged", flip(0), nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(bytes.NewReader(tc.file))
			if tc.corrupt != errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v, corrupt %v", err, tc.corrupt)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("read %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Files lists only event files, in name order, and nothing for a missing
// directory.
func TestFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"events.out.tfevents.2.h", "other.txt", "events.out.tfevents.1.h"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "events.out.tfevents.1.h"), filepath.Join(dir, "events.out.tfevents.2.h")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q, want %q", got, want)
	}
	if got, err := Files(filepath.Join(dir, "missing")); got != nil || err != nil {
		t.Fatalf("missing dir: %q, %v", got, err)
	}
}
