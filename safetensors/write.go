package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mixtune/mixtune/amp"
)

// Tensor is a float32 tensor to write, stored on disk in Dtype, or a byte
// tensor (U8 set, Data nil), stored as it is with dtype U8: a 4-bit
// weight's packed codes and quant state in bitsandbytes' layout.
//
// A tensor whose Fill is set holds no values until it is written: the
// header is computed from Shape and Dtype (or Bytes), and Fill is called
// as the tensor's turn comes, so that a checkpoint is written holding one
// tensor's values at a time, not the whole model.
type Tensor struct {
	Name  string
	Shape []int
	Data  []float32 // C order; len must be the product of Shape
	Dtype amp.Format
	U8    []byte // when not nil: the tensor's bytes, one per element (Data and Dtype unused)

	// Fill, when not nil (Data and U8 nil), supplies the values when the
	// tensor is written: Data for a float tensor, or U8 when Bytes is
	// set. What it returns must have the declared number of elements.
	Fill  func() (data []float32, u8 []byte, err error)
	Bytes bool // with Fill: a U8 tensor
}

// numel is the product of a validated tensor's shape.
func (t *Tensor) numel() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// isU8 reports whether the tensor is stored as bytes.
func (t *Tensor) isU8() bool { return t.U8 != nil || (t.Fill != nil && t.Bytes) }

// filled returns t with its values: t itself, or a copy with what Fill
// gave, checked against the declared shape.
func (t *Tensor) filled() (*Tensor, error) {
	if t.Fill == nil {
		return t, nil
	}
	data, u8, err := t.Fill()
	if err != nil {
		return nil, fmt.Errorf("tensor %s: %w", t.Name, err)
	}
	f := *t
	f.Fill, f.Data, f.U8 = nil, data, u8
	switch n := t.numel(); {
	case t.Bytes && (u8 == nil || data != nil || int64(len(u8)) != n):
		return nil, fmt.Errorf("tensor %s: filled with %d bytes and %d values, want %d bytes", t.Name, len(u8), len(data), n)
	case !t.Bytes && (u8 != nil || int64(len(data)) != n):
		return nil, fmt.Errorf("tensor %s: filled with %d values and %d bytes, want %d values", t.Name, len(data), len(u8), n)
	}
	return &f, nil
}

// dtypeName is how the file spells a storage format.
func dtypeName(f amp.Format) (string, bool) {
	switch f {
	case amp.FP32:
		return "F32", true
	case amp.BF16:
		return "BF16", true
	case amp.FP16:
		return "F16", true
	}
	return "", false
}

// nbytes is the stored size of a validated tensor.
func (t *Tensor) nbytes() int64 {
	if t.isU8() {
		return t.numel()
	}
	return t.numel() * int64(t.Dtype.Bytes())
}

// dtype is how the file spells a validated tensor's dtype.
func (t *Tensor) dtype() string {
	if t.isU8() {
		return "U8"
	}
	dt, _ := dtypeName(t.Dtype)
	return dt
}

