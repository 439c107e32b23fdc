// Package safetensors reads and writes the Hugging Face safetensors format:
// single files and checkpoints sharded across several files with a
// model.safetensors.index.json.
//
// A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON,
// then the data buffer. The JSON maps each tensor name to its dtype, shape and
// [begin, end) byte offsets into the data buffer, plus an optional
// "__metadata__" object of strings. Tensors are C-order and little-endian.
//
// Files come from the outside world, so reading validates everything a later
// conversion would otherwise trip over: every error names the file and, where
// one is involved, the tensor. Floating-point tensors (F32, F16, BF16, F64)
// convert to float32; other dtypes can be listed and read as raw bytes.
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mixtune/mixtune/amp"
	"github.com/mixtune/mixtune/internal/readlimit"
)

// maxHeaderBytes is the limit the reference implementation enforces; a larger
// length is a corrupt or hostile file, and believing it would mean allocating
// whatever it claims.
const maxHeaderBytes = 100_000_000

// metadataKey is the reserved header key that holds string metadata rather
// than a tensor.
const metadataKey = "__metadata__"

// Info describes one stored tensor.
type Info struct {
	Name  string
	Dtype string // as spelled in the file: "F32", "BF16", "I64", ...
	Shape []int
}

// entry is one validated tensor record of a header.
type entry struct {
	dtype      string
	shape      []int
	begin, end int64 // relative to the start of the data buffer
}

// header is a validated safetensors header.
type header struct {
	entries map[string]entry
	names   []string // sorted
	meta    map[string]string
}

func (h *header) info(name string) (Info, bool) {
	e, ok := h.entries[name]
	if !ok {
		return Info{}, false
	}
	return Info{Name: name, Dtype: e.dtype, Shape: slices.Clone(e.shape)}, true
}

// File is one parsed safetensors file held in memory.
type File struct {
	name string
	data []byte // the data buffer, after the header
	hdr  *header
}

// ReadFile reads and validates the safetensors file at path.
func ReadFile(path string) (*File, error) {
	b, err := readlimit.ReadFile(path, readlimit.Weights)
	if err != nil {
		return nil, fmt.Errorf("read safetensors: %w", err)
	}
	return Parse(path, b)
}

// Parse validates the safetensors bytes b. name identifies the file in error
// messages. The File keeps b: the caller must not modify it afterwards.
func Parse(name string, b []byte) (*File, error) {
	n, err := headerLen(name, b, int64(len(b)))
	if err != nil {
		return nil, err
	}
	hdr, err := parseHeader(name, b[8:8+n], int64(len(b))-8-n)
	if err != nil {
		return nil, err
	}
	return &File{name: name, data: b[8+n:], hdr: hdr}, nil
}

// Names lists the tensors in the file, sorted.
func (f *File) Names() []string { return slices.Clone(f.hdr.names) }

// Info describes the named tensor, and reports whether the file has it.
func (f *File) Info(name string) (Info, bool) { return f.hdr.info(name) }

// Metadata returns a copy of the file's "__metadata__" (empty if it has none).
func (f *File) Metadata() map[string]string {
	m := make(map[string]string, len(f.hdr.meta))
	for k, v := range f.hdr.meta {
		m[k] = v
	}
	return m
}

// Raw returns a copy of the named tensor's stored bytes, whatever its dtype.
func (f *File) Raw(name string) ([]byte, error) {
	e, ok := f.hdr.entries[name]
	if !ok {
		return nil, fmt.Errorf("%s: no tensor %q", f.name, name)
	}
	return bytes.Clone(f.data[e.begin:e.end]), nil
}

// Float32 converts the named tensor to float32 and returns it with its shape.
// F32 is exact, F16 and BF16 widen exactly, F64 rounds to nearest even and
// overflows to ±Inf. Any other dtype is an error.
func (f *File) Float32(name string) ([]float32, []int, error) {
	e, ok := f.hdr.entries[name]
	if !ok {
		return nil, nil, fmt.Errorf("%s: no tensor %q", f.name, name)
	}
	v, err := toFloat32(f.name, name, e.dtype, f.data[e.begin:e.end])
	if err != nil {
		return nil, nil, err
	}
	return v, slices.Clone(e.shape), nil
}

// headerLen validates the length prefix of a file of size bytes whose first
// bytes are prefix, and returns the header length.
func headerLen(name string, prefix []byte, size int64) (int64, error) {
	if size < 8 || len(prefix) < 8 {
		return 0, fmt.Errorf("%s: file is %d bytes, too short for the 8-byte header length", name, size)
	}
	n := binary.LittleEndian.Uint64(prefix)
	if n > maxHeaderBytes {
		return 0, fmt.Errorf("%s: header length %d exceeds the limit of %d bytes", name, n, maxHeaderBytes)
	}
	if n > uint64(size-8) {
		return 0, fmt.Errorf("%s: header length %d is larger than the %d bytes that follow it", name, n, size-8)
	}
	return int64(n), nil
}

