// Package gguf writes and reads GGUF version 3, the file format of
// llama.cpp (and so of Ollama and LM Studio), and exports mixtune's models
// and LoRA adapters to it without any dependency on llama.cpp.
//
// The layout follows llama.cpp's ggml/include/gguf.h, ggml/src/gguf.cpp and
// gguf-py (gguf-py/gguf/gguf_writer.py, constants.py), read in the
// llama.cpp sources that node-llama-cpp 3.22.1 bundles
// (llama/gitRelease.bundle, commit de3ff815ea7d, the source of the
// prebuilt binaries that check the exports; convert_hf_to_gguf.py keeps
// its model classes in conversion/*.py there):
//
//	magic "GGUF", uint32 version 3, uint64 tensor count, uint64 KV count
//	KV pairs: string key, uint32 value type, value
//	tensor infos: string name, uint32 n_dims, n_dims × uint64 ne (ne[0] is
//	  the fastest-varying dimension: a PyTorch shape reversed), uint32
//	  ggml type, uint64 offset relative to the data section
//	padding to general.alignment (32 by default), then the tensor data,
//	  each tensor starting at a multiple of the alignment
//
// Strings are a uint64 byte length and the bytes (no terminator); arrays
// are a uint32 element type, a uint64 count and the elements. Everything is
// little-endian.
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Magic is "GGUF" read as a little-endian uint32.
const (
	Magic            = 0x46554747
	Version          = 3
	DefaultAlignment = 32
)

// ValueType is the type of a KV value (gguf-py constants.py GGUFValueType).
type ValueType uint32

const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// TensorType is a ggml tensor type (constants.py GGMLQuantizationType).
type TensorType uint32

const (
	F32  TensorType = 0
	F16  TensorType = 1
	Q8_0 TensorType = 8
	BF16 TensorType = 30
)

// QK8_0 is the number of values in one q8_0 block; a block is an fp16
// scale followed by 32 int8 values (34 bytes).
const QK8_0 = 32

func (t TensorType) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case Q8_0:
		return "q8_0"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("ggml type %d", uint32(t))
}

