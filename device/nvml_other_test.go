//go:build !cgo || !linux

package device

import (
	"context"
	"runtime"
	"strings"
	"testing"
)

// TestOpenNVMLUnavailable: a build without go-nvml says why NVML is not
// loaded, and discovery goes on without it.
func TestOpenNVMLUnavailable(t *testing.T) {
	_, err := openNVML()
	if err == nil {
		t.Fatal("openNVML succeeded in a build without go-nvml")
	}
	want := "built without cgo"
	if runtime.GOOS != "linux" {
		want = "not supported on " + runtime.GOOS
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("openNVML: %v, want it to say %q", err, want)
	}
	inv := discover(context.Background(), openNVML, missingSMI)
	if inv.Source != "none" || len(inv.GPUs) != 0 || !strings.Contains(inv.Note, "NVML: "+err.Error()) {
		t.Errorf("discover = %+v, want no GPU and a note quoting %q", inv, err)
	}
}
