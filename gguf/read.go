package gguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/mixtune/mixtune/internal/readlimit"
)

// Reading GGUF: enough to check what mixtune writes (tests, the fuzz
// target) and to read an export's weights back for comparisons. It reads
// every value type and the tensor types mixtune writes.

// Info is one tensor's entry in the file.
type Info struct {
	Name   string
	Dims   []uint64 // ne: fastest-varying first
	Type   TensorType
	Offset uint64 // from the start of the data section
}

// Shape is Dims in PyTorch order (outermost first).
func (i Info) Shape() []int {
	s := make([]int, len(i.Dims))
	for k, d := range i.Dims {
		s[len(i.Dims)-1-k] = int(d)
	}
	return s
}

// Count is the number of values.
func (i Info) Count() int {
	n := 1
	for _, d := range i.Dims {
		n *= int(d)
	}
	return n
}

// Parsed is a GGUF file's header: its metadata in file order and its
// tensors' entries, with the data section's offset in the file.
type Parsed struct {
	Version    uint32
	KV         []KV
	Tensors    []Info
	DataOffset int64
	r          io.ReaderAt
	size       int64
}

// Get returns the value of key, or nil.
func (p *Parsed) Get(key string) any {
	for _, kv := range p.KV {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// Tensor returns the entry of the tensor called name.
func (p *Parsed) Tensor(name string) (Info, bool) {
	for _, t := range p.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Info{}, false
}

// Raw returns the bytes of tensor name as stored.
func (p *Parsed) Raw(name string) (Info, []byte, error) {
	t, ok := p.Tensor(name)
	if !ok {
		return t, nil, fmt.Errorf("no tensor %s", name)
	}
	row := 1
	if len(t.Dims) > 0 {
		row = int(t.Dims[0])
	}
	rb, err := t.Type.RowBytes(row)
	if err != nil {
		return t, nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	n := int64(rb) * int64(t.Count()/max(row, 1))
	off := p.DataOffset + int64(t.Offset)
	if off+n > p.size {
		return t, nil, fmt.Errorf("tensor %s (%d bytes at %d) runs past the end of the file (%d bytes)", name, n, off, p.size)
	}
	b := make([]byte, n)
	if _, err := p.r.ReadAt(b, off); err != nil {
		return t, nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return t, b, nil
}

// Float32 returns tensor name's values converted to fp32 and its PyTorch-order shape.
func (p *Parsed) Float32(name string) ([]float32, []int, error) {
	t, b, err := p.Raw(name)
	if err != nil {
		return nil, nil, err
	}
	v, err := Decode(t.Type, b, t.Count())
	if err != nil {
		return nil, nil, fmt.Errorf("tensor %s: %w", name, err)
	}
	return v, t.Shape(), nil
}

// Open reads the header of the GGUF file at path; the file stays open
// for Raw and Float32 until Close.
func Open(path string) (*Parsed, io.Closer, error) {
	f, err := readlimit.Open(path, readlimit.Model)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	p, err := Read(f, st.Size())
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return p, f, nil
}

// limits that keep a corrupt file from making the reader allocate without bound
const (
	maxCount  = 1 << 28
	maxString = 1 << 30
)

// Read parses the header of a GGUF file of size bytes and checks that
// every tensor lies inside the file, aligned, without overlapping another.
func Read(r io.ReaderAt, size int64) (*Parsed, error) {
	d := &decoder{r: r, size: size}
	if m := d.u32(); d.err == nil && m != Magic {
		return nil, fmt.Errorf("not a GGUF file (magic %#08x)", m)
	}
	p := &Parsed{Version: d.u32(), r: r, size: size}
	if d.err == nil && p.Version != Version {
		return nil, fmt.Errorf("GGUF version %d; this reader reads version %d", p.Version, Version)
	}
	nt, nkv := d.u64(), d.u64()
	if d.err == nil && (nt > maxCount || nkv > maxCount) {
		return nil, fmt.Errorf("%d tensors and %d metadata pairs are more than a file can hold", nt, nkv)
	}
	keys := map[string]bool{}
	for i := uint64(0); i < nkv && d.err == nil; i++ {
		k := d.str()
		t := ValueType(d.u32())
		v := d.value(t, true)
		if d.err != nil {
			break
		}
		if keys[k] {
			return nil, fmt.Errorf("metadata key %s appears twice", k)
		}
		keys[k] = true
		p.KV = append(p.KV, KV{k, v})
	}
	align := uint64(DefaultAlignment)
	if v := p.Get("general.alignment"); v != nil {
		a, ok := v.(uint32)
		if !ok || a == 0 || a&(a-1) != 0 {
			return nil, fmt.Errorf("general.alignment must be a power of two (uint32), got %v", v)
		}
		align = uint64(a)
	}
	names := map[string]bool{}
	for i := uint64(0); i < nt && d.err == nil; i++ {
		var t Info
		t.Name = d.str()
		nd := d.u32()
		if d.err == nil && (nd == 0 || nd > 4) {
			return nil, fmt.Errorf("tensor %s has %d dimensions", t.Name, nd)
		}
		for k := uint32(0); k < nd && d.err == nil; k++ {
			t.Dims = append(t.Dims, d.u64())
		}
		t.Type = TensorType(d.u32())
		t.Offset = d.u64()
		if d.err != nil {
			break
		}
		if names[t.Name] {
			return nil, fmt.Errorf("tensor %s appears twice", t.Name)
		}
		names[t.Name] = true
		if t.Offset%align != 0 {
			return nil, fmt.Errorf("tensor %s is at offset %d, not a multiple of the alignment %d", t.Name, t.Offset, align)
		}
		p.Tensors = append(p.Tensors, t)
	}
	if d.err != nil {
		return nil, d.err
	}
	p.DataOffset = int64((uint64(d.off) + align - 1) / align * align)
	// every tensor inside the file, none overlapping
	type span struct{ start, end uint64 }
	var spans []span
	for _, t := range p.Tensors {
		n := uint64(1)
		for _, x := range t.Dims {
			if x == 0 || n > math.MaxInt64/x {
				return nil, fmt.Errorf("tensor %s has dimensions %v", t.Name, t.Dims)
			}
			n *= x
		}
		rb, err := t.Type.RowBytes(int(t.Dims[0]))
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		bytes := uint64(rb) * (n / t.Dims[0])
		end := uint64(p.DataOffset) + t.Offset + bytes
		if end < t.Offset || end > uint64(size) {
			return nil, fmt.Errorf("tensor %s (%d bytes at data offset %d) runs past the end of the file (%d bytes)", t.Name, bytes, t.Offset, size)
		}
		spans = append(spans, span{t.Offset, t.Offset + bytes})
	}
	slices.SortFunc(spans, func(a, b span) int { return int(min(1, max(-1, int64(a.start)-int64(b.start)))) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start < spans[i-1].end {
			return nil, fmt.Errorf("tensor data overlaps at data offset %d", spans[i].start)
		}
	}
	return p, nil
}

type decoder struct {
	r    io.ReaderAt
	size int64
	off  int64
	err  error
	buf  [8]byte
}

func (d *decoder) read(n int) []byte {
	if d.err != nil {
		return nil
	}
	if int64(n) > d.size-d.off {
		d.err = fmt.Errorf("%w at byte %d", errTruncated, d.off)
		return nil
	}
	var b []byte
	if n <= len(d.buf) {
		b = d.buf[:n]
	} else {
		b = make([]byte, n)
	}
	if _, err := d.r.ReadAt(b, d.off); err != nil {
		d.err = err
		return nil
	}
	d.off += int64(n)
	return b
}

func (d *decoder) u8() uint8 {
	if b := d.read(1); b != nil {
		return b[0]
	}
	return 0
}
func (d *decoder) u16() uint16 {
	if b := d.read(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}
func (d *decoder) u32() uint32 {
	if b := d.read(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}
func (d *decoder) u64() uint64 {
	if b := d.read(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}
func (d *decoder) str() string {
	n := d.u64()
	if d.err == nil && n > maxString {
		d.err = fmt.Errorf("string of %d bytes at byte %d", n, d.off)
	}
	if d.err != nil {
		return ""
	}
	return string(d.read(int(n)))
}

// value reads a value of type t; an array's elements may not be arrays
// (llama.cpp's gguf.cpp refuses nested arrays as invalid).
func (d *decoder) value(t ValueType, arrayOK bool) any {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeBool:
		b := d.u8()
		if d.err == nil && b > 1 {
			d.err = fmt.Errorf("bool value %d at byte %d", b, d.off-1)
		}
		return b == 1
	case TypeString:
		return d.str()
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeArray:
		if !arrayOK {
			d.err = fmt.Errorf("nested array at byte %d", d.off-4)
			return nil
		}
		et := ValueType(d.u32())
		n := d.u64()
		if d.err != nil {
			return nil
		}
		// each element takes at least one byte: a count beyond the bytes
		// left is corrupt, whatever it claims
		if n > uint64(d.size-d.off) || n > maxCount {
			d.err = fmt.Errorf("array of %d elements at byte %d is longer than the file", n, d.off)
			return nil
		}
		return d.array(et, int(n))
	}
	d.err = fmt.Errorf("unknown value type %d at byte %d", t, d.off-4)
	return nil
}

func (d *decoder) array(et ValueType, n int) any {
	switch et {
	case TypeUint8:
		return readArray[uint8](d, et, n)
	case TypeInt8:
		return readArray[int8](d, et, n)
	case TypeUint16:
		return readArray[uint16](d, et, n)
	case TypeInt16:
		return readArray[int16](d, et, n)
	case TypeUint32:
		return readArray[uint32](d, et, n)
	case TypeInt32:
		return readArray[int32](d, et, n)
	case TypeFloat32:
		return readArray[float32](d, et, n)
	case TypeBool:
		return readArray[bool](d, et, n)
	case TypeString:
		return readArray[string](d, et, n)
	case TypeUint64:
		return readArray[uint64](d, et, n)
	case TypeInt64:
		return readArray[int64](d, et, n)
	case TypeFloat64:
		return readArray[float64](d, et, n)
	}
	d.err = fmt.Errorf("unknown array element type %d at byte %d", et, d.off)
	return nil
}

func readArray[T any](d *decoder, et ValueType, n int) []T {
	out := make([]T, 0, min(n, 1<<16))
	for i := 0; i < n && d.err == nil; i++ {
		v, _ := d.value(et, false).(T)
		out = append(out, v)
	}
	return out
}