// ParseType reads a --type value: f32, f16, bf16 or q8_0.
func ParseType(s string) (TensorType, error) {
	for _, t := range []TensorType{F32, F16, BF16, Q8_0} {
		if s == t.String() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown GGUF type %q: want f32, f16, bf16 or q8_0", s)
}

// FileType is general.file_type for a file whose matrices are of type t
// (llama.h llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32).
func (t TensorType) FileType() uint32 {
	switch t {
	case F16:
		return 1
	case Q8_0:
		return 7
	case BF16:
		return 32
	}
	return 0
}

// RowBytes is the size of n values of type t; n must be a multiple of the
// block size (32 for q8_0).
func (t TensorType) RowBytes(n int) (int, error) {
	switch t {
	case F32:
		return 4 * n, nil
	case F16, BF16:
		return 2 * n, nil
	case Q8_0:
		if n%QK8_0 != 0 {
			return 0, fmt.Errorf("q8_0 needs rows of a multiple of %d values, got %d", QK8_0, n)
		}
		return n / QK8_0 * (2 + QK8_0), nil
	}
	return 0, fmt.Errorf("unsupported tensor type %v", t)
}

// KV is one metadata pair. Value is one of uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64, or a slice
// of one of them ([]string, []int32, []float32, ...). Types matter:
// llama.cpp checks them (e.g. token types must be int32, ids uint32).
type KV struct {
	Key   string
	Value any
}

// Tensor is one tensor to write. Shape is in PyTorch order (outermost
// first, as the safetensors and HF shapes are); the file stores it
// reversed. Data holds the fp32 values, converted to Type when written;
// or, when Fill is set, Fill gives them when the tensor's turn to be
// written comes, and they are dropped once written, so that a file is
// written holding one tensor's values at a time.
type Tensor struct {
	Name  string
	Shape []int
	Type  TensorType
	Data  []float32
	Fill  func() ([]float32, error)
}

// DataError is a tensor whose values, produced by its Fill as the file
// was written, could not be had or are not what its header says (a
// weight that cannot be read, a merge that is not finite, a non-finite
// or missing value): an error in the input, found mid-write.
type DataError struct {
	Tensor string
	Err    error
}

func (e *DataError) Error() string { return e.Err.Error() }
func (e *DataError) Unwrap() error { return e.Err }

// values is t's fp32 values: Data (which Check checked), or Fill's,
// checked against its shape and finite.
func (t Tensor) values() ([]float32, error) {
	if t.Fill == nil {
		return t.Data, nil
	}
	data, err := t.Fill()
	if err != nil {
		return nil, &DataError{t.Name, err}
	}
	if err := t.checkValues(data); err != nil {
		return nil, &DataError{t.Name, err}
	}
	return data, nil
}

// checkValues checks that data is t's shape's count of finite values.
func (t Tensor) checkValues(data []float32) error {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	if n != len(data) {
		return fmt.Errorf("tensor %s has shape %v (%d values) but %d values", t.Name, t.Shape, n, len(data))
	}
	for i, v := range data {
		if v-v != 0 {
			return fmt.Errorf("tensor %s holds a non-finite value (%v at index %d)", t.Name, v, i)
		}
	}
	return nil
}

// Dims is the tensor's ne: Shape reversed.
func (t Tensor) Dims() []uint64 {
	d := make([]uint64, len(t.Shape))
	for i, n := range t.Shape {
		d[len(t.Shape)-1-i] = uint64(n)
	}
	return d
}

// Bytes is the size of the tensor's data in the file.
func (t Tensor) Bytes() (int, error) {
	if len(t.Shape) == 0 {
		return 0, fmt.Errorf("tensor %s has no dimensions", t.Name)
	}
	row := t.Shape[len(t.Shape)-1]
	rows := 1
	for _, n := range t.Shape[:len(t.Shape)-1] {
		rows *= n
	}
	rb, err := t.Type.RowBytes(row)
	if err != nil {
		return 0, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	return rows * rb, nil
}

// File is a GGUF file to write: metadata and tensors, in file order.
type File struct {
	KV      []KV
	Tensors []Tensor
}

// Get returns the value of key, or nil.
func (f *File) Get(key string) any {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

// Set replaces key's value, or appends the pair.
func (f *File) Set(key string, v any) {
	for i := range f.KV {
		if f.KV[i].Key == key {
			f.KV[i].Value = v
			return
		}
	}
	f.KV = append(f.KV, KV{key, v})
}

// Check validates what WriteTo would write: unique keys and tensor names,
// supported values, sizes that match shapes, finite values (of the
// tensors that hold Data; a Fill's values are checked as they are
// written). Exporters call it before creating the output file, so that
// bad input leaves nothing.
func (f *File) Check() error {
	keys := map[string]bool{}
	for _, kv := range f.KV {
		if keys[kv.Key] {
			return fmt.Errorf("metadata key %s appears twice", kv.Key)
		}
		keys[kv.Key] = true
		if _, err := valueType(kv.Value); err != nil {
			return fmt.Errorf("metadata %s: %w", kv.Key, err)
		}
	}
	names := map[string]bool{}
	for _, t := range f.Tensors {
		if names[t.Name] {
			return fmt.Errorf("tensor %s appears twice", t.Name)
		}
		names[t.Name] = true
		if len(t.Shape) > 4 { // GGML_MAX_DIMS
			return fmt.Errorf("tensor %s has %d dimensions; GGUF allows 4", t.Name, len(t.Shape))
		}
		for _, d := range t.Shape {
			if d <= 0 {
				return fmt.Errorf("tensor %s has shape %v", t.Name, t.Shape)
			}
		}
		if _, err := t.Bytes(); err != nil {
			return err
		}
		if t.Fill == nil {
			if err := t.checkValues(t.Data); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *File) alignment() int {
	if a, ok := f.Get("general.alignment").(uint32); ok && a > 0 {
		return int(a)
	}
	return DefaultAlignment
}

// WriteTo writes the file: the header, whose offsets follow from the
// tensors' shapes and types alone, then each tensor in turn, its values
// taken (from Data, or from Fill, then dropped), checked and converted to
// its type a row block at a time, so that memory beyond one tensor's fp32
// values stays one conversion buffer. A tensor whose values are wrong
// stops the write with a *DataError.
func (f *File) WriteTo(w io.Writer) (int64, error) {
	if err := f.Check(); err != nil {
		return 0, err
	}
	align := f.alignment()
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("general.alignment %d is not a power of two", align)
	}
	cw := &countWriter{w: bufio.NewWriterSize(w, 1<<20)}
	e := &encoder{w: cw}
	e.u32(Magic)
	e.u32(Version)
	e.u64(uint64(len(f.Tensors)))
	e.u64(uint64(len(f.KV)))
	for _, kv := range f.KV {
		e.str(kv.Key)
		e.value(kv.Value)
	}
	offset := 0
	for _, t := range f.Tensors {
		e.str(t.Name)
		dims := t.Dims()
		e.u32(uint32(len(dims)))
		for _, d := range dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(uint64(offset))
		n, _ := t.Bytes()
		offset += pad(n, align)
	}
	e.zeros(pad(int(cw.n), align) - int(cw.n))
	for _, t := range f.Tensors {
		n, _ := t.Bytes()
		if e.err == nil {
			var data []float32
			if data, e.err = t.values(); e.err == nil {
				e.err = encodeTensor(cw, t.Type, t.Shape, data)
			}
		}
		e.zeros(pad(n, align) - n)
	}
	if e.err == nil {
		e.err = cw.w.(*bufio.Writer).Flush()
	}
	return cw.n, e.err
}

func pad(n, align int) int { return (n + align - 1) / align * align }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// encoder writes little-endian values, keeping the first error.
type encoder struct {
	w   io.Writer
	err error
	buf [8]byte
}

func (e *encoder) write(b []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(b)
	}
}

func (e *encoder) u8(v uint8) { e.write([]byte{v}) }
func (e *encoder) u16(v uint16) {
	binary.LittleEndian.PutUint16(e.buf[:2], v)
	e.write(e.buf[:2])
}
func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.buf[:4], v)
	e.write(e.buf[:4])
}
func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.buf[:8], v)
	e.write(e.buf[:8])
}
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.write([]byte(s))
}
func (e *encoder) zeros(n int) {
	if n > 0 {
		e.write(make([]byte, n))
	}
}

