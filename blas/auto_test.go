package blas

import (
	"strings"
	"testing"
)

func TestPreferNative(t *testing.T) {
	for _, tc := range []struct {
		core       string
		nativeAVX2 bool
		want       bool
	}{
		{"Prescott", true, true}, // Debian's OpenBLAS 0.3.21 under KVM on an AVX-512 Xeon
		{"Sandybridge", true, true},
		{"Haswell", true, false},
		{"SkylakeX", true, false},
		{"Zen", true, false},
		{"", true, false}, // unknown: trust OpenBLAS
		{"Prescott", false, false},
	} {
		if got := preferNative(tc.core, tc.nativeAVX2); got != tc.want {
			t.Errorf("preferNative(%q, %v) = %v, want %v", tc.core, tc.nativeAVX2, got, tc.want)
		}
	}
}

// On this machine: auto is OpenBLAS exactly when it loads with kernels
// for the CPU; otherwise oneDNN exactly when it loads and runs AVX-512
// kernels; otherwise Native.
func TestAutoBackend(t *testing.T) {
	b, err := Open("auto", 1)
	if err != nil {
		t.Fatal(err)
	}
	ob, oerr := OpenOpenBLAS(1)
	switch {
	case oerr != nil:
		t.Logf("no OpenBLAS (%v): auto is %s", oerr, b.Name())
	default:
		t.Logf("OpenBLAS kernels %q, native AVX2 %v: auto is %s", ob.core, nativeAsm != nil, b.Name())
	}
	d, derr := OpenOneDNN(1)
	if derr != nil {
		t.Logf("no oneDNN: %v", derr)
	}
	want := "native"
	switch {
	case oerr == nil && !preferNative(ob.core, nativeAsm != nil):
		want = "openblas"
	case derr == nil && d.avx512():
		want = "onednn"
	}
	if !strings.HasPrefix(b.Name(), want) {
		t.Errorf("auto is %s, want %s", b.Name(), want)
	}
}
