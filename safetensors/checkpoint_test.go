package safetensors

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// shardTensors are sized so that a 32-byte limit packs them as
// {a, b} (16+16), {c} (40, alone because it is over the limit), {d, e} (8+4).
func shardTensors() []Tensor {
	seq := func(n int, scale float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = scale * (float32(i) + 0.1)
		}
		return v
	}
	// Deliberately out of name order: shards are filled in name order.
	return []Tensor{
		{Name: "e", Shape: []int{1}, Data: seq(1, 5), Dtype: amp.FP32},
		{Name: "c", Shape: []int{2, 5}, Data: seq(10, 3), Dtype: amp.FP32},
		{Name: "a", Shape: []int{4}, Data: seq(4, 1), Dtype: amp.FP32},
		{Name: "d", Shape: []int{2, 2}, Data: seq(4, 4), Dtype: amp.FP16},
		{Name: "b", Shape: []int{2, 4}, Data: seq(8, 2), Dtype: amp.BF16},
	}
}

const (
	shard1 = "model-00001-of-00003.safetensors"
	shard2 = "model-00002-of-00003.safetensors"
	shard3 = "model-00003-of-00003.safetensors"
)

// checkTensors asserts that c holds exactly tensors, as stored.
func checkTensors(t *testing.T, c *Checkpoint, tensors []Tensor) {
	t.Helper()
	var names []string
	for _, tt := range tensors {
		names = append(names, tt.Name)
	}
	slices.Sort(names)
	if got := c.Names(); !reflect.DeepEqual(got, names) {
		t.Errorf("Names() = %v, want %v", got, names)
	}
	for _, tt := range tensors {
		info, ok := c.Info(tt.Name)
		dtype, _ := dtypeName(tt.Dtype)
		if !ok || info.Dtype != dtype || !reflect.DeepEqual(info.Shape, tt.Shape) {
			t.Errorf("Info(%q) = %+v, %v; want %s %v", tt.Name, info, ok, dtype, tt.Shape)
		}
		got, shape, err := c.Float32(tt.Name)
		if err != nil {
			t.Errorf("Float32(%q): %v", tt.Name, err)
			continue
		}
		want := make([]float32, len(tt.Data))
		for i, x := range tt.Data {
			want[i] = tt.Dtype.Round(x)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(shape, tt.Shape) {
			t.Errorf("Float32(%q) = %v %v, want %v %v", tt.Name, got, shape, want, tt.Shape)
		}
		raw, rinfo, err := c.Raw(tt.Name)
		if err != nil || len(raw) != len(tt.Data)*tt.Dtype.Bytes() || !reflect.DeepEqual(rinfo, info) {
			t.Errorf("Raw(%q) = %d bytes, %+v, %v", tt.Name, len(raw), rinfo, err)
		}
	}
}

func TestCheckpointSharded(t *testing.T) {
	dir := t.TempDir()
	tensors := shardTensors()
	if err := WriteCheckpoint(dir, tensors, map[string]string{"step": "3"}, 32); err != nil {
		t.Fatal(err)
	}
	if got, want := ls(t, dir), []string{shard1, shard2, shard3, IndexFileName}; !reflect.DeepEqual(got, want) {
		t.Fatalf("directory holds %v, want %v", got, want)
	}
	index, err := os.ReadFile(filepath.Join(dir, IndexFileName))
	if err != nil {
		t.Fatal(err)
	}
	wantIndex := `{
  "metadata": {
    "total_size": 84
  },
  "weight_map": {
    "a": "model-00001-of-00003.safetensors",
    "b": "model-00001-of-00003.safetensors",
    "c": "model-00002-of-00003.safetensors",
    "d": "model-00003-of-00003.safetensors",
    "e": "model-00003-of-00003.safetensors"
  }
}
`
	if string(index) != wantIndex {
		t.Errorf("index:\n%s\nwant:\n%s", index, wantIndex)
	}
	shards := map[string][]string{shard1: {"a", "b"}, shard2: {"c"}, shard3: {"d", "e"}}
	for file, names := range shards {
		f, err := ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(f.Names(), names) {
			t.Errorf("%s holds %v, want %v", file, f.Names(), names)
		}
		if got := f.Metadata(); !reflect.DeepEqual(got, map[string]string{"format": "pt", "step": "3"}) {
			t.Errorf("%s metadata = %v", file, got)
		}
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, c, tensors)
}

func TestCheckpointSingle(t *testing.T) {
	tensors := shardTensors()
	for _, max := range []int64{0, -1, 84, 1 << 30} {
		dir := t.TempDir()
		if err := WriteCheckpoint(dir, tensors, nil, max); err != nil {
			t.Fatal(err)
		}
		if got := ls(t, dir); !reflect.DeepEqual(got, []string{SingleFileName}) {
			t.Fatalf("max %d: directory holds %v, want only %s", max, got, SingleFileName)
		}
		// The single file is exactly what WriteFile writes.
		alone := filepath.Join(t.TempDir(), "x")
		if err := WriteFile(alone, tensors, nil); err != nil {
			t.Fatal(err)
		}
		a, _ := os.ReadFile(alone)
		b, _ := os.ReadFile(filepath.Join(dir, SingleFileName))
		if !bytes.Equal(a, b) {
			t.Errorf("max %d: model.safetensors differs from WriteFile's output", max)
		}
		c, err := OpenCheckpoint(dir)
		if err != nil {
			t.Fatal(err)
		}
		checkTensors(t, c, tensors)
	}
}

// Rewriting a checkpoint in the other layout must not leave files that
// OpenCheckpoint could pick up instead of the new model.
func TestCheckpointRelayout(t *testing.T) {
	dir := t.TempDir()
	stale := []Tensor{{Name: "old", Shape: []int{1}, Data: []float32{9}}}
	if err := WriteFile(filepath.Join(dir, SingleFileName), stale, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "model-00001-of-00009.safetensors"), stale, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	tensors := shardTensors()

	if err := WriteCheckpoint(dir, tensors, nil, 32); err != nil {
		t.Fatal(err)
	}
	if got, want := ls(t, dir), []string{shard1, shard2, shard3, IndexFileName, "notes.txt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after sharded write, directory holds %v, want %v", got, want)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, c, tensors)

	tensors = tensors[:2]
	if err := WriteCheckpoint(dir, tensors, nil, 0); err != nil {
		t.Fatal(err)
	}
	if got, want := ls(t, dir), []string{SingleFileName, "notes.txt"}; !reflect.DeepEqual(got, want) {
		t.Errorf("after single write, directory holds %v, want %v", got, want)
	}
	if c, err = OpenCheckpoint(dir); err != nil {
		t.Fatal(err)
	}
	checkTensors(t, c, tensors)
}