// valueType is the GGUF type of a KV value, and for arrays their element type.
func valueType(v any) (ValueType, error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, nil
	case int8:
		return TypeInt8, nil
	case uint16:
		return TypeUint16, nil
	case int16:
		return TypeInt16, nil
	case uint32:
		return TypeUint32, nil
	case int32:
		return TypeInt32, nil
	case float32:
		return TypeFloat32, nil
	case bool:
		return TypeBool, nil
	case string:
		return TypeString, nil
	case uint64:
		return TypeUint64, nil
	case int64:
		return TypeInt64, nil
	case float64:
		return TypeFloat64, nil
	case []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []string, []uint64, []int64, []float64:
		return TypeArray, nil
	}
	return 0, fmt.Errorf("unsupported value type %T", v)
}

// elemType is the element type of an array value.
func elemType(v any) ValueType {
	switch v.(type) {
	case []uint8:
		return TypeUint8
	case []int8:
		return TypeInt8
	case []uint16:
		return TypeUint16
	case []int16:
		return TypeInt16
	case []uint32:
		return TypeUint32
	case []int32:
		return TypeInt32
	case []float32:
		return TypeFloat32
	case []bool:
		return TypeBool
	case []string:
		return TypeString
	case []uint64:
		return TypeUint64
	case []int64:
		return TypeInt64
	}
	return TypeFloat64
}

func (e *encoder) value(v any) {
	t, _ := valueType(v)
	e.u32(uint32(t))
	if t == TypeArray {
		e.u32(uint32(elemType(v)))
	}
	e.payload(v)
}

// payload writes a value without its type tag.
func (e *encoder) payload(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case []uint8:
		e.u64(uint64(len(x)))
		e.write(x)
	default:
		arrayEach(v, func(n int) { e.u64(uint64(n)) }, e.payload)
	}
}

// arrayEach calls count with the length of array v, then each on its elements.
func arrayEach(v any, count func(int), each func(any)) {
	switch x := v.(type) {
	case []int8:
		eachOf(x, count, each)
	case []uint16:
		eachOf(x, count, each)
	case []int16:
		eachOf(x, count, each)
	case []uint32:
		eachOf(x, count, each)
	case []int32:
		eachOf(x, count, each)
	case []float32:
		eachOf(x, count, each)
	case []bool:
		eachOf(x, count, each)
	case []string:
		eachOf(x, count, each)
	case []uint64:
		eachOf(x, count, each)
	case []int64:
		eachOf(x, count, each)
	case []float64:
		eachOf(x, count, each)
	}
}

func eachOf[T any](xs []T, count func(int), each func(any)) {
	count(len(xs))
	for _, x := range xs {
		each(x)
	}
}

// encodeTensor writes data, of the given shape, converted to type typ, a
// row block at a time.
func encodeTensor(w io.Writer, typ TensorType, shape []int, data []float32) error {
	row := shape[len(shape)-1]
	rb, err := typ.RowBytes(row)
	if err != nil {
		return err
	}
	rowsPer := max(1, (1<<20)/max(rb, 1))
	buf := make([]byte, 0, rowsPer*rb)
	for start := 0; start < len(data); start += rowsPer * row {
		end := min(len(data), start+rowsPer*row)
		buf = AppendEncoded(buf[:0], typ, data[start:end])
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// errTruncated reports a file that ends inside a structure.
var errTruncated = errors.New("file ends early")
