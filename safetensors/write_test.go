package safetensors

import (
	"bytes"
	"errors"
	"github.com/mixtune/mixtune/internal/atomicfile"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// awkward holds values that stress every format: signed zeros, subnormals,
// rounding ties, values that overflow fp16, and non-finite values.
var awkward = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1, 0.1, 1.0 / 3, -2.5e-3,
	1 + 1.0/256, 1 + 3.0/256, // bf16 ties: to even, down then up
	1 + 1.0/2048, // fp16 tie
	1e-40, math.SmallestNonzeroFloat32, 1e-8, 6e-8, 6.1e-5,
	65504, 65519, 65520, 70000, -1e6, 3.4e38, math.MaxFloat32,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
}

func TestRoundTrip(t *testing.T) {
	formats := []struct {
		format amp.Format
		dtype  string
	}{
		{amp.FP32, "F32"},
		{amp.BF16, "BF16"},
		{amp.FP16, "F16"},
	}
	var tensors []Tensor
	for i, f := range formats {
		tensors = append(tensors,
			Tensor{Name: "vec." + f.dtype, Shape: []int{len(awkward)}, Data: awkward, Dtype: f.format},
			Tensor{Name: "mat." + f.dtype, Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, float32(i)}, Dtype: f.format},
			Tensor{Name: "scalar." + f.dtype, Shape: []int{}, Data: []float32{0.3}, Dtype: f.format},
			Tensor{Name: "empty." + f.dtype, Shape: []int{0, 4}, Data: nil, Dtype: f.format},
		)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	meta := map[string]string{"step": "100", "note": "ünïcode"}
	if err := WriteFile(path, tensors, meta); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Metadata(), map[string]string{"format": "pt", "step": "100", "note": "ünïcode"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Metadata() = %v, want %v", got, want)
	}
	var names []string
	for _, tt := range tensors {
		names = append(names, tt.Name)
	}
	slices.Sort(names)
	if got := f.Names(); !reflect.DeepEqual(got, names) {
		t.Errorf("Names() = %v, want %v", got, names)
	}

	for _, f16 := range formats {
		changed := 0
		for _, x := range awkward {
			if math.Float32bits(f16.format.Round(x)) != math.Float32bits(x) {
				changed++
			}
		}
		// Without values that round, a writer that ignored Dtype would pass.
		if f16.format != amp.FP32 && changed == 0 {
			t.Fatalf("no test value changes when rounded to %v", f16.format)
		}
	}
	for _, tt := range tensors {
		info, ok := f.Info(tt.Name)
		want, _ := dtypeName(tt.Dtype)
		if !ok || info.Dtype != want || !reflect.DeepEqual(info.Shape, tt.Shape) {
			t.Errorf("Info(%q) = %+v, %v; want dtype %s shape %v", tt.Name, info, ok, want, tt.Shape)
		}
		got, shape, err := f.Float32(tt.Name)
		if err != nil {
			t.Errorf("Float32(%q): %v", tt.Name, err)
			continue
		}
		if !reflect.DeepEqual(shape, tt.Shape) || len(got) != len(tt.Data) {
			t.Errorf("Float32(%q) has shape %v and %d values, want %v and %d", tt.Name, shape, len(got), tt.Shape, len(tt.Data))
			continue
		}
		for i, x := range tt.Data {
			// F32 must come back bit for bit; the 16-bit formats exactly as
			// amp rounds, NaN payloads included.
			if w := tt.Dtype.Round(x); math.Float32bits(got[i]) != math.Float32bits(w) {
				t.Errorf("%s[%d]: wrote %g, read %g (bits %#x), want %g (bits %#x)",
					tt.Name, i, x, got[i], math.Float32bits(got[i]), w, math.Float32bits(w))
			}
		}
	}
}

