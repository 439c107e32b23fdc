package quant

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// DefaultBlockSize is bitsandbytes' default 4-bit block: 64 values share
// one absmax.
const DefaultBlockSize = 64

// NestedBlockSize is the block of double quantization: 256 absmax values
// share one float32 scale.
const NestedBlockSize = 256

// Tensor is a 4-bit block-quantized tensor in bitsandbytes' layout. The
// elements are taken in row-major order and cut into blocks of BlockSize;
// element i is Code[nibble i] × absmax(i / BlockSize), where nibble i is the
// high half of Packed[i/2] for even i and the low half for odd i.
type Tensor struct {
	Type      Type
	Shape     []int
	BlockSize int
	Code      [16]float32 // the 4-bit table (a checkpoint's quant_map)
	Packed    []byte      // (numel+1)/2 bytes

	// Absmax holds one float32 scale per block when the tensor is not
	// double quantized (Nested false).
	Absmax []float32

	// Double quantization: block b's absmax is
	// NestedCode[AbsmaxCodes[b]] × NestedAbsmax[b/NestedBlock] + Offset.
	Nested       bool
	AbsmaxCodes  []byte
	NestedAbsmax []float32
	NestedCode   [256]float32
	NestedBlock  int
	Offset       float32
}

// Numel is the number of elements.
func (q *Tensor) Numel() int {
	n := 1
	for _, d := range q.Shape {
		n *= d
	}
	return n
}

// Blocks is the number of absmax blocks.
func (q *Tensor) Blocks() int { return (q.Numel() + q.BlockSize - 1) / q.BlockSize }

// Bytes is the memory the tensor holds: packed codes and scales.
func (q *Tensor) Bytes() int {
	n := len(q.Packed) + 4*len(q.Absmax) + len(q.AbsmaxCodes) + 4*len(q.NestedAbsmax)
	if q.Nested {
		n += 4 * 256
	}
	return n + 4*16
}

// BlockAbsmax returns block b's scale, resolving double quantization.
func (q *Tensor) BlockAbsmax(b int) float32 {
	if !q.Nested {
		return q.Absmax[b]
	}
	// the conversion rounds the product, as bitsandbytes does before it
	// adds the offset, where a compiler could otherwise fuse the two
	return float32(q.NestedCode[q.AbsmaxCodes[b]]*q.NestedAbsmax[b/q.NestedBlock]) + q.Offset
}

// Check reports whether the tensor's parts have the sizes its shape and
// block sizes imply.
func (q *Tensor) Check() error {
	if q.BlockSize <= 0 || q.BlockSize%2 != 0 {
		return fmt.Errorf("quant: block size %d is not a positive even number", q.BlockSize)
	}
	n := q.Numel()
	if n <= 0 {
		return fmt.Errorf("quant: shape %v holds no elements", q.Shape)
	}
	if len(q.Packed) != (n+1)/2 {
		return fmt.Errorf("quant: %d packed bytes for %d elements (want %d)", len(q.Packed), n, (n+1)/2)
	}
	nb := q.Blocks()
	if !q.Nested {
		if len(q.Absmax) != nb {
			return fmt.Errorf("quant: %d absmax values for %d blocks of %d", len(q.Absmax), nb, q.BlockSize)
		}
		return nil
	}
	if q.NestedBlock <= 0 {
		return fmt.Errorf("quant: nested block size %d is not positive", q.NestedBlock)
	}
	if len(q.AbsmaxCodes) != nb {
		return fmt.Errorf("quant: %d quantized absmax values for %d blocks of %d", len(q.AbsmaxCodes), nb, q.BlockSize)
	}
	if want := (nb + q.NestedBlock - 1) / q.NestedBlock; len(q.NestedAbsmax) != want {
		return fmt.Errorf("quant: %d nested absmax values for %d absmax blocks of %d (want %d)", len(q.NestedAbsmax), nb, q.NestedBlock, want)
	}
	return nil
}

