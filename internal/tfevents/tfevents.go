// Package tfevents writes and reads TensorBoard event files: TFRecord
// streams of Event protobufs holding scalar summaries. The three messages
// involved are small, so they are encoded by hand rather than through a
// protobuf library:
//
//	Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//	Summary { repeated Value value = 1; }
//	Value   { string tag = 1; float simple_value = 2; }
//
// Each record is framed as a little-endian uint64 length, the masked
// CRC32C of those 8 bytes, the data, and the masked CRC32C of the data.
// A file starts with an Event whose file_version is "brain.Event:2", and
// is named events.out.tfevents.<unix seconds>.<host>.
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Version is the file_version of a file's first event.
const Version = "brain.Event:2"

// FilePrefix starts every event file's name.
const FilePrefix = "events.out.tfevents."

// Value is one scalar of an event's summary.
type Value struct {
	Tag    string
	Scalar float32
}

// Event is one record: the version record (FileVersion set) or a step's
// scalars.
type Event struct {
	WallTime    float64 // seconds since the Unix epoch
	Step        int64
	FileVersion string
	Values      []Value
}

// Field numbers and wire types of the messages above.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5

	eventWallTime    = 1
	eventStep        = 2
	eventFileVersion = 3
	eventSummary     = 5
	summaryValue     = 1
	valueTag         = 1
	valueSimpleValue = 2
)

// Marshal encodes e as an Event protobuf.
func (e Event) Marshal() []byte {
	var b []byte
	b = appendTag(b, eventWallTime, wireFixed64)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(e.WallTime))
	if e.Step != 0 {
		b = appendTag(b, eventStep, wireVarint)
		b = binary.AppendUvarint(b, uint64(e.Step))
	}
	if e.FileVersion != "" {
		b = appendBytes(b, eventFileVersion, []byte(e.FileVersion))
	}
	if len(e.Values) > 0 {
		var sum []byte
		for _, v := range e.Values {
			var val []byte
			val = appendBytes(val, valueTag, []byte(v.Tag))
			val = appendTag(val, valueSimpleValue, wireFixed32)
			val = binary.LittleEndian.AppendUint32(val, math.Float32bits(v.Scalar))
			sum = appendBytes(sum, summaryValue, val)
		}
		b = appendBytes(b, eventSummary, sum)
	}
	return b
}

func appendTag(b []byte, field, wire int) []byte {
	return binary.AppendUvarint(b, uint64(field<<3|wire))
}

func appendBytes(b []byte, field int, data []byte) []byte {
	b = appendTag(b, field, wireBytes)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's masked CRC32C of b.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// AppendRecord appends data framed as one TFRecord to dst.
func AppendRecord(dst, data []byte) []byte {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(data)))
	dst = append(dst, n[:]...)
	dst = binary.LittleEndian.AppendUint32(dst, MaskedCRC(n[:]))
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// Encode is a whole event file: the version record, stamped with
// wallTime, then events.
func Encode(wallTime float64, events []Event) []byte {
	b := AppendRecord(nil, Event{WallTime: wallTime, FileVersion: Version}.Marshal())
	for _, e := range events {
		b = AppendRecord(b, e.Marshal())
	}
	return b
}

// FileName is the name TensorBoard looks for: events.out.tfevents.<unix>.<host>.
func FileName(t time.Time, host string) string {
	return fmt.Sprintf("%s%d.%s", FilePrefix, t.Unix(), host)
}

// Writer appends events to one file, each written through to the file at
// once so that a crash loses at most the record being written.
type Writer struct {
	f   *os.File
	err error
}

// Create starts a new event file in dir (created if missing), named for t
// and host, with its version record.
func Create(dir string, t time.Time, host string) (*Writer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	path := filepath.Join(dir, FileName(t, host))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	w := &Writer{f: f}
	if _, err := f.Write(Encode(WallTime(t), nil)); err != nil {
		f.Close()
		return nil, fmt.Errorf("tensorboard: write %s: %w", path, err)
	}
	return w, nil
}

// Append opens an existing event file to add events at its end.
func Append(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	return &Writer{f: f}, nil
}

// Path is the file written.
func (w *Writer) Path() string { return w.f.Name() }

// Write appends e. After a failure every later Write returns the same
// error.
func (w *Writer) Write(e Event) error {
	if w.err != nil {
		return w.err
	}
	if _, err := w.f.Write(AppendRecord(nil, e.Marshal())); err != nil {
		w.err = fmt.Errorf("tensorboard: write %s: %w", w.f.Name(), err)
	}
	return w.err
}

