package train

import (
	"slices"
	"testing"

	"github.com/mixtune/mixtune/internal/cpufeat"
)

// run.json's cpu_features carry the bf16 units the run detected, so a
// resume on another CPU can say what changed.
func TestCPUFeaturesRecordBF16Units(t *testing.T) {
	for _, tc := range []struct {
		f       cpufeat.Features
		want    []string
		notWant []string
	}{
		{cpufeat.Features{}, nil, []string{"avx512bf16", "amxbf16", "amx_permitted"}},
		{cpufeat.Features{AVX512F: true, AVX512BF16: true}, []string{"avx512bf16"}, []string{"amxbf16"}},
		{cpufeat.Features{AVX512F: true, AVX512BF16: true, AMXBF16: true, AMXPermitted: true}, []string{"avx512bf16", "amxbf16", "amx_permitted"}, nil},
	} {
		got := cpuFeatures(tc.f)
		for _, w := range tc.want {
			if !slices.Contains(got, w) {
				t.Errorf("%+v: cpu_features %q lack %q", tc.f, got, w)
			}
		}
		for _, w := range tc.notWant {
			if slices.Contains(got, w) {
				t.Errorf("%+v: cpu_features %q hold %q", tc.f, got, w)
			}
		}
		if !slices.IsSorted(got) {
			t.Errorf("cpu_features %q not sorted", got)
		}
	}
}