// ErrNonFinite is returned for a tensor holding NaN or ±Inf, which has no
// 4-bit form.
var ErrNonFinite = errors.New("quant: non-finite value")

// Options sets how Quantize works.
type Options struct {
	BlockSize int  // 0 means DefaultBlockSize
	Double    bool // quantize the absmax values too (double quantization)
}

// Quantize returns vals (a tensor of the given shape, row-major) in t's
// 4-bit form, as bitsandbytes' quantize_4bit computes it: per block, the
// absmax m; each value x is scaled by the float32 reciprocal 1/m (not
// divided: bitsandbytes multiplies) and snapped to its code (quantize4). A
// block of zeros keeps absmax 0 and the code of 0. With Double, the absmax
// values minus their mean (Offset) are quantized to DynamicMap in blocks
// of NestedBlockSize, each block scaled by its own absmax.
func Quantize(t Type, vals []float32, shape []int, o Options) (*Tensor, error) {
	q, err := newTensor(t, vals, shape, o)
	if err != nil {
		return nil, err
	}
	q.Packed = make([]byte, (len(vals)+1)/2)
	absmax := make([]float32, q.Blocks())
	if err := q.quantize(vals, absmax); err != nil {
		return nil, err
	}
	if !q.Nested {
		q.Absmax = absmax
		return q, nil
	}
	q.AbsmaxCodes = make([]byte, len(absmax))
	q.NestedAbsmax = make([]float32, (len(absmax)+q.NestedBlock-1)/q.NestedBlock)
	q.doubleQuantize(absmax)
	return q, nil
}

// QuantizeBlob is Encode of Quantize's tensor, with the codes and scales
// written into the blob in place: the only allocation the size of the
// tensor is the blob itself (and, with double quantization, a float32 per
// block), so quantizing a model tensor by tensor leaves nearly no garbage
// behind. The blob is byte for byte Quantize's Encode.
func QuantizeBlob(t Type, vals []float32, shape []int, o Options) ([]byte, error) {
	q, err := newTensor(t, vals, shape, o)
	if err != nil {
		return nil, err
	}
	// the blob with its parts zero, read back for views of them
	blob := q.encodeHeader(q.blobSize())
	blob = blob[:cap(blob)]
	v, err := Decode(blob)
	if err != nil {
		return nil, fmt.Errorf("quant: the blob of a new tensor: %w", err)
	}
	if !aliases(blob, v.Absmax) || !aliases(blob, v.NestedAbsmax) { // not little-endian, or unaligned
		q, err := Quantize(t, vals, shape, o)
		if err != nil {
			return nil, err
		}
		return q.Encode(), nil
	}
	absmax := v.Absmax
	if v.Nested {
		absmax = make([]float32, v.Blocks())
	}
	if err := v.quantize(vals, absmax); err != nil {
		return nil, err
	}
	if v.Nested {
		v.doubleQuantize(absmax)
		binary.LittleEndian.PutUint32(blob[v.offsetAt():], math.Float32bits(v.Offset))
	}
	return blob, nil
}

// aliases reports whether fs (empty, or a view Decode made) lies in blob.
func aliases(blob []byte, fs []float32) bool {
	if len(fs) == 0 {
		return true
	}
	p, lo := uintptr(unsafe.Pointer(&fs[0])), uintptr(unsafe.Pointer(&blob[0]))
	return p >= lo && p < lo+uintptr(len(blob))
}

// newTensor is a tensor's description (type, shape, block sizes and codes)
// before its values are quantized, after checking the arguments.
func newTensor(t Type, vals []float32, shape []int, o Options) (*Tensor, error) {
	bs := o.BlockSize
	if bs == 0 {
		bs = DefaultBlockSize
	}
	if bs < 0 || bs%2 != 0 {
		return nil, fmt.Errorf("quant: block size %d is not a positive even number", bs)
	}
	q := &Tensor{Type: t, Shape: append([]int(nil), shape...), BlockSize: bs, Code: t.Code()}
	if n := q.Numel(); n != len(vals) {
		return nil, fmt.Errorf("quant: %d values for shape %v", len(vals), shape)
	}
	if t != NF4 && t != FP4 {
		return nil, fmt.Errorf("quant: unknown 4-bit type %v", t)
	}
	if o.Double {
		q.Nested, q.NestedBlock, q.NestedCode = true, NestedBlockSize, DynamicMap()
	}
	return q, nil
}