// TestWriteBytes pins the writer's output to bytes spelled out by hand from
// the spec, padding included.
func TestWriteBytes(t *testing.T) {
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    []byte
	}{
		{
			name:    "f32",
			tensors: []Tensor{{Name: "x", Shape: []int{2}, Data: []float32{1, 2}, Dtype: amp.FP32}},
			want: slices.Concat(
				[]byte{88, 0, 0, 0, 0, 0, 0, 0},
				[]byte(`{"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}   `),
				[]byte{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40},
			),
		},
		{
			name: "bf16 and f16 with metadata",
			tensors: []Tensor{
				{Name: "z", Shape: []int{1}, Data: []float32{-2}, Dtype: amp.FP16},
				{Name: "y", Shape: []int{1, 1}, Data: []float32{3}, Dtype: amp.BF16},
			},
			meta: map[string]string{"step": "17"},
			want: slices.Concat(
				[]byte{160, 0, 0, 0, 0, 0, 0, 0},
				[]byte(`{"__metadata__":{"format":"pt","step":"17"},`+
					`"y":{"dtype":"BF16","shape":[1,1],"data_offsets":[0,2]},`+
					`"z":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}}       `),
				[]byte{0x40, 0x40, 0x00, 0xc0},
			),
		},
		{
			name: "caller overrides format",
			meta: map[string]string{"format": "np"},
			want: slices.Concat(
				[]byte{32, 0, 0, 0, 0, 0, 0, 0},
				[]byte(`{"__metadata__":{"format":"np"}}`),
			),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.safetensors")
			if err := WriteFile(path, tc.tensors, tc.meta); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("wrote\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestWriteDeterministic(t *testing.T) {
	a := Tensor{Name: "a", Shape: []int{3}, Data: []float32{1, 2, 3}, Dtype: amp.BF16}
	b := Tensor{Name: "b", Shape: []int{1}, Data: []float32{4}, Dtype: amp.FP32}
	c := Tensor{Name: "c", Shape: []int{2}, Data: []float32{5, 6}, Dtype: amp.FP16}
	dir := t.TempDir()
	var files [][]byte
	for i, order := range [][]Tensor{{a, b, c}, {c, a, b}, {b, c, a}} {
		path := filepath.Join(dir, string(rune('0'+i)))
		if err := WriteFile(path, order, map[string]string{"k1": "v1", "k2": "v2", "k3": "v3"}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, got)
	}
	for i := 1; i < len(files); i++ {
		if !bytes.Equal(files[0], files[i]) {
			t.Errorf("input order %d wrote different bytes:\n%q\n%q", i, files[0], files[i])
		}
	}
}

func TestWriteInvalid(t *testing.T) {
	ok := Tensor{Name: "ok", Shape: []int{1}, Data: []float32{1}}
	tests := []struct {
		name    string
		tensors []Tensor
		meta    map[string]string
		want    string
	}{
		{"duplicate", []Tensor{ok, ok}, nil, `tensor "ok" given twice`},
		{"reserved", []Tensor{{Name: "__metadata__"}}, nil, `tensor name "__metadata__" is reserved for metadata`},
		{"bad utf8 name", []Tensor{{Name: "a\xff"}}, nil, `tensor name "a\xff" is not valid UTF-8`},
		{"bad utf8 metadata", nil, map[string]string{"k": "\xfe"}, `metadata "k": "\xfe" is not valid UTF-8`},
		{"too few values", []Tensor{{Name: "a", Shape: []int{2, 3}, Data: make([]float32, 5)}}, nil,
			`tensor "a": shape [2,3] needs 6 values, Data has 5`},
		{"scalar without value", []Tensor{{Name: "a", Shape: []int{}}}, nil, `tensor "a": shape [] needs 1 values, Data has 0`},
		{"negative dim", []Tensor{{Name: "a", Shape: []int{-1}}}, nil, `tensor "a": negative dimension -1 in shape [-1]`},
		{"unknown format", []Tensor{{Name: "a", Shape: []int{1}, Data: []float32{1}, Dtype: amp.Format(7)}}, nil,
			`tensor "a": cannot store Format(7)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "x.safetensors")
			want := "write " + path + ": " + tc.want
			if err := WriteFile(path, tc.tensors, tc.meta); err == nil || err.Error() != want {
				t.Errorf("WriteFile error = %v, want %s", err, want)
			}
			want = "write checkpoint " + dir + ": " + tc.want
			if err := WriteCheckpoint(dir, tc.tensors, tc.meta, 0); err == nil || err.Error() != want {
				t.Errorf("WriteCheckpoint error = %v, want %s", err, want)
			}
			if left := ls(t, dir); len(left) != 0 {
				t.Errorf("failed writes left files %v", left)
			}
		})
	}
}

// ls lists the names in dir.
func ls(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteAtomic(t *testing.T) {
	old := []byte("the previous checkpoint")
	tensors := []Tensor{{Name: "w", Shape: []int{2}, Data: []float32{1, 2}}}

	t.Run("replaces", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "m.safetensors")
		if err := os.WriteFile(path, old, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(path, tensors, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(path); err != nil {
			t.Error(err)
		}
		if got := ls(t, dir); !reflect.DeepEqual(got, []string{"m.safetensors"}) {
			t.Errorf("directory holds %v, want only the target", got)
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("Stat = %v, %v; want mode 0644", st, err)
		}
	})

	t.Run("write fails midway", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "m.safetensors")
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("disk on fire")
		err := atomicfile.Write(path, func(w io.Writer) error {
			if _, err := w.Write(bytes.Repeat([]byte{1}, 3<<20)); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("atomicfile.Write error = %v, want %v", err, boom)
		}
		assertUnchanged(t, path, old)
		if got := ls(t, dir); !reflect.DeepEqual(got, []string{"m.safetensors"}) {
			t.Errorf("directory holds %v, want only the untouched target", got)
		}
	})

	t.Run("missing directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "nope")
		path := filepath.Join(dir, "m.safetensors")
		err := WriteFile(path, tensors, nil)
		if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "write "+path+": open "+path+".tmp-") {
			t.Errorf("WriteFile error = %v, want a not-exist error naming the file", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("WriteFile created %s", dir)
		}
	})

	t.Run("read-only directory", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "m.safetensors")
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		if probe, err := os.Create(filepath.Join(dir, "probe")); err == nil {
			probe.Close()
			os.Remove(probe.Name())
			t.Skip("this user can write to a read-only directory (root?)")
		}
		err := WriteFile(path, tensors, nil)
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("WriteFile error = %v, want permission denied", err)
		}
		assertUnchanged(t, path, old)
	})
}

func assertUnchanged(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s now holds %q (%v), want it unchanged: %q", path, got, err, want)
	}
}

// A byte tensor (U8) is stored as its bytes with dtype U8, between float
// tensors of any alignment, and reads back as written; a byte tensor
// whose length does not match its shape, or one with float data too, is
// refused.
func TestWriteU8(t *testing.T) {
	path := filepath.Join(t.TempDir(), "u8.safetensors")
	codes := []byte{0x7f, 0x00, 0xff, 0x12, 0x34}
	ts := []Tensor{
		{Name: "a", Shape: []int{3}, Data: []float32{1, 2, 3}, Dtype: amp.BF16},
		{Name: "b", Shape: []int{5, 1}, U8: codes},
		{Name: "c", Shape: []int{2}, Data: []float32{0.5, -4}, Dtype: amp.FP32},
	}
	if err := WriteFile(path, ts, nil); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := f.Info("b")
	if !ok || info.Dtype != "U8" || !slices.Equal(info.Shape, []int{5, 1}) {
		t.Fatalf("b: %+v", info)
	}
	got, err := f.Raw("b")
	if err != nil || !bytes.Equal(got, codes) {
		t.Fatalf("b reads back as %v (%v), want %v", got, err, codes)
	}
	c, _, err := f.Float32("c")
	if err != nil || !slices.Equal(c, []float32{0.5, -4}) {
		t.Fatalf("c after a byte tensor: %v, %v", c, err)
	}
	for _, bad := range []Tensor{
		{Name: "x", Shape: []int{4}, U8: codes},
		{Name: "x", Shape: []int{5}, U8: codes, Data: make([]float32, 5)},
	} {
		if err := WriteFile(filepath.Join(t.TempDir(), "bad.safetensors"), []Tensor{bad}, nil); err == nil {
			t.Errorf("%+v written", bad)
		}
	}
}
