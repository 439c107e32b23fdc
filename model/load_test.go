package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/amp"
)

// A config.json claiming far more layers than the weights hold is refused
// from the headers, before anything in proportion to the claim is
// allocated (it used to end in "fatal error: runtime: out of memory").
func TestInspectRefusesAConfigTheWeightsDoNotHold(t *testing.T) {
	dir := t.TempDir()
	m, err := New(tinyConfig(false), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Save(dir, amp.BF16, 0); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.json")
	raw, _ := os.ReadFile(p)
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["num_hidden_layers"] = 1000000000
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, load := range []func(string) error{
		func(d string) error { _, err := Inspect(d); return err },
		func(d string) error { _, err := Load(d); return err },
	} {
		err := load(dir)
		want := "config.json has num_hidden_layers 1000000000, but the weights hold 2 layers (missing tensor model.layers.2.input_layernorm.weight)"
		if err == nil || !strings.HasSuffix(err.Error(), want) {
			t.Fatalf("error %v\nwant one ending %q", err, want)
		}
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Fatalf("checking the config allocated %d MiB", grew>>20)
	}
}

// A non-finite base weight is named by Load, not discovered as a diverged
// loss.
func TestLoadNamesANonFiniteWeight(t *testing.T) {
	dir := t.TempDir()
	m, err := New(tinyConfig(false), 1)
	if err != nil {
		t.Fatal(err)
	}
	m.Weights["model.layers.1.mlp.up_proj.weight"].Data[5] = float32(math.Inf(-1))
	if err := m.Save(dir, amp.FP32, 0); err != nil {
		t.Fatal(err)
	}
	_, err = Load(dir)
	want := "tensor model.layers.1.mlp.up_proj.weight holds a non-finite value (-Inf at index 5)"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("error %v, want one ending %q", err, want)
	}
}
