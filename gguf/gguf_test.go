package gguf

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

func sampleFile() *File {
	rng := rand.New(rand.NewPCG(1, 2))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	return &File{
		KV: []KV{
			{"general.architecture", "llama"},
			{"u8", uint8(7)}, {"i8", int8(-7)}, {"u16", uint16(700)}, {"i16", int16(-700)},
			{"u32", uint32(70000)}, {"i32", int32(-70000)}, {"f32", float32(1.5)}, {"bool", true},
			{"u64", uint64(1) << 40}, {"i64", int64(-1) << 40}, {"f64", 2.25},
			{"strs", []string{"a", "", "ĠĊ"}}, {"ints", []int32{1, -2, 3}}, {"floats", []float32{0.5, -1}},
			{"bytes", []uint8{1, 2, 3}}, {"bools", []bool{true, false}}, {"empty", []string{}},
		},
		Tensors: []Tensor{
			{Name: "a", Shape: []int{3, 5}, Type: F32, Data: vals(15)},
			{Name: "b", Shape: []int{2, 7}, Type: F16, Data: vals(14)},
			{Name: "c", Shape: []int{3}, Type: BF16, Data: vals(3)},
			{Name: "d", Shape: []int{2, 64}, Type: Q8_0, Data: vals(128)},
		},
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	f := sampleFile()
	var buf bytes.Buffer
	n, err := f.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	b := buf.Bytes()
	if string(b[:4]) != "GGUF" || binary.LittleEndian.Uint32(b[4:]) != 3 {
		t.Fatalf("header % x", b[:8])
	}
	p, err := Read(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%#v", p.KV) != fmt.Sprintf("%#v", f.KV) {
		t.Fatalf("metadata read back as\n%#v\nwant\n%#v", p.KV, f.KV)
	}
	if p.DataOffset%32 != 0 {
		t.Fatalf("data section at %d, not aligned to 32", p.DataOffset)
	}
	for i, want := range f.Tensors {
		got := p.Tensors[i]
		if got.Name != want.Name || got.Type != want.Type || !slices.Equal(got.Shape(), want.Shape) || got.Offset%32 != 0 {
			t.Fatalf("tensor %d read as %+v, want %s %v %v", i, got, want.Name, want.Type, want.Shape)
		}
		// ne is the shape reversed: ne[0] is the row length
		if got.Dims[0] != uint64(want.Shape[len(want.Shape)-1]) {
			t.Fatalf("tensor %s: ne %v for shape %v", want.Name, got.Dims, want.Shape)
		}
		vals, _, err := p.Float32(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		for j, v := range want.Data {
			var exp float32
			switch want.Type {
			case F32:
				exp = v
			case F16:
				exp = amp.FP16.Round(v)
			case BF16:
				exp = amp.BF16.Round(v)
			case Q8_0:
				// within half a quantization step of the block's scale
				exp = vals[j]
				var amax float64
				for _, x := range want.Data[j/32*32 : j/32*32+32] {
					amax = math.Max(amax, math.Abs(float64(x)))
				}
				if d := math.Abs(float64(vals[j] - v)); d > amax/127*0.51 {
					t.Fatalf("q8_0 value %d: %v decoded as %v (step %v)", j, v, vals[j], amax/127)
				}
			}
			if vals[j] != exp {
				t.Fatalf("tensor %s[%d]: read %v, want %v", want.Name, j, vals[j], exp)
			}
		}
	}
	// a different alignment is honoured by writer and reader alike
	f.Set("general.alignment", uint32(64))
	buf.Reset()
	if _, err := f.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	p, err = Read(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range p.Tensors {
		if ti.Offset%64 != 0 || p.DataOffset%64 != 0 {
			t.Fatalf("alignment 64 not kept: data at %d, %s at %d", p.DataOffset, ti.Name, ti.Offset)
		}
	}
}

// q8_0 as quantize_row_q8_0_ref: d = amax/127, values roundf(x/d) with
// halves away from zero, the scale stored as fp16 but the values computed
// with the fp32 scale.
func TestQ8_0RoundsAsLlamaCpp(t *testing.T) {
	block := make([]float32, 32)
	block[0] = 127 // d = 1 exactly
	block[1], block[2], block[3], block[4], block[5] = 2.5, -2.5, 0.5, 1.5, -0.49
	got := AppendEncoded(nil, Q8_0, block)
	if len(got) != 34 {
		t.Fatalf("a block is %d bytes, want 34", len(got))
	}
	if d := binary.LittleEndian.Uint16(got); d != 0x3C00 {
		t.Fatalf("scale %#04x, want fp16 1.0 (0x3c00)", d)
	}
	want := []int8{127, 3, -3, 1, 2, 0}
	for i, w := range want {
		if q := int8(got[2+i]); q != w {
			t.Fatalf("value %v quantized to %d, want %d (roundf: halves away from zero)", block[i], q, w)
		}
	}
	// d = 100/127 is not an fp16 value: the stored scale is rounded, the
	// quantization is not, so the largest value still maps to 127
	block = make([]float32, 32)
	block[7] = -100
	block[8] = 50
	got = AppendEncoded(nil, Q8_0, block)
	d32 := float32(100) / 127
	if d := binary.LittleEndian.Uint16(got); d != amp.FP16.Bits16(d32) {
		t.Fatalf("scale %#04x, want fp16(%v)", d, d32)
	}
	if q := int8(got[2+7]); q != -127 {
		t.Fatalf("-amax quantized to %d, want -127", q)
	}
	if q, w := int8(got[2+8]), int8(math.Round(float64(50*(1/d32)))); q != w {
		t.Fatalf("50 quantized to %d, want %d", q, w)
	}
	// an all-zero block has scale 0 and values 0
	got = AppendEncoded(nil, Q8_0, make([]float32, 32))
	if !slices.Equal(got, make([]byte, 34)) {
		t.Fatalf("zero block encoded as % x", got)
	}
	if _, err := Q8_0.RowBytes(48); err == nil {
		t.Fatal("a 48-value q8_0 row was accepted")
	}
}

func TestHalfPrecisionBits(t *testing.T) {
	for _, c := range []struct {
		x        float32
		f16, b16 uint16
	}{
		{1, 0x3C00, 0x3F80},
		{-2, 0xC000, 0xC000},
		{65504, 0x7BFF, 0x4780}, // bf16 rounds 0x477fe000 up
		// 1 + 2^-8 is a tie in bf16: to even, 1.0
		{1 + 1.0/256, 0x3C04, 0x3F80},
	} {
		f := AppendEncoded(nil, F16, []float32{c.x})
		b := AppendEncoded(nil, BF16, []float32{c.x})
		if g := binary.LittleEndian.Uint16(f); g != c.f16 {
			t.Errorf("f16(%v) = %#04x, want %#04x", c.x, g, c.f16)
		}
		if g := binary.LittleEndian.Uint16(b); g != c.b16 {
			t.Errorf("bf16(%v) = %#04x, want %#04x", c.x, g, c.b16)
		}
	}
}

func TestCheckRefusesBadFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(f *File)
		want string
	}{
		{"duplicate key", func(f *File) { f.KV = append(f.KV, KV{"u8", uint8(1)}) }, "u8 appears twice"},
		{"bad value", func(f *File) { f.KV = append(f.KV, KV{"x", 3}) }, "unsupported value type int"},
		{"duplicate tensor", func(f *File) { f.Tensors = append(f.Tensors, f.Tensors[0]) }, "tensor a appears twice"},
		{"shape", func(f *File) { f.Tensors[0].Shape = []int{4, 5} }, "tensor a has shape [4 5] (20 values) but 15 values"},
		{"NaN", func(f *File) { f.Tensors[1].Data[3] = float32(math.NaN()) }, "tensor b holds a non-finite value"},
		{"q8_0 row", func(f *File) {
			f.Tensors[3].Shape = []int{4, 32}
			f.Tensors[3].Type = Q8_0
			f.Tensors[3].Shape = []int{8, 16}
		}, "tensor d: q8_0 needs rows of a multiple of 32"},
	} {
		f := sampleFile()
		c.edit(f)
		_, err := f.WriteTo(&bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestReadRejectsCorruptFiles(t *testing.T) {
	var buf bytes.Buffer
	if _, err := sampleFile().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	mutate := func(f func(b []byte) []byte) []byte { return f(slices.Clone(good)) }
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"magic", mutate(func(b []byte) []byte { b[0] = 'X'; return b }), "not a GGUF file"},
		{"version", mutate(func(b []byte) []byte { b[4] = 2; return b }), "GGUF version 2"},
		{"truncated header", good[:40], "file ends early"},
		{"truncated data", good[:len(good)-40], "runs past the end of the file"},
		{"huge array", mutate(func(b []byte) []byte {
			i := bytes.Index(b, []byte("strs"))
			binary.LittleEndian.PutUint64(b[i+4+4+4:], 1<<40)
			return b
		}), "longer than the file"},
	} {
		_, err := Read(bytes.NewReader(c.b), int64(len(c.b)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

// The permutation turns transformers' rotary embedding (rotate halves:
// pairs (j, j+hd/2)) into ggml's (rotate adjacent pairs (2j, 2j+1)): q·R
// in one layout must be the permuted vector rotated in the other.
func TestPermutationMapsHalfRotationToPairRotation(t *testing.T) {
	const heads, hd = 3, 8
	rng := rand.New(rand.NewPCG(3, 4))
	q := make([]float32, heads*hd)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	pos := 5.0
	theta := func(j int) float64 { return pos * math.Pow(10000, -2*float64(j)/hd) }
	hf := make([]float64, len(q)) // rotate_half
	for h := 0; h < heads; h++ {
		for j := 0; j < hd/2; j++ {
			a, b := float64(q[h*hd+j]), float64(q[h*hd+j+hd/2])
			c, s := math.Cos(theta(j)), math.Sin(theta(j))
			hf[h*hd+j], hf[h*hd+j+hd/2] = a*c-b*s, b*c+a*s
		}
	}
	pq := permuteRows(q, heads, 1)
	gg := make([]float64, len(q)) // ggml_rope, mode 0: adjacent pairs
	for h := 0; h < heads; h++ {
		for j := 0; j < hd/2; j++ {
			a, b := float64(pq[h*hd+2*j]), float64(pq[h*hd+2*j+1])
			c, s := math.Cos(theta(j)), math.Sin(theta(j))
			gg[h*hd+2*j], gg[h*hd+2*j+1] = a*c-b*s, b*c+a*s
		}
	}
	hf32 := make([]float32, len(hf))
	for i, v := range hf {
		hf32[i] = float32(v)
	}
	want := permuteRows(hf32, heads, 1)
	for i := range gg {
		if math.Abs(gg[i]-float64(want[i])) > 1e-6 {
			t.Fatalf("element %d: pair rotation of the permuted q gives %v, the permuted half rotation %v", i, gg[i], want[i])
		}
	}
	// rows of a matrix move whole
	w := []float32{0, 1, 10, 11, 20, 21, 30, 31} // 4 rows × 2 columns, one head
	if got := permuteRows(w, 1, 2); !slices.Equal(got, []float32{0, 1, 20, 21, 10, 11, 30, 31}) {
		t.Fatalf("permuted rows %v", got)
	}
}

// FuzzReadWrite: any bytes the reader accepts rewrite to a file that reads
// back the same, and no input makes the reader panic or over-allocate.
func FuzzReadWrite(f *testing.F) {
	var buf bytes.Buffer
	if _, err := sampleFile().WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("GGUF\x03\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		out := &File{KV: p.KV}
		for _, ti := range p.Tensors {
			vals, shape, err := p.Float32(ti.Name)
			if err != nil {
				t.Fatalf("an accepted file's tensor %s does not read: %v", ti.Name, err)
			}
			out.Tensors = append(out.Tensors, Tensor{Name: ti.Name, Shape: shape, Type: ti.Type, Data: vals})
		}
		if out.Check() != nil {
			return // non-finite values or types this writer does not write
		}
		var w bytes.Buffer
		if _, err := out.WriteTo(&w); err != nil {
			t.Fatal(err)
		}
		p2, err := Read(bytes.NewReader(w.Bytes()), int64(w.Len()))
		if err != nil {
			t.Fatalf("a rewritten file does not read: %v", err)
		}
		if fmt.Sprintf("%#v", p2.KV) != fmt.Sprintf("%#v", p.KV) {
			t.Fatalf("metadata changed in the round trip")
		}
		for i, ti := range p2.Tensors {
			if ti.Name != p.Tensors[i].Name || ti.Type != p.Tensors[i].Type || !slices.Equal(ti.Dims, p.Tensors[i].Dims) {
				t.Fatalf("tensor %d changed: %+v, was %+v", i, ti, p.Tensors[i])
			}
			v1, _, _ := p.Float32(ti.Name)
			v2, _, _ := p2.Float32(ti.Name)
			if ti.Type != Q8_0 && fmt.Sprint(v1) != fmt.Sprint(v2) {
				t.Fatalf("tensor %s values changed", ti.Name)
			}
		}
	})
}