// Close closes the file, returning the first error of the writer's life.
func (w *Writer) Close() error {
	if err := w.f.Close(); err != nil && w.err == nil {
		w.err = fmt.Errorf("tensorboard: close %s: %w", w.f.Name(), err)
	}
	return w.err
}

// WallTime is t as an event's wall_time: seconds since the Unix epoch.
func WallTime(t time.Time) float64 { return float64(t.Unix()) + float64(t.Nanosecond())/1e9 }

// ErrCorrupt is wrapped by Read's error for a record that is cut short,
// fails its checksum or is no Event.
var ErrCorrupt = errors.New("corrupt record")

// Read decodes the events of an event file, the version record included.
// It stops at the first record that is cut short or fails its checksum,
// returning the events before it and an error wrapping ErrCorrupt that
// names the record's offset: a file whose writer crashed keeps its whole
// records.
func Read(r io.Reader) ([]Event, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var events []Event
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			return events, fmt.Errorf("record at byte %d: %w: a %d-byte header is cut short", off, ErrCorrupt, len(b)-off)
		}
		n := binary.LittleEndian.Uint64(b[off:])
		if MaskedCRC(b[off:off+8]) != binary.LittleEndian.Uint32(b[off+8:]) {
			return events, fmt.Errorf("record at byte %d: %w: length checksum mismatch", off, ErrCorrupt)
		}
		if rest := len(b) - off - 16; rest < 0 || n > uint64(rest) {
			return events, fmt.Errorf("record at byte %d: %w: %d data bytes and a checksum, %d bytes left in the file", off, ErrCorrupt, n, len(b)-off-12)
		}
		data := b[off+12 : off+12+int(n)]
		if MaskedCRC(data) != binary.LittleEndian.Uint32(b[off+12+int(n):]) {
			return events, fmt.Errorf("record at byte %d: %w: data checksum mismatch", off, ErrCorrupt)
		}
		e, err := Unmarshal(data)
		if err != nil {
			return events, fmt.Errorf("record at byte %d: %w: %v", off, ErrCorrupt, err)
		}
		events = append(events, e)
		off += 16 + int(n)
	}
	return events, nil
}

// Unmarshal decodes an Event protobuf, skipping fields other than those
// of the package comment.
func Unmarshal(b []byte) (Event, error) {
	var e Event
	err := walkFields(b, func(field, wire int, v uint64, data []byte) error {
		switch {
		case field == eventWallTime && wire == wireFixed64:
			e.WallTime = math.Float64frombits(v)
		case field == eventStep && wire == wireVarint:
			e.Step = int64(v)
		case field == eventFileVersion && wire == wireBytes:
			e.FileVersion = string(data)
		case field == eventSummary && wire == wireBytes:
			return walkFields(data, func(field, wire int, _ uint64, data []byte) error {
				if field != summaryValue || wire != wireBytes {
					return nil
				}
				var val Value
				err := walkFields(data, func(field, wire int, v uint64, data []byte) error {
					switch {
					case field == valueTag && wire == wireBytes:
						val.Tag = string(data)
					case field == valueSimpleValue && wire == wireFixed32:
						val.Scalar = math.Float32frombits(uint32(v))
					}
					return nil
				})
				e.Values = append(e.Values, val)
				return err
			})
		}
		return nil
	})
	return e, err
}

// walkFields calls fn for each field of a protobuf message: v holds a
// varint or fixed value, data a length-delimited one.
func walkFields(b []byte, fn func(field, wire int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return errors.New("event: bad field key")
		}
		b = b[n:]
		field, wire := int(key>>3), int(key&7)
		var v uint64
		var data []byte
		switch wire {
		case wireVarint:
			if v, n = binary.Uvarint(b); n <= 0 {
				return fmt.Errorf("event: field %d: bad varint", field)
			}
			b = b[n:]
		case wireFixed64:
			if len(b) < 8 {
				return fmt.Errorf("event: field %d: cut short", field)
			}
			v, b = binary.LittleEndian.Uint64(b), b[8:]
		case wireFixed32:
			if len(b) < 4 {
				return fmt.Errorf("event: field %d: cut short", field)
			}
			v, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
		case wireBytes:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("event: field %d: bad length", field)
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		default:
			return fmt.Errorf("event: field %d: unsupported wire type %d", field, wire)
		}
		if err := fn(field, wire, v, data); err != nil {
			return err
		}
	}
	return nil
}

// Files lists the event files in dir, oldest name first; none when dir
// does not exist.
func Files(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tensorboard: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasPrefix(e.Name(), FilePrefix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out, nil
}
