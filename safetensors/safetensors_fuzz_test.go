package safetensors

import (
	"bytes"
	"encoding/binary"
	"maps"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// FuzzHeader fuzzes the header JSON alone, with a correct length prefix
// and a data buffer of dataLen bytes, so that mutations reach the header
// validation rather than the length check (FuzzParse covers the prefix).
// Nothing panics; errors start with the file's name; and a file whose
// tensors are all float32, float16 or bfloat16 reads back the same after
// being written again.
func FuzzHeader(f *testing.F) {
	for _, s := range []struct {
		hdr     string
		dataLen uint16
	}{
		{`{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]}}`, 14},
		{`{"h":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, 2},
		{`{"e":{"dtype":"F32","shape":[0,5],"data_offsets":[0,0]},"f":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}`, 0},
		{`{"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"i":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}}`, 16},
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, 12},
		{`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`, 16},
		{`{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}}`, 8},
		{`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, 0},
		{`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,9223372036854775807]}}`, 4},
		{`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}}`, 4},
		{`{"a":{"DType":"F32","shape":[1],"data_offsets":[0,4]}}`, 4},
		{`{"a":{"dtype":null,"shape":null,"data_offsets":null}}`, 0},
		{`{"__metadata__":{"k":1}}`, 0},
		{`{"__metadata__":{},"__metadata__":{}}`, 0},
		{`{"a\u0000\n":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}}`, 3},
		{`{}   `, 0},
		{`{} {}`, 0},
		{`[]`, 0},
		{"{\"\xff\":1}", 0},
	} {
		f.Add([]byte(s.hdr), s.dataLen)
	}
	f.Fuzz(func(t *testing.T, hdr []byte, dataLen uint16) {
		data := make([]byte, dataLen)
		for i := range data {
			data[i] = byte(i*131 + 7) // varied bits: NaNs, subnormals, infinities
		}
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
		b = append(append(b, hdr...), data...)
		file, err := Parse("f.safetensors", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.safetensors: ") {
				t.Fatalf("error %q does not start with the file name", err)
			}
			return
		}
		var tensors []Tensor
		for _, name := range file.Names() {
			info, _ := file.Info(name)
			format, ok := map[string]amp.Format{"F32": amp.FP32, "F16": amp.FP16, "BF16": amp.BF16}[info.Dtype]
			if !ok {
				if _, _, err := file.Float32(name); info.Dtype != "F64" && err == nil {
					t.Fatalf("%s: dtype %s converted to float32", name, info.Dtype)
				}
				return // not something mixtune writes
			}
			v, shape, err := file.Float32(name)
			if err != nil {
				t.Fatalf("Float32(%q): %v", name, err)
			}
			tensors = append(tensors, Tensor{Name: name, Shape: shape, Data: v, Dtype: format})
		}
		var buf bytes.Buffer
		if err := validate(tensors, file.Metadata()); err != nil {
			t.Fatalf("what Parse accepted does not validate for writing: %v", err)
		}
		if err := encode(&buf, tensors, file.Metadata()); err != nil {
			t.Fatal(err)
		}
		again, err := Parse("again.safetensors", buf.Bytes())
		if err != nil {
			t.Fatalf("written again, it does not parse: %v", err)
		}
		checkSame(t, again, tensors, withFormat(file.Metadata()))
	})
}

// FuzzRoundTrip: tensors written as WriteFile writes them, and (for a
// quarter of the shard values) by WriteCheckpoint, sharded when shard is
// small, read back as written: names, shapes, metadata, and values exactly
// (float32) or rounded to the stored format. What the writers refuse, they
// refuse before touching the disk, with an error that names the path.
func FuzzRoundTrip(f *testing.F) {
	f.Add("w", "b", uint8(0), uint8(2), uint8(3), []byte{0, 0, 128, 63, 0, 0, 192, 127, 1, 0, 0, 0}, "step", "1", int16(9))
	f.Add("a.weight", "a.bias", uint8(1), uint8(1), uint8(1), []byte{0xff, 0xff, 0x7f, 0x7f}, "format", "np", int16(1))
	f.Add("x", "x", uint8(2), uint8(0), uint8(5), []byte(nil), "", "", int16(-1))
	f.Add("__metadata__", "y", uint8(0), uint8(1), uint8(1), []byte{1}, "k", "v", int16(1))
	f.Add("\xff", "ok", uint8(1), uint8(3), uint8(0), []byte{}, "k\xff", "v", int16(2))
	f.Add("é\n\"", "", uint8(2), uint8(4), uint8(4), bytes.Repeat([]byte{0x01, 0x00, 0x80, 0x7f}, 3), "ü", "\u2028", int16(-7))
	f.Fuzz(func(t *testing.T, name1, name2 string, dt, rows, cols uint8, raw []byte, mk, mv string, shard int16) {
		formats := []amp.Format{amp.FP32, amp.BF16, amp.FP16}
		values := func(n, seed int) []float32 {
			v := make([]float32, n)
			for i := range v {
				var w [4]byte
				for j := range w {
					if len(raw) > 0 {
						w[j] = raw[(4*i+j+seed)%len(raw)]
					}
				}
				v[i] = math.Float32frombits(binary.LittleEndian.Uint32(w[:]))
			}
			return v
		}
		r, c := int(rows%17), int(cols%17)
		tensors := []Tensor{
			{Name: name1, Shape: []int{r, c}, Data: values(r*c, 0), Dtype: formats[int(dt)%3]},
			{Name: name2, Shape: []int{c}, Data: values(c, 1), Dtype: formats[int(dt/3)%3]},
			{Name: name2 + ".s", Shape: []int{}, Data: values(1, 2), Dtype: formats[int(dt/9)%3]},
		}
		var meta map[string]string
		if mk != "" {
			meta = map[string]string{mk: mv}
		}
		if err := validate(tensors, meta); err != nil {
			dir := t.TempDir()
			path := filepath.Join(dir, "t.safetensors")
			err := WriteFile(path, tensors, meta)
			if err == nil || !strings.HasPrefix(err.Error(), "write "+path+": ") {
				t.Fatalf("validate refused the tensors, but WriteFile: %v", err)
			}
			if ls(t, dir) != nil {
				t.Fatalf("a refused write left %v", ls(t, dir))
			}
			return
		}
		// In memory: what WriteFile writes, without its fsyncs.
		var buf bytes.Buffer
		if err := encode(&buf, tensors, meta); err != nil {
			t.Fatal(err)
		}
		file, err := Parse("t.safetensors", buf.Bytes())
		if err != nil {
			t.Fatalf("Parse of what encode wrote: %v", err)
		}
		checkSame(t, file, tensors, withFormat(meta))
		if shard%8 != 1 && shard%8 != -1 {
			return
		}
		// On disk, through the checkpoint writer: sharded when shard is
		// smaller than the data, one file when it is negative or larger.
		// Only for shard ≡ ±1 (mod 8): the writer's fsyncs are slow.
		ckpt := t.TempDir()
		if err := WriteCheckpoint(ckpt, tensors, meta, int64(shard)); err != nil {
			t.Fatalf("WriteCheckpoint: %v", err)
		}
		cp, err := OpenCheckpoint(ckpt)
		if err != nil {
			t.Fatalf("OpenCheckpoint of what WriteCheckpoint wrote: %v", err)
		}
		checkSame(t, cp, tensors, nil)
	})
}

// withFormat is the metadata the writers store: meta, with "format": "pt"
// unless meta sets a format.
func withFormat(meta map[string]string) map[string]string {
	m := maps.Clone(meta)
	if m == nil {
		m = map[string]string{}
	}
	if _, ok := m["format"]; !ok {
		m["format"] = "pt"
	}
	return m
}

// reader is what File and Checkpoint share.
type reader interface {
	Names() []string
	Info(name string) (Info, bool)
	Float32(name string) ([]float32, []int, error)
}

// checkSame fails unless r holds exactly tensors, each value rounded to
// its format, and (when meta is not nil, for a File) the metadata meta.
func checkSame(t *testing.T, r reader, tensors []Tensor, meta map[string]string) {
	t.Helper()
	var names []string
	for _, tn := range tensors {
		names = append(names, tn.Name)
	}
	slices.Sort(names)
	if got := r.Names(); !slices.Equal(got, names) {
		t.Fatalf("names %q, want %q", got, names)
	}
	for _, tn := range tensors {
		v, shape, err := r.Float32(tn.Name)
		if err != nil {
			t.Fatalf("%q: %v", tn.Name, err)
		}
		if !slices.Equal(shape, tn.Shape) && !(len(shape) == 0 && len(tn.Shape) == 0) {
			t.Fatalf("%q: shape %v, want %v", tn.Name, shape, tn.Shape)
		}
		info, _ := r.Info(tn.Name)
		if dt, _ := dtypeName(tn.Dtype); info.Dtype != dt {
			t.Fatalf("%q: dtype %s, want %s", tn.Name, info.Dtype, dt)
		}
		if len(v) != len(tn.Data) {
			t.Fatalf("%q: %d values, want %d", tn.Name, len(v), len(tn.Data))
		}
		for i, x := range tn.Data {
			want := tn.Dtype.Round(x)
			if math.Float32bits(v[i]) != math.Float32bits(want) && !(v[i] != v[i] && want != want) {
				t.Fatalf("%q[%d]: %v (%#08x) read back as %v (%#08x), want %v", tn.Name, i, x, math.Float32bits(x), v[i], math.Float32bits(v[i]), want)
			}
		}
	}
	if f, ok := r.(*File); ok && meta != nil && !reflect.DeepEqual(f.Metadata(), meta) {
		t.Fatalf("metadata %v, want %v", f.Metadata(), meta)
	}
}