// quantize writes the codes of vals into q.Packed (zero on entry) and
// each block's absmax into absmax.
func (q *Tensor) quantize(vals, absmax []float32) error {
	bs, t := q.BlockSize, q.Type
	for b := range absmax {
		lo, hi := b*bs, min((b+1)*bs, len(vals))
		var m float32
		for i, v := range vals[lo:hi] {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("%w at element %d", ErrNonFinite, lo+i)
			}
			m = max(m, float32(math.Abs(float64(v))))
		}
		absmax[b] = m
		for i := lo; i < hi; i++ {
			c := t.zeroCode()
			if m > 0 {
				c = t.quantize4(vals[i] * (1 / m))
			}
			q.setNibble(i, c)
		}
	}
	return nil
}

// doubleQuantize stores absmax as bitsandbytes' compress_statistics does:
// the mean (float32, summed in float64) subtracted, then blockwise 8-bit
// quantization, each value scaled by its nested block's absmax and snapped
// to the nearest NestedCode entry (ties to the lower entry), into
// q.AbsmaxCodes and q.NestedAbsmax (allocated by the caller).
func (q *Tensor) doubleQuantize(absmax []float32) {
	var sum float64
	for _, v := range absmax {
		sum += float64(v)
	}
	q.Offset = float32(sum / float64(len(absmax)))
	nbs := q.NestedBlock
	for nb := range q.NestedAbsmax {
		lo, hi := nb*nbs, min((nb+1)*nbs, len(absmax))
		var m float32
		for _, v := range absmax[lo:hi] {
			m = max(m, float32(math.Abs(float64(v-q.Offset))))
		}
		q.NestedAbsmax[nb] = m
		for i := lo; i < hi; i++ {
			x := float32(0)
			if m > 0 {
				x = (absmax[i] - q.Offset) * (1 / m)
			}
			q.AbsmaxCodes[i] = nearest8(&q.NestedCode, x)
		}
	}
}

func (q *Tensor) setNibble(i int, c byte) {
	if i%2 == 0 {
		q.Packed[i/2] = q.Packed[i/2]&0x0f | c<<4
	} else {
		q.Packed[i/2] = q.Packed[i/2]&0xf0 | c&0x0f
	}
}

// Nibble returns element i's 4-bit code.
func (q *Tensor) Nibble(i int) byte {
	if i%2 == 0 {
		return q.Packed[i/2] >> 4
	}
	return q.Packed[i/2] & 0x0f
}

// DequantizeRange writes elements [lo, hi) (row-major) to dst[:hi-lo]:
// Code[nibble] × the block's absmax, one float32 product each, as
// bitsandbytes' dequantize_4bit computes them.
func (q *Tensor) DequantizeRange(dst []float32, lo, hi int) {
	dst = dst[:hi-lo]
	code := &q.Code
	for i := lo; i < hi; {
		b := i / q.BlockSize
		end := min(hi, (b+1)*q.BlockSize)
		m := q.BlockAbsmax(b)
		j := i
		if j%2 == 1 { // a block's odd start: the low nibble first
			dst[j-lo] = code[q.Packed[j/2]&0x0f] * m
			j++
		}
		for ; j+1 < end; j += 2 {
			p := q.Packed[j/2]
			dst[j-lo] = code[p>>4] * m
			dst[j+1-lo] = code[p&0x0f] * m
		}
		if j < end {
			dst[j-lo] = code[q.Packed[j/2]>>4] * m
		}
		i = end
	}
}

// Dequantize returns the whole tensor as float32.
func (q *Tensor) Dequantize() []float32 {
	out := make([]float32, q.Numel())
	q.DequantizeRange(out, 0, len(out))
	return out
}
