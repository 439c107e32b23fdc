package peft

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadConfigLayers: layers_to_transform must be whole numbers. Found
// by FuzzReadConfig: 1.5 was read as layer 1, and 1e300 as whatever the
// platform's float-to-int conversion gives (math.MinInt64 on amd64).
func TestReadConfigLayers(t *testing.T) {
	for _, tc := range []struct {
		layers string
		want   []int
		err    string
	}{
		{`[0, 2]`, []int{0, 2}, ""},
		{`3`, []int{3}, ""},
		{`3.0`, []int{3}, ""},
		{`null`, nil, ""},
		{`1.5`, nil, "layers_to_transform must be a layer number or a list of them, got 1.5"},
		{`[0, 1e300]`, nil, "layers_to_transform must be a layer number or a list of them, got [0 1e+300]"},
		{`[0, 9007199254740993]`, nil, "layers_to_transform must be a layer number or a list of them"},
		{`["1"]`, nil, "layers_to_transform must be a layer number or a list of them, got [1]"},
	} {
		dir := t.TempDir()
		js := `{"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"], "layers_to_transform": ` + tc.layers + `}`
		if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := ReadConfig(dir)
		switch {
		case tc.err == "" && (err != nil || !slices.Equal(c.LayersToTransform, tc.want)):
			t.Errorf("%s: %v, %v; want %v", tc.layers, c.LayersToTransform, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v, %v; want an error containing %q", tc.layers, c.LayersToTransform, err, tc.err)
		}
	}
}