// WriteFile writes tensors to path as one safetensors file, with metadata
// {"format": "pt"} (which transformers expects) plus the caller's metadata,
// whose entries win. Tensors are stored in name order, so the same input
// always gives the same bytes. The file is replaced atomically: on error any
// existing file at path is left as it was.
func WriteFile(path string, tensors []Tensor, metadata map[string]string) error {
	if err := validate(tensors, metadata); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := atomicfile.Write(path, func(w io.Writer) error { return encode(w, tensors, metadata) }); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// validate checks what encode relies on, before any file is touched.
func validate(tensors []Tensor, metadata map[string]string) error {
	seen := make(map[string]bool, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		switch {
		case t.Name == metadataKey:
			return fmt.Errorf("tensor name %q is reserved for metadata", t.Name)
		case !utf8.ValidString(t.Name):
			// encoding/json would store U+FFFD instead, so the name would not
			// read back as written.
			return fmt.Errorf("tensor name %q is not valid UTF-8", t.Name)
		case seen[t.Name]:
			return fmt.Errorf("tensor %q given twice", t.Name)
		}
		seen[t.Name] = true
		if t.U8 != nil && t.Data != nil {
			return fmt.Errorf("tensor %q: both float and byte data", t.Name)
		}
		if t.Fill != nil && (t.U8 != nil || t.Data != nil) {
			return fmt.Errorf("tensor %q: both data and a Fill", t.Name)
		}
		if _, ok := dtypeName(t.Dtype); !ok && !t.isU8() {
			return fmt.Errorf("tensor %q: cannot store %v", t.Name, t.Dtype)
		}
		n := int64(1)
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("tensor %q: negative dimension %d in shape %s", t.Name, d, fmtInts(t.Shape))
			}
			if d != 0 && n > math.MaxInt64/int64(d) {
				return fmt.Errorf("tensor %q: shape %s is too large", t.Name, fmtInts(t.Shape))
			}
			n *= int64(d)
		}
		if t.Fill != nil {
			continue // checked when filled
		}
		if t.U8 != nil && n != int64(len(t.U8)) {
			return fmt.Errorf("tensor %q: shape %s needs %d bytes, U8 has %d", t.Name, fmtInts(t.Shape), n, len(t.U8))
		}
		if t.U8 == nil && n != int64(len(t.Data)) {
			return fmt.Errorf("tensor %q: shape %s needs %d values, Data has %d", t.Name, fmtInts(t.Shape), n, len(t.Data))
		}
	}
	for k, v := range metadata {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("metadata %q: %q is not valid UTF-8", k, v)
		}
	}
	return nil
}

// encode writes validated tensors as a safetensors file.
func encode(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	order := make([]*Tensor, len(tensors))
	for i := range tensors {
		order[i] = &tensors[i]
	}
	slices.SortFunc(order, func(a, b *Tensor) int { return strings.Compare(a.Name, b.Name) })
	hdr, err := encodeHeader(order, metadata)
	if err != nil {
		return err
	}
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	// Convert in chunks so a multi-gigabyte tensor needs no second copy.
	buf := make([]byte, 0, 64<<10)
	flush := func() error {
		_, err := w.Write(buf)
		buf = buf[:0]
		return err
	}
	for _, t := range order {
		t, err := t.filled() // a Fill's values live until the next tensor's
		if err != nil {
			return err
		}
		if t.U8 != nil {
			if err := flush(); err != nil {
				return err
			}
			if _, err := w.Write(t.U8); err != nil {
				return err
			}
			continue
		}
		for _, x := range t.Data {
			if t.Dtype == amp.FP32 {
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
			} else {
				buf = binary.LittleEndian.AppendUint16(buf, t.Dtype.Bits16(x))
			}
			if len(buf) > cap(buf)-4 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	_, err = w.Write(buf)
	return err
}

// encodeHeader builds the header JSON by hand, rather than marshalling a map,
// so that "__metadata__" comes first and the tensors follow in the order of
// their data, as in the reference writer's headers. Tensors are packed with
// no gaps because the reference reader rejects gaps; an F32 tensor after a
// 16-bit one of odd length is therefore only 2-byte aligned, which readers
// must (and the reference one does) accept.
func encodeHeader(order []*Tensor, metadata map[string]string) ([]byte, error) {
	meta := map[string]string{"format": "pt"}
	maps.Copy(meta, metadata)
	mj, err := json.Marshal(meta) // map keys come out sorted
	if err != nil {
		return nil, err
	}
	h := []byte(`{"` + metadataKey + `":`)
	h = append(h, mj...)
	var off int64
	for _, t := range order {
		name, err := json.Marshal(t.Name)
		if err != nil {
			return nil, err
		}
		dt := t.dtype()
		h = append(h, ',')
		h = append(h, name...)
		h = append(h, `:{"dtype":"`+dt+`","shape":`+fmtInts(t.Shape)+`,"data_offsets":[`...)
		h = strconv.AppendInt(h, off, 10)
		off += t.nbytes()
		h = append(h, ',')
		h = strconv.AppendInt(h, off, 10)
		h = append(h, "]}"...)
	}
	h = append(h, '}')
	// Padding to a multiple of 8 starts the data buffer 8-byte aligned in the
	// file, as the reference writer does for readers that map it in place.
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	return h, nil
}
