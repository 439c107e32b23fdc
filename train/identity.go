package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"sort"

	"gopkg.in/yaml.v3"

	"github.com/mixtune/mixtune/internal/readlimit"
	"github.com/mixtune/mixtune/internal/yamlconf"
)

// Resolved renders the config with every default filled in and every
// override applied: resolved.yaml, which --resume reads back.
func (c Config) Resolved() ([]byte, error) {
	return yaml.Marshal(c)
}

// Hash identifies the computation a config describes; checkpoints record
// it, so a run is never continued under a different recipe by accident.
// It hashes the resolved YAML, the form --resume reads back, so a recipe
// and its own round trip through resolved.yaml always hash alike.
//
// Where the graphs compute (compute.device, compute.vulkan_device) is
// left out: a run may continue on another engine, as a run may continue
// on another machine, and the resumed run says so (its numbers differ
// from an uninterrupted run's in the last bits of fp32 sums). Where the
// metrics go besides metrics.jsonl (logging) is left out too: it changes
// no number, and TensorBoard may be turned on for a resumed run.
func (c Config) Hash() string {
	c.Compute.Device, c.Compute.VulkanDevice = ComputeAuto, ""
	c.Logging = LoggingConfig{}
	b, _ := c.Resolved()
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Diff lists the dotted keys whose values differ between two configs,
// with both values, sorted.
func Diff(a, b Config) []string {
	fa, fb := map[string]any{}, map[string]any{}
	flatten("", toTree(a), fa)
	flatten("", toTree(b), fb)
	keys := map[string]bool{}
	for k := range fa {
		keys[k] = true
	}
	for k := range fb {
		keys[k] = true
	}
	var out []string
	for k := range keys {
		if !reflect.DeepEqual(fa[k], fb[k]) {
			out = append(out, fmt.Sprintf("%s: %v → %v", k, show(fa[k]), show(fb[k])))
		}
	}
	sort.Strings(out)
	return out
}

func toTree(c Config) map[string]any {
	b, _ := yaml.Marshal(c)
	var m map[string]any
	yaml.Unmarshal(b, &m)
	return m
}

func flatten(prefix string, v any, out map[string]any) {
	if m, ok := v.(map[string]any); ok {
		for k, x := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, x, out)
		}
		return
	}
	out[prefix] = v
}

func show(v any) string {
	if v == nil {
		return "(unset)"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// readResolved reads a run directory's resolved.yaml as a Config, without
// validating it against the files it names: to list what a new recipe
// changes.
func readResolved(dir string) (Config, error) {
	path := filepath.Join(dir, resolvedFile)
	raw, err := readlimit.ReadFile(path, readlimit.Recipe)
	if err != nil {
		return Config{}, err
	}
	c := Defaults()
	_, err = yamlconf.Decode(path, raw, nil, &c)
	return c, err
}