// parseHeader validates the header JSON hdr of a file whose data buffer is
// dataLen bytes long.
func parseHeader(name string, hdr []byte, dataLen int64) (*header, error) {
	// encoding/json would silently replace invalid UTF-8 and so could make two
	// distinct stored names collide.
	if !utf8.Valid(hdr) {
		return nil, fmt.Errorf("%s: header is not valid UTF-8", name)
	}
	bad := func(err error) error {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s: invalid header JSON: %w", name, err)
	}
	// Walking tokens rather than unmarshalling into a map is what lets a
	// duplicated key be seen; a map would keep whichever came last.
	dec := json.NewDecoder(bytes.NewReader(hdr))
	tok, err := dec.Token()
	if err != nil {
		return nil, bad(err)
	}
	if tok != json.Delim('{') {
		return nil, fmt.Errorf("%s: header is not a JSON object", name)
	}
	h := &header{entries: map[string]entry{}}
	sawMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		key, ok := tok.(string)
		if !ok { // the decoder only yields string keys inside an object
			return nil, bad(fmt.Errorf("unexpected %v", tok))
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, bad(err)
		}
		if key == metadataKey {
			if sawMeta {
				return nil, fmt.Errorf("%s: %s appears twice in the header", name, metadataKey)
			}
			sawMeta = true
			if err := json.Unmarshal(raw, &h.meta); err != nil {
				return nil, fmt.Errorf("%s: %s must map strings to strings: %w", name, metadataKey, err)
			}
			continue
		}
		if _, dup := h.entries[key]; dup {
			return nil, fmt.Errorf("%s: tensor %q appears twice in the header", name, key)
		}
		e, err := parseEntry(raw, dataLen)
		if err != nil {
			return nil, fmt.Errorf("%s: tensor %q: %w", name, key, err)
		}
		h.entries[key] = e
		h.names = append(h.names, key)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, bad(err)
	}
	// Writers pad with spaces, which the decoder skips; anything else after
	// the object means the length or the JSON is wrong.
	if _, err := dec.Token(); err != io.EOF {
		if err != nil {
			return nil, bad(err)
		}
		return nil, fmt.Errorf("%s: unexpected data after the header object", name)
	}
	slices.Sort(h.names)
	if err := checkOverlap(name, h); err != nil {
		return nil, err
	}
	return h, nil
}

// parseEntry validates one tensor record against a data buffer of dataLen
// bytes.
func parseEntry(raw json.RawMessage, dataLen int64) (entry, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return entry{}, errors.New("entry is not a JSON object")
	}
	// Fields are looked up by exact key: json.Unmarshal into a struct would
	// also accept "DType" and the like.
	dtRaw, ok := fields["dtype"]
	if !ok {
		return entry{}, errors.New("missing dtype")
	}
	shRaw, ok := fields["shape"]
	if !ok {
		return entry{}, errors.New("missing shape")
	}
	offRaw, ok := fields["data_offsets"]
	if !ok {
		return entry{}, errors.New("missing data_offsets")
	}
	var dtype string
	if err := json.Unmarshal(dtRaw, &dtype); err != nil || isNull(dtRaw) {
		return entry{}, fmt.Errorf("dtype %s is not a string", dtRaw)
	}
	size, ok := dtypeSize(dtype)
	if !ok {
		return entry{}, fmt.Errorf("unknown dtype %q", dtype)
	}
	dims, err := intArray(shRaw)
	if err != nil {
		return entry{}, fmt.Errorf("shape %s: %w", shRaw, err)
	}
	shape := make([]int, len(dims))
	for i, d := range dims {
		if d < 0 {
			return entry{}, fmt.Errorf("negative dimension %d in shape %s", d, fmtInts(dims))
		}
		if uint64(d) > math.MaxInt {
			return entry{}, fmt.Errorf("shape %s is too large", fmtInts(dims))
		}
		shape[i] = int(d)
	}
	nbytes := int64(0)
	if !slices.Contains(dims, 0) {
		nbytes = int64(size)
		for _, d := range dims {
			if nbytes > math.MaxInt64/d {
				return entry{}, fmt.Errorf("shape %s is too large", fmtInts(dims))
			}
			nbytes *= d
		}
	}
	off, err := intArray(offRaw)
	if err != nil {
		return entry{}, fmt.Errorf("data_offsets %s: %w", offRaw, err)
	}
	if len(off) != 2 {
		return entry{}, fmt.Errorf("data_offsets %s must have 2 entries, not %d", fmtInts(off), len(off))
	}
	begin, end := off[0], off[1]
	if end < begin {
		return entry{}, fmt.Errorf("data_offsets %s end before they begin", fmtInts(off))
	}
	if begin < 0 || end > dataLen {
		return entry{}, fmt.Errorf("data_offsets %s outside the data buffer of %d bytes", fmtInts(off), dataLen)
	}
	if end-begin != nbytes {
		return entry{}, fmt.Errorf("data_offsets %s hold %d bytes, but shape %s of %s needs %d",
			fmtInts(off), end-begin, fmtInts(dims), dtype, nbytes)
	}
	return entry{dtype: dtype, shape: shape, begin: begin, end: end}, nil
}

