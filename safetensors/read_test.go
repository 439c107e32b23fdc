package safetensors

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// build assembles a safetensors file from a header and a data buffer exactly
// as the spec lays it out, independently of the writer.
func build(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// fixture is a hand-built file with one tensor of each decodable dtype and
// one that is not, padded with spaces the way Hugging Face writers do.
func fixture() []byte {
	header := `{"__metadata__":{"format":"pt","note":"hand made"},` +
		`"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},` +
		`"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},` +
		`"c":{"dtype":"F16","shape":[],"data_offsets":[12,14]},` +
		`"d":{"dtype":"F64","shape":[2],"data_offsets":[14,30]},` +
		`"e":{"dtype":"I64","shape":[1],"data_offsets":[30,38]},` +
		`"z":{"dtype":"F32","shape":[0,3],"data_offsets":[38,38]}}`
	for len(header)%8 != 0 {
		header += " "
	}
	data := []byte{
		0x00, 0x00, 0x80, 0x3f, // a: 1.0
		0x00, 0x00, 0x20, 0xc0, // a: -2.5
		0x80, 0x3f, // b: bf16 1.0
		0x00, 0xbf, // b: bf16 -0.5
		0x00, 0x3e, // c: f16 1.5
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xd0, 0x3f, // d: 0.25
		0x9c, 0x75, 0x00, 0x88, 0x3c, 0xe4, 0x37, 0xfe, // d: -1e300, overflows float32
		0x07, 0, 0, 0, 0, 0, 0, 0, // e: int64 7
	}
	return build(header, data)
}

func TestParseFixture(t *testing.T) {
	f, err := Parse("fixture.safetensors", fixture())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.Names(), []string{"a", "b", "c", "d", "e", "z"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if got, want := f.Metadata(), map[string]string{"format": "pt", "note": "hand made"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Metadata() = %v, want %v", got, want)
	}
	tests := []struct {
		name  string
		dtype string
		shape []int
		want  []float32
	}{
		{"a", "F32", []int{2}, []float32{1, -2.5}},
		{"b", "BF16", []int{1, 2}, []float32{1, -0.5}},
		{"c", "F16", []int{}, []float32{1.5}},
		{"d", "F64", []int{2}, []float32{0.25, float32(math.Inf(-1))}},
		{"z", "F32", []int{0, 3}, []float32{}},
	}
	for _, tc := range tests {
		info, ok := f.Info(tc.name)
		if !ok || info.Name != tc.name || info.Dtype != tc.dtype || !reflect.DeepEqual(info.Shape, tc.shape) {
			t.Errorf("Info(%q) = %+v, %v; want dtype %s shape %v", tc.name, info, ok, tc.dtype, tc.shape)
		}
		got, shape, err := f.Float32(tc.name)
		if err != nil {
			t.Errorf("Float32(%q): %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(shape, tc.shape) {
			t.Errorf("Float32(%q) = %v %v, want %v %v", tc.name, got, shape, tc.want, tc.shape)
		}
	}

	raw, err := f.Raw("e")
	if err != nil || !bytes.Equal(raw, []byte{7, 0, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("Raw(e) = %v, %v", raw, err)
	}
	raw[0] = 99 // Raw hands out a copy
	if again, _ := f.Raw("e"); again[0] != 7 {
		t.Error("modifying Raw's result changed the file")
	}
	if info, _ := f.Info("a"); true {
		info.Shape[0] = 99 // Info hands out a copy
		if again, _ := f.Info("a"); again.Shape[0] != 2 {
			t.Error("modifying Info's shape changed the file")
		}
	}

	errCases := []struct {
		name, want string
	}{
		{"e", `fixture.safetensors: tensor "e" has dtype I64, which does not convert to float32`},
		{"nope", `fixture.safetensors: no tensor "nope"`},
	}
	for _, tc := range errCases {
		if _, _, err := f.Float32(tc.name); err == nil || err.Error() != tc.want {
			t.Errorf("Float32(%q) error = %v, want %s", tc.name, err, tc.want)
		}
	}
	if _, err := f.Raw("nope"); err == nil || err.Error() != `fixture.safetensors: no tensor "nope"` {
		t.Errorf("Raw(nope) error = %v", err)
	}
	if _, ok := f.Info("nope"); ok {
		t.Error("Info(nope) reported a tensor")
	}
}

// An unpadded header with no metadata and no tensors is still a valid file.
func TestParseMinimal(t *testing.T) {
	f, err := Parse("empty", build("{}", nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Names()) != 0 || len(f.Metadata()) != 0 {
		t.Errorf("got names %v metadata %v, want none", f.Names(), f.Metadata())
	}
}

func TestF64Narrowing(t *testing.T) {
	vals := []float64{0.1, -0.1, 1e-50, math.MaxFloat32, 0x1.fffffefffffffp127, 0x1.ffffffp127, 1e300, -1e300, math.Inf(1), math.NaN()}
	var data []byte
	for _, v := range vals {
		data = binary.LittleEndian.AppendUint64(data, math.Float64bits(v))
	}
	f, err := Parse("f64", build(`{"x":{"dtype":"F64","shape":[10],"data_offsets":[0,80]}}`, data))
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := f.Float32("x")
	if err != nil {
		t.Fatal(err)
	}
	inf := float32(math.Inf(1))
	want := []float32{0.1, -0.1, 0, math.MaxFloat32, math.MaxFloat32, inf, inf, -inf, inf}
	for i, w := range want {
		if math.Float32bits(got[i]) != math.Float32bits(w) {
			t.Errorf("float32(%g) = %g, want %g", vals[i], got[i], w)
		}
	}
	if !math.IsNaN(float64(got[9])) {
		t.Errorf("NaN narrowed to %g", got[9])
	}
}

func TestParseErrors(t *testing.T) {
	f32 := func(shape, offsets string) string {
		return `{"t":{"dtype":"F32","shape":` + shape + `,"data_offsets":` + offsets + `}}`
	}
	huge := binary.LittleEndian.AppendUint64(nil, 1<<40)
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "bad: file is 0 bytes, too short for the 8-byte header length"},
		{"short file", []byte{1, 0, 0}, "bad: file is 3 bytes, too short for the 8-byte header length"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...),
			"bad: header length 100 is larger than the 2 bytes that follow it"},
		{"absurd header", append(huge, "{}"...), "bad: header length 1099511627776 exceeds the limit of 100000000 bytes"},
		{"empty header", build("", nil), "bad: invalid header JSON: unexpected EOF"},
		{"truncated JSON", build(`{"t":`, nil), "bad: invalid header JSON: unexpected EOF"},
		{"bad JSON", build(`{"t" 1}`, nil), "bad: invalid header JSON: expected colon after object key"},
		{"not UTF-8", build("{\"\xff\":1}", nil), "bad: header is not valid UTF-8"},
		{"not an object", build(`[1]`, nil), "bad: header is not a JSON object"},
		{"trailing object", build(`{} {}`, nil), "bad: unexpected data after the header object"},
		{"trailing garbage", build(`{}x`, nil), "bad: invalid header JSON: invalid character 'x' looking for beginning of value"},
		{"entry not object", build(`{"t":[1]}`, nil), `bad: tensor "t": entry is not a JSON object`},
		{"entry null", build(`{"t":null}`, nil), `bad: tensor "t": entry is not a JSON object`},
		{"duplicate tensor", build(`{"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},`+
			`"t":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil), `bad: tensor "t" appears twice in the header`},
		{"missing dtype", build(`{"t":{"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `bad: tensor "t": missing dtype`},
		{"missing shape", build(`{"t":{"dtype":"F32","data_offsets":[0,4]}}`, make([]byte, 4)), `bad: tensor "t": missing shape`},
		{"missing offsets", build(`{"t":{"dtype":"F32","shape":[1]}}`, make([]byte, 4)), `bad: tensor "t": missing data_offsets`},
		{"dtype case", build(`{"t":{"DTYPE":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `bad: tensor "t": missing dtype`},
		{"dtype not string", build(`{"t":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `bad: tensor "t": dtype 4 is not a string`},
		{"unknown dtype", build(`{"t":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, make([]byte, 16)), `bad: tensor "t": unknown dtype "F128"`},
		{"lower-case dtype", build(`{"t":{"dtype":"f32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `bad: tensor "t": unknown dtype "f32"`},
		{"negative dim", build(f32(`[2,-1]`, `[0,0]`), nil), `bad: tensor "t": negative dimension -1 in shape [2,-1]`},
		{"fractional dim", build(f32(`[1.5]`, `[0,4]`), make([]byte, 4)),
			`bad: tensor "t": shape [1.5]: json: cannot unmarshal number 1.5 into Go value of type int64`},
		{"null shape", build(f32(`null`, `[0,4]`), make([]byte, 4)), `bad: tensor "t": shape null: not an array`},
		{"shape overflow", build(f32(`[4294967296,4294967296]`, `[0,0]`), nil), `bad: tensor "t": shape [4294967296,4294967296] is too large`},
		{"one offset", build(f32(`[1]`, `[4]`), make([]byte, 4)), `bad: tensor "t": data_offsets [4] must have 2 entries, not 1`},
		{"end before begin", build(f32(`[1]`, `[8,4]`), make([]byte, 8)), `bad: tensor "t": data_offsets [8,4] end before they begin`},
		{"negative begin", build(f32(`[1]`, `[-4,0]`), make([]byte, 4)), `bad: tensor "t": data_offsets [-4,0] outside the data buffer of 4 bytes`},
		{"past buffer", build(f32(`[2]`, `[0,8]`), make([]byte, 4)), `bad: tensor "t": data_offsets [0,8] outside the data buffer of 4 bytes`},
		{"size mismatch", build(f32(`[2,2]`, `[0,12]`), make([]byte, 16)), `bad: tensor "t": data_offsets [0,12] hold 12 bytes, but shape [2,2] of F32 needs 16`},
		{"zero dim with bytes", build(f32(`[0,3]`, `[0,4]`), make([]byte, 4)), `bad: tensor "t": data_offsets [0,4] hold 4 bytes, but shape [0,3] of F32 needs 0`},
		{"overlap", build(`{"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},`+
			`"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 12)),
			`bad: tensors "t" [0,8] and "u" [4,12] overlap`},
		{"same span", build(`{"u":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},`+
			`"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)),
			`bad: tensors "t" [0,4] and "u" [0,4] overlap`},
		{"metadata not strings", build(`{"__metadata__":{"step":10}}`, nil),
			"bad: __metadata__ must map strings to strings: json: cannot unmarshal number into Go value of type string"},
		{"metadata twice", build(`{"__metadata__":{},"__metadata__":{}}`, nil), "bad: __metadata__ appears twice in the header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse("bad", tc.file)
			if err == nil {
				t.Fatalf("Parse succeeded with tensors %v, want error %s", f.Names(), tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("error:\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(path, fixture(), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := f.Float32("a"); err != nil || !reflect.DeepEqual(got, []float32{1, -2.5}) {
		t.Errorf("Float32(a) = %v, %v", got, err)
	}

	if err := os.WriteFile(path, []byte{1, 2}, 0o644); err != nil {
		t.Fatal(err)
	}
	want := path + ": file is 2 bytes, too short for the 8-byte header length"
	if _, err := ReadFile(path); err == nil || err.Error() != want {
		t.Errorf("ReadFile(short) error = %v, want %s", err, want)
	}

	missing := filepath.Join(t.TempDir(), "missing.safetensors")
	want = "read safetensors: open " + missing + ": no such file or directory"
	if _, err := ReadFile(missing); err == nil || err.Error() != want {
		t.Errorf("ReadFile(missing) error = %v, want %s", err, want)
	}
}

// FuzzParse checks that no input makes Parse or the accessors panic, and that
// whatever Parse accepts is self-consistent.
func FuzzParse(f *testing.F) {
	f.Add(fixture())
	f.Add(build("{}", nil))
	f.Add(build(`{"t":{"dtype":"BF16","shape":[2,1],"data_offsets":[0,4]}}`, []byte{1, 2, 3, 4}))
	f.Add(build(`{"u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 12)))
	f.Add(build(`{"t":{"dtype":"F64","shape":[4294967296,0],"data_offsets":[0,0]}}`, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse("fuzz", b)
		if err != nil {
			return
		}
		for _, name := range file.Names() {
			info, ok := file.Info(name)
			if !ok {
				t.Fatalf("Names lists %q but Info does not know it", name)
			}
			raw, err := file.Raw(name)
			if err != nil {
				t.Fatalf("Raw(%q): %v", name, err)
			}
			size, _ := dtypeSize(info.Dtype)
			n := 1
			for _, d := range info.Shape {
				n *= d
			}
			if len(raw) != n*size {
				t.Fatalf("Raw(%q) is %d bytes, want %d × %d", name, len(raw), n, size)
			}
			if v, _, err := file.Float32(name); err == nil && len(v) != n {
				t.Fatalf("Float32(%q) has %d values, want %d", name, len(v), n)
			}
		}
		_ = file.Metadata()
	})
}

// Errors name the tensor with %q, so a name made of odd bytes cannot forge
// the rest of the message.
func TestErrorQuotesNames(t *testing.T) {
	_, err := Parse("bad", build(`{"a\nb":{"dtype":"X","shape":[],"data_offsets":[0,0]}}`, nil))
	if err == nil || strings.Contains(err.Error(), "\n") {
		t.Errorf("error = %q, want one line", err)
	}
}