// shardedDir writes shardTensors as three shards and returns the directory.
func shardedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := WriteCheckpoint(dir, shardTensors(), nil, 32); err != nil {
		t.Fatal(err)
	}
	return dir
}

// setIndex replaces the weight map of dir's index.
func setIndex(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	b, err := json.Marshal(index{WeightMap: weightMap})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFileName), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenCheckpointErrors(t *testing.T) {
	full := map[string]string{"a": shard1, "b": shard1, "c": shard2, "d": shard3, "e": shard3}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for kk, vv := range full {
			m[kk] = vv
		}
		m[k] = v
		return m
	}
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string // DIR stands for the checkpoint directory
	}{
		{"neither file", func(t *testing.T, dir string) {
			for _, f := range []string{shard1, shard2, shard3, IndexFileName} {
				os.Remove(filepath.Join(dir, f))
			}
		}, "open checkpoint DIR: found neither model.safetensors nor model.safetensors.index.json"},
		{"missing shard", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, shard2))
		}, `DIR/model.safetensors.index.json: weight_map names model-00002-of-00003.safetensors for tensor "c": ` +
			"open DIR/model-00002-of-00003.safetensors: no such file or directory"},
		{"tensor not in its shard", func(t *testing.T, dir string) {
			setIndex(t, dir, with("c", shard1))
		}, `DIR/model.safetensors.index.json: weight_map puts tensor "c" in model-00001-of-00003.safetensors, which does not contain it`},
		{"tensor in no shard", func(t *testing.T, dir string) {
			setIndex(t, dir, with("zz", shard3))
		}, `DIR/model.safetensors.index.json: weight_map puts tensor "zz" in model-00003-of-00003.safetensors, which does not contain it`},
		{"shard outside dir", func(t *testing.T, dir string) {
			setIndex(t, dir, with("c", "../"+shard2))
		}, `DIR/model.safetensors.index.json: weight_map names invalid shard file "../model-00002-of-00003.safetensors" for tensor "c"`},
		{"shard is dot-dot", func(t *testing.T, dir string) {
			setIndex(t, dir, with("c", ".."))
		}, `DIR/model.safetensors.index.json: weight_map names invalid shard file ".." for tensor "c"`},
		{"invalid index JSON", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFileName), []byte(`{"weight_map":`), 0o644)
		}, "DIR/model.safetensors.index.json: invalid JSON: unexpected end of JSON input"},
		{"no weight_map", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFileName), []byte(`{"metadata":{}}`), 0o644)
		}, "DIR/model.safetensors.index.json: no weight_map"},
		{"corrupt shard", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, shard3), []byte{1, 2, 3}, 0o644)
		}, "DIR/model-00003-of-00003.safetensors: file is 3 bytes, too short for the 8-byte header length"},
		{"shard data cut short", func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, shard2), 100)
		}, `DIR/model-00002-of-00003.safetensors: tensor "c": data_offsets [0,40] outside the data buffer of 4 bytes`},
		{"corrupt single file", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, SingleFileName), build(`{"t":{}}`, nil), 0o644)
		}, `DIR/model.safetensors: tensor "t": missing dtype`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := shardedDir(t)
			tc.setup(t, dir)
			want := replaceDir(tc.want, dir)
			c, err := OpenCheckpoint(dir)
			if err == nil {
				t.Fatalf("OpenCheckpoint succeeded with %v, want error %s", c.Names(), want)
			}
			if err.Error() != want {
				t.Errorf("error:\n got %s\nwant %s", err, want)
			}
		})
	}
}