// checkOverlap rejects tensors that share bytes: writing through one would
// silently change the other.
func checkOverlap(name string, h *header) error {
	type span struct {
		name       string
		begin, end int64
	}
	spans := make([]span, 0, len(h.names))
	for _, n := range h.names {
		if e := h.entries[n]; e.end > e.begin { // empty tensors own no bytes
			spans = append(spans, span{n, e.begin, e.end})
		}
	}
	slices.SortStableFunc(spans, func(a, b span) int {
		if a.begin != b.begin {
			return cmpInt64(a.begin, b.begin)
		}
		return cmpInt64(a.end, b.end)
	})
	for i := 1; i < len(spans); i++ {
		a, b := spans[i-1], spans[i]
		if b.begin < a.end {
			return fmt.Errorf("%s: tensors %q [%d,%d] and %q [%d,%d] overlap",
				name, a.name, a.begin, a.end, b.name, b.begin, b.end)
		}
	}
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// intArray decodes a JSON array of integers; null is not an array.
func intArray(raw json.RawMessage) ([]int64, error) {
	if isNull(raw) {
		return nil, errors.New("not an array")
	}
	var v []int64
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// fmtInts formats integers the way the header spells them, [2,3].
func fmtInts[T int | int64](v []T) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(int64(x), 10))
	}
	b.WriteByte(']')
	return b.String()
}

// dtypeSize is the byte size of one element of a dtype the format defines.
// The sub-byte F4/F6 formats are left out: their byte sizes are not a whole
// number per element, and nothing in mixtune reads them.
func dtypeSize(dtype string) (int, bool) {
	switch dtype {
	case "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0":
		return 1, true
	case "U16", "I16", "F16", "BF16":
		return 2, true
	case "U32", "I32", "F32":
		return 4, true
	case "U64", "I64", "F64", "C64":
		return 8, true
	}
	return 0, false
}

// f64Overflow is the smallest magnitude that rounds past MaxFloat32 under
// round-to-nearest-even: MaxFloat32 plus half an ulp.
const f64Overflow = 0x1.ffffffp127

// toFloat32 decodes the stored bytes raw of tensor `tensor` in file `file`.
func toFloat32(file, tensor, dtype string, raw []byte) ([]float32, error) {
	size, err := floatSize(file, tensor, dtype)
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(raw)/size)
	convertFloat32(out, dtype, raw)
	return out, nil
}

// floatSize is the bytes per element of a dtype that converts to float32.
func floatSize(file, tensor, dtype string) (int, error) {
	switch dtype {
	case "F32":
		return 4, nil
	case "F16", "BF16":
		return 2, nil
	case "F64":
		return 8, nil
	}
	return 0, fmt.Errorf("%s: tensor %q has dtype %s, which does not convert to float32", file, tensor, dtype)
}

// convertFloat32 converts raw, elements of a dtype floatSize accepts, into
// out[:len(raw)/size]; value by value, so that a tensor converted in
// chunks is converted alike.
func convertFloat32(out []float32, dtype string, raw []byte) {
	switch dtype {
	case "F32":
		for i := range len(raw) / 4 {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	case "F16", "BF16":
		format := amp.FP16
		if dtype == "BF16" {
			format = amp.BF16
		}
		for i := range len(raw) / 2 {
			out[i] = format.FromBits16(binary.LittleEndian.Uint16(raw[2*i:]))
		}
	case "F64":
		for i := range len(raw) / 8 {
			v := math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))
			// Go leaves an out-of-range float conversion implementation
			// defined, so overflow is made explicit.
			switch {
			case v >= f64Overflow:
				out[i] = float32(math.Inf(1))
			case v <= -f64Overflow:
				out[i] = float32(math.Inf(-1))
			default:
				out[i] = float32(v)
			}
		}
	}
}
