package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// A blob is a Tensor in one byte slice, so that it can travel as the value
// of a graph node (a uint8 tensor) and be read back, without copying the
// codes, by whichever op receives it: a checkpointed layer's graph is
// built once and run with each layer's weights bound in turn, so an op
// must learn everything about its weight from the value it is given.
//
// Layout, little-endian: magic "MQ4\x01"; u32 type, nested, block size,
// nested block size, rank; u32 dims; f32 offset; f32 code[16]; then, when
// nested, f32 nested code[256], f32 nested absmax, u8 absmax codes,
// otherwise f32 absmax; then the packed codes.
var blobMagic = [4]byte{'M', 'Q', '4', 1}

// Encode returns q as a blob.
func (q *Tensor) Encode() []byte {
	out := q.encodeHeader(q.blobSize())
	if q.Nested {
		out = appendFloats(out, q.NestedAbsmax...)
		out = append(out, q.AbsmaxCodes...)
	} else {
		out = appendFloats(out, q.Absmax...)
	}
	return append(out, q.Packed...)
}

// blobSize is the length of q's blob.
func (q *Tensor) blobSize() int {
	nb := q.Blocks()
	n := 24 + 4*len(q.Shape) + 4 + 4*16 + (q.Numel()+1)/2
	if q.Nested {
		return n + 4*256 + 4*((nb+q.NestedBlock-1)/q.NestedBlock) + nb
	}
	return n + 4*nb
}

// offsetAt is where a blob of q's rank holds the offset.
func (q *Tensor) offsetAt() int { return 24 + 4*len(q.Shape) }

// encodeHeader returns the blob's parts up to its scales (the header, the
// dims, the offset, the code and the nested code), with capacity size.
func (q *Tensor) encodeHeader(size int) []byte {
	le := binary.LittleEndian
	nested := uint32(0)
	if q.Nested {
		nested = 1
	}
	out := make([]byte, 0, size)
	out = append(out, blobMagic[:]...)
	for _, v := range []uint32{uint32(q.Type), nested, uint32(q.BlockSize), uint32(q.NestedBlock), uint32(len(q.Shape))} {
		out = le.AppendUint32(out, v)
	}
	for _, d := range q.Shape {
		out = le.AppendUint32(out, uint32(d))
	}
	out = appendFloats(out, q.Offset)
	out = appendFloats(out, q.Code[:]...)
	if q.Nested {
		out = appendFloats(out, q.NestedCode[:]...)
	}
	return out
}

func appendFloats(out []byte, vs ...float32) []byte {
	for _, v := range vs {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}

var errBlob = errors.New("quant: not a 4-bit weight blob")

// littleEndian reports whether float32 slices can alias blob bytes.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// Decode reads a blob. The returned tensor's packed codes, absmax codes and
// (on a little-endian machine, with the blob 4-byte aligned, as Go
// allocates it) its float scales alias the blob.
func Decode(blob []byte) (*Tensor, error) {
	le := binary.LittleEndian
	if len(blob) < 24 || [4]byte(blob[:4]) != blobMagic {
		return nil, errBlob
	}
	u := func(i int) int { return int(le.Uint32(blob[4+4*i:])) }
	q := &Tensor{Type: Type(u(0)), Nested: u(1) == 1, BlockSize: u(2), NestedBlock: u(3)}
	rank := u(4)
	off := 24
	if rank > 8 || len(blob) < off+4*rank+4+64 {
		return nil, fmt.Errorf("%w: rank %d", errBlob, rank)
	}
	for i := 0; i < rank; i++ {
		q.Shape = append(q.Shape, int(le.Uint32(blob[off:])))
		off += 4
	}
	if q.BlockSize <= 0 || (q.Nested && q.NestedBlock <= 0) || q.Numel() <= 0 {
		return nil, fmt.Errorf("%w: block %d, nested block %d, shape %v", errBlob, q.BlockSize, q.NestedBlock, q.Shape)
	}
	floats := func(n int) ([]float32, error) {
		if len(blob) < off+4*n {
			return nil, fmt.Errorf("%w: %d bytes, short", errBlob, len(blob))
		}
		b := blob[off : off+4*n]
		off += 4 * n
		if littleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 == 0 {
			return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
		}
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		}
		return out, nil
	}
	bytes := func(n int) ([]byte, error) {
		if len(blob) < off+n {
			return nil, fmt.Errorf("%w: %d bytes, short", errBlob, len(blob))
		}
		b := blob[off : off+n : off+n]
		off += n
		return b, nil
	}
	f, _ := floats(1)
	q.Offset = f[0]
	f, _ = floats(16)
	q.Code = [16]float32(f)
	nb := q.Blocks()
	var err error
	if q.Nested {
		if f, err = floats(256); err != nil {
			return nil, err
		}
		q.NestedCode = [256]float32(f)
		if q.NestedAbsmax, err = floats((nb + q.NestedBlock - 1) / q.NestedBlock); err != nil {
			return nil, err
		}
		if q.AbsmaxCodes, err = bytes(nb); err != nil {
			return nil, err
		}
	} else if q.Absmax, err = floats(nb); err != nil {
		return nil, err
	}
	if q.Packed, err = bytes((q.Numel() + 1) / 2); err != nil {
		return nil, err
	}
	if off != len(blob) {
		return nil, fmt.Errorf("%w: %d bytes past the end", errBlob, len(blob)-off)
	}
	return q, q.Check()
}

// BlobLayout says where a blob's parts lie, as byte offsets from its
// start: what a kernel reading the blob in place (a Vulkan shader) needs.
// The float parts are 4-byte aligned. A part the blob lacks is -1.
type BlobLayout struct {
	Code         int // the 16 float32 code values
	Absmax       int // a float32 absmax per block (not double quantized)
	NestedCode   int // the 256 float32 values of the nested code (double quantized)
	NestedAbsmax int // a float32 per nested block (double quantized)
	AbsmaxCodes  int // a byte per block: its absmax's nested code (double quantized)
	Packed       int // the packed 4-bit codes, two to a byte
}

// Layout decodes blob and says where its parts lie.
func Layout(blob []byte) (*Tensor, BlobLayout, error) {
	q, err := Decode(blob)
	if err != nil {
		return nil, BlobLayout{}, err
	}
	l := BlobLayout{Absmax: -1, NestedCode: -1, NestedAbsmax: -1, AbsmaxCodes: -1}
	l.Code = 24 + 4*len(q.Shape) + 4 // the header, the dims, the offset
	if q.Nested {
		l.NestedCode = l.Code + 4*16
		l.NestedAbsmax = l.NestedCode + 4*256
		l.AbsmaxCodes = l.NestedAbsmax + 4*len(q.NestedAbsmax)
		l.Packed = l.AbsmaxCodes + len(q.AbsmaxCodes)
	} else {
		l.Absmax = l.Code + 4*16
		l.Packed = l.Absmax + 4*len(q.Absmax)
	}
	return q, l, nil
}