func replaceDir(s, dir string) string {
	return string(bytes.ReplaceAll([]byte(s), []byte("DIR"), []byte(dir)))
}

// A tensor a shard holds but the index leaves out is not part of the model.
func TestCheckpointIgnoresUnindexed(t *testing.T) {
	dir := shardedDir(t)
	setIndex(t, dir, map[string]string{"a": shard1, "c": shard2, "d": shard3, "e": shard3})
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Names(), []string{"a", "c", "d", "e"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	if _, ok := c.Info("b"); ok {
		t.Error("Info(b) found a tensor the index does not name")
	}
	want := replaceDir(`checkpoint DIR: no tensor "b"`, dir)
	if _, _, err := c.Float32("b"); err == nil || err.Error() != want {
		t.Errorf("Float32(b) error = %v, want %s", err, want)
	}
	if _, _, err := c.Raw("b"); err == nil || err.Error() != want {
		t.Errorf("Raw(b) error = %v, want %s", err, want)
	}
}

// A hand-made single file with a dtype that does not convert: it lists and
// reads raw, and converting it names the file and the tensor.
func TestCheckpointOtherDtype(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SingleFileName)
	if err := os.WriteFile(path, fixture(), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, info, err := c.Raw("e")
	if err != nil || !bytes.Equal(raw, []byte{7, 0, 0, 0, 0, 0, 0, 0}) || info.Dtype != "I64" || !reflect.DeepEqual(info.Shape, []int{1}) {
		t.Errorf("Raw(e) = %v %+v %v", raw, info, err)
	}
	want := path + `: tensor "e" has dtype I64, which does not convert to float32`
	if _, _, err := c.Float32("e"); err == nil || err.Error() != want {
		t.Errorf("Float32(e) error = %v, want %s", err, want)
	}
	got, _, err := c.Float32("d")
	if err != nil || got[0] != 0.25 || !math.IsInf(float64(got[1]), -1) {
		t.Errorf("Float32(d) = %v, %v", got, err)
	}
}

// A shard that shrinks after OpenCheckpoint read its header gives an error,
// not short data.
func TestCheckpointShardTruncatedLater(t *testing.T) {
	dir := shardedDir(t)
	c, err := OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, shard2)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, st.Size()-1); err != nil {
		t.Fatal(err)
	}
	want := path + `: read tensor "c": unexpected EOF`
	if _, _, err := c.Float32("c"); err == nil || err.Error() != want {
		t.Errorf("Float32(c) error = %v, want %s", err, want)
	}
}

// If a sharded write fails before its index is in place, an older
// model.safetensors must not survive to be opened as if it were current.
func TestCheckpointFailedShardedWrite(t *testing.T) {
	dir := t.TempDir()
	stale := []Tensor{{Name: "old", Shape: []int{1}, Data: []float32{9}}}
	if err := WriteFile(filepath.Join(dir, SingleFileName), stale, nil); err != nil {
		t.Fatal(err)
	}
	// A directory where the index goes makes the final rename fail.
	if err := os.Mkdir(filepath.Join(dir, IndexFileName), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteCheckpoint(dir, shardTensors(), nil, 32); err == nil {
		t.Fatal("WriteCheckpoint succeeded with a directory in the index's place")
	}
	if c, err := OpenCheckpoint(dir); err == nil {
		t.Errorf("OpenCheckpoint after a failed write opened %v", c.Names())
	}
}
