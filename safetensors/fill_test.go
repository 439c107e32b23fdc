package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// lazy returns ts with every tensor's values supplied by Fill instead, and
// the order in which the writer asked for them.
func lazy(ts []Tensor) ([]Tensor, *[]string) {
	var asked []string
	out := make([]Tensor, len(ts))
	for i, t := range ts {
		data, u8 := t.Data, t.U8
		name := t.Name
		out[i] = Tensor{Name: t.Name, Shape: t.Shape, Dtype: t.Dtype, Bytes: u8 != nil,
			Fill: func() ([]float32, []byte, error) {
				asked = append(asked, name)
				return data, u8, nil
			}}
	}
	return out, &asked
}

// A checkpoint whose tensors are filled as they are written is the same
// bytes as one written from values in memory, sharded or not, float and
// byte tensors alike, and each Fill is called once, in the order of the
// data.
func TestWriteCheckpointFill(t *testing.T) {
	ts := []Tensor{
		{Name: "b.weight", Shape: []int{3, 5}, Data: seq(15), Dtype: amp.BF16},
		{Name: "a.weight", Shape: []int{7}, Data: seq(7), Dtype: amp.FP32},
		{Name: "c.codes", Shape: []int{9, 1}, U8: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{Name: "d.weight", Shape: []int{2, 3}, Data: seq(6), Dtype: amp.FP16},
	}
	for _, shard := range []int64{0, 40} {
		eager, filled := t.TempDir(), t.TempDir()
		if err := WriteCheckpoint(eager, ts, map[string]string{"k": "v"}, shard); err != nil {
			t.Fatal(err)
		}
		lz, asked := lazy(ts)
		if err := WriteCheckpoint(filled, lz, map[string]string{"k": "v"}, shard); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadDir(eager)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadDir(filled); len(got) != len(want) || (shard > 0) != (len(want) > 1) {
			t.Fatalf("shard %d: %d files eagerly, %d filled", shard, len(want), len(got))
		}
		for _, e := range want {
			w, _ := os.ReadFile(filepath.Join(eager, e.Name()))
			g, err := os.ReadFile(filepath.Join(filled, e.Name()))
			if err != nil || !bytes.Equal(g, w) {
				t.Errorf("shard %d: %s differs when filled (%v)", shard, e.Name(), err)
			}
		}
		if wantOrder := []string{"a.weight", "b.weight", "c.codes", "d.weight"}; !slices.Equal(*asked, wantOrder) {
			t.Errorf("shard %d: filled %v, want %v", shard, *asked, wantOrder)
		}
	}
}

// A Fill that fails or gives the wrong size fails the write, naming the
// tensor, and leaves no file behind.
func TestWriteCheckpointFillErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		name string
		t    Tensor
		want string
	}{
		{"error", Tensor{Name: "w", Shape: []int{2}, Dtype: amp.FP32, Fill: func() ([]float32, []byte, error) { return nil, nil, boom }}, "tensor w: boom"},
		{"short", Tensor{Name: "w", Shape: []int{2}, Dtype: amp.FP32, Fill: func() ([]float32, []byte, error) { return []float32{1}, nil, nil }}, "want 2 values"},
		{"bytes for floats", Tensor{Name: "w", Shape: []int{2}, Dtype: amp.FP32, Fill: func() ([]float32, []byte, error) { return nil, []byte{1, 2}, nil }}, "want 2 values"},
		{"floats for bytes", Tensor{Name: "w", Shape: []int{2}, Bytes: true, Fill: func() ([]float32, []byte, error) { return []float32{1, 2}, nil, nil }}, "want 2 bytes"},
		{"fill and data", Tensor{Name: "w", Shape: []int{2}, Dtype: amp.FP32, Data: []float32{1, 2}, Fill: func() ([]float32, []byte, error) { return nil, nil, nil }}, "both data and a Fill"},
	} {
		dir := t.TempDir()
		err := WriteCheckpoint(dir, []Tensor{c.t}, nil, 0)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
		if c.name == "error" && !errors.Is(err, boom) {
			t.Errorf("%s: %v does not wrap the Fill's error", c.name, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: left %d files", c.name, len(entries))
		}
	}
}

// seq is n distinct values, none exact in 16 bits.
func seq(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 0.1*float32(i) - 0.37
	}
	return v
}

// Checkpoint.Float32 reads a tensor in chunks of a million elements; a
// tensor of several chunks, the last one partial, reads as the whole
// file's bytes decoded at once do (File.Float32), in every dtype.
func TestCheckpointFloat32Chunked(t *testing.T) {
	const n = 2<<20 + 12345
	rng := rand.New(rand.NewPCG(1, 2))
	var data []byte
	header := `{`
	for i, c := range []struct {
		name, dtype string
		size        int
	}{{"bf16", "BF16", 2}, {"f16", "F16", 2}, {"f32", "F32", 4}, {"f64", "F64", 8}} {
		begin := len(data)
		for range n {
			v := rng.NormFloat64()
			switch c.size {
			case 2:
				data = binary.LittleEndian.AppendUint16(data, uint16(rng.Uint32()))
			case 4:
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(v)))
			default:
				data = binary.LittleEndian.AppendUint64(data, math.Float64bits(v*1e39)) // some overflow fp32
			}
		}
		if i > 0 {
			header += ","
		}
		header += fmt.Sprintf(`%q:{"dtype":%q,"shape":[%d],"data_offsets":[%d,%d]}`, c.name, c.dtype, n, begin, len(data))
	}
	header += `}`
	file := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	file = append(append(file, header...), data...)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SingleFileName), file, 0o644); err != nil {
		t.Fatal(err)
	}
	whole, err := Parse("whole", file)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bf16", "f16", "f32", "f64"} {
		want, _, err := whole.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		got, shape, err := ck.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(shape, []int{n}) || len(got) != n {
			t.Fatalf("%s: shape %v, %d values", name, shape, len(got))
		}
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s[%d] = %v chunked, %v whole", name, i, got[i], want[i])
			}
		}
	}
}
