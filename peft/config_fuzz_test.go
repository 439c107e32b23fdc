package peft

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// FuzzReadConfig: no adapter_config.json makes ReadConfig panic; its
// errors name the file; layers_to_transform is read exactly as written or
// refused; and a config that validates, saved by SaveAs, reads back the
// same.
func FuzzReadConfig(f *testing.F) {
	for _, s := range []string{
		`{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "lora_dropout": 0.05, "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}`,
		`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ".*\\.(q|v)_proj", "use_dora": true, "use_rslora": true, "init_lora_weights": "gaussian"}`,
		`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "layers_to_transform": [0, 1]}`,
		`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "layers_to_transform": 1}`,
		`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "layers_to_transform": 1.5}`,
		`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "layers_to_transform": [1e300, -1]}`,
		`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "layers_to_transform": ["1"]}`,
		`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": null, "rank_pattern": {"q_proj": 2}}`,
		`{"peft_type": "LORA", "fan_in_fan_out": true}`,
		`{"peft_type": "IA3"}`,
		`{"peft_type": "LORA", "r": 1.5}`,
		`{"peft_type": "LORA", "target_modules": 7}`,
		`{"peft_type": "LORA", "target_modules": "("}`,
		`[]`, `null`, `{}`, ``, `{"peft_type": "LORA"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, ConfigFile)
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := ReadConfig(dir)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
			return
		}
		checkLayers(t, b, c.LayersToTransform)
		if c.Validate() != nil {
			return
		}
		out := t.TempDir()
		if err := (&Adapter{Config: c}).SaveAs(out, "base", amp.FP32); err != nil {
			t.Fatalf("SaveAs(%+v): %v", c, err)
		}
		got, err := ReadConfig(out)
		if err != nil {
			written, _ := os.ReadFile(filepath.Join(out, ConfigFile))
			t.Fatalf("SaveAs(%+v) wrote\n%s\nwhich reads back with %v", c, written, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
		}
	})
}

// checkLayers compares the layers ReadConfig accepted with the JSON's own
// layers_to_transform: one number or a list of them, each an exact int.
func checkLayers(t *testing.T, b []byte, got []int) {
	t.Helper()
	var raw struct {
		L json.RawMessage `json:"layers_to_transform"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("ReadConfig accepted JSON that does not decode: %v", err)
	}
	var nums []json.Number
	var one json.Number
	switch s := strings.TrimSpace(string(raw.L)); {
	case s == "" || s == "null":
	case strings.HasPrefix(s, "["):
		if err := json.Unmarshal(raw.L, &nums); err != nil {
			t.Fatalf("layers_to_transform %s accepted as %v", s, got)
		}
	default:
		if err := json.Unmarshal(raw.L, &one); err != nil {
			t.Fatalf("layers_to_transform %s accepted as %v", s, got)
		}
		nums = []json.Number{one}
	}
	if len(nums) != len(got) {
		t.Fatalf("layers_to_transform %s read as %v", raw.L, got)
	}
	for i, n := range nums {
		v, err := n.Float64()
		if err != nil || v != float64(got[i]) || float64(int64(v)) != v {
			t.Fatalf("layers_to_transform %s read as %v", raw.L, got)
		}
	}
}
