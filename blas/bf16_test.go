package blas

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mixtune/mixtune/internal/cpufeat"
)

// TestChooseBF16Dispatch overrides the detected features and what oneDNN
// reports, so every branch of the dispatch runs on any machine.
func TestChooseBF16Dispatch(t *testing.T) {
	avx512 := &OneDNN{name: "onednn avx512", isa: dnnlISAAVX512Core}
	avx2 := &OneDNN{name: "onednn avx2", isa: dnnlISAAVX2}
	missing := fmt.Errorf("load oneDNN: %w: libdnnl.so.2: cannot open shared object file", errNotInstalled)
	none := cpufeat.Features{}
	// the native kernel's choice is compared by its type; where it is
	// not built (not amd64), its cases expect ErrNoBF16Gemm
	native := BF16Gemmer(&NativeBF16{})
	bf16 := cpufeat.Features{AVX512F: true, AVX512BF16: true}
	amx := cpufeat.Features{AVX512F: true, AVX512BF16: true, AMXBF16: true, AMXPermitted: true}
	amxWithheld := cpufeat.Features{AVX512F: true, AVX512BF16: true, AMXBF16: true}
	for _, tc := range []struct {
		name    string
		be      Backend
		f       cpufeat.Features
		load    *OneDNN
		loadErr error
		want    BF16Gemmer // nil: ErrNoBF16Gemm
		units   bool
		reason  string
	}{
		{"native, no oneDNN, no avx512_bf16", Native{}, cpufeat.Features{AVX512F: true}, nil, missing, nil, false, "CPU lacks AVX512_BF16 (VDPBF16PS)"},
		{"native, no oneDNN, avx512_bf16", Native{}, bf16, nil, missing, native, true, "native VDPBF16PS kernel (AVX512_BF16); oneDNN (libdnnl) is not installed"},
		{"native, oneDNN fails to load", Native{}, cpufeat.Features{AVX512F: true}, nil, errors.New("load oneDNN from libdnnl.so.2: its TBB CPU runtime cannot be limited"), nil, false, "TBB CPU runtime"},
		{"native, oneDNN below AVX-512, avx512_bf16", Native{}, bf16, avx2, nil, native, true, "native VDPBF16PS kernel"},
		{"native, oneDNN below AVX-512", Native{}, none, avx2, nil, nil, false, "needs AVX-512"},
		{"native, oneDNN on AVX-512 without bf16 units", Native{}, cpufeat.Features{AVX512F: true}, avx512, nil, avx512, false, "emulated"},
		{"native, oneDNN on avx512_bf16", Native{}, bf16, avx512, nil, avx512, true, "VDPBF16PS"},
		{"native, oneDNN on AMX", Native{}, amx, avx512, nil, avx512, true, "AMX-BF16"},
		{"oneDNN backend is used, not loaded again", avx512, bf16, nil, missing, avx512, true, "VDPBF16PS"},
		{"oneDNN backend below AVX-512", avx2, none, avx512, nil, nil, false, "needs AVX-512"},
		{"oneDNN backend below AVX-512, avx512_bf16", avx2, bf16, avx512, nil, native, true, "native VDPBF16PS kernel"},
		{"native, no oneDNN, AMX", Native{}, amx, nil, missing, native, true, "native AMX kernel (AMX-BF16 TDPBF16PS); oneDNN (libdnnl) is not installed"},
		{"native, no oneDNN, AMX not granted", Native{}, amxWithheld, nil, missing, native, true, "native VDPBF16PS kernel"},
		{"native, no oneDNN, AMX not granted, no avx512_bf16", Native{}, cpufeat.Features{AVX512F: true, AMXBF16: true}, nil, missing, nil, false, "did not grant the AMX tile state"},
		{"native, oneDNN below AVX-512, AMX", Native{}, amx, avx2, nil, native, true, "native AMX kernel"},
	} {
		if _, ok := tc.want.(*NativeBF16); ok && !haveBF16Kernel {
			tc.want, tc.reason = nil, "amd64 assembly"
		}
		t.Run(tc.name, func(t *testing.T) {
			c, err := chooseBF16(tc.be, tc.f, func() (*OneDNN, error) {
				if tc.load == nil {
					return nil, tc.loadErr
				}
				return tc.load, nil
			})
			if tc.want == nil {
				if !errors.Is(err, ErrNoBF16Gemm) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("got %+v, %v; want ErrNoBF16Gemm saying %q", c, err, tc.reason)
				}
				return
			}
			same := c.Gemmer == tc.want
			if _, ok := tc.want.(*NativeBF16); ok {
				_, same = c.Gemmer.(*NativeBF16)
			}
			if err != nil || !same || c.Units != tc.units || !strings.Contains(c.Reason, tc.reason) {
				t.Fatalf("got %+v, %v; want %s, units %v, reason with %q", c, err, tc.want.Name(), tc.units, tc.reason)
			}
		})
	}
}

// TestBF16Candidates lists every bf16 GEMM that runs, oneDNN's first:
// where both run, auto measures both.
func TestBF16Candidates(t *testing.T) {
	avx512 := &OneDNN{name: "onednn avx512", isa: dnnlISAAVX512Core}
	missing := fmt.Errorf("load oneDNN: %w: libdnnl.so.2: cannot open shared object file", errNotInstalled)
	amx := cpufeat.Features{AVX512F: true, AVX512BF16: true, AMXBF16: true, AMXPermitted: true}
	for _, tc := range []struct {
		name    string
		f       cpufeat.Features
		load    *OneDNN
		loadErr error
		want    []string // the reasons' beginnings, in order
	}{
		{"oneDNN and the native AMX kernel", amx, avx512, nil, []string{"oneDNN's bf16 GEMM on AMX-BF16", "native AMX kernel (AMX-BF16 TDPBF16PS)"}},
		{"the native kernel alone", amx, nil, missing, []string{"native AMX kernel (AMX-BF16 TDPBF16PS); oneDNN (libdnnl) is not installed"}},
		{"oneDNN alone, no bf16 units", cpufeat.Features{AVX512F: true}, avx512, nil, []string{"oneDNN's bf16 GEMM, emulated"}},
	} {
		if !haveBF16Kernel { // no native kernel off amd64
			var keep []string
			for _, w := range tc.want {
				if !strings.HasPrefix(w, "native") {
					keep = append(keep, w)
				}
			}
			tc.want = keep
		}
		t.Run(tc.name, func(t *testing.T) {
			cs, err := bf16Candidates(Native{}, tc.f, func() (*OneDNN, error) {
				if tc.load == nil {
					return nil, tc.loadErr
				}
				return tc.load, nil
			})
			if len(tc.want) == 0 {
				if !errors.Is(err, ErrNoBF16Gemm) {
					t.Fatalf("got %+v, %v; want ErrNoBF16Gemm", cs, err)
				}
				return
			}
			if err != nil || len(cs) != len(tc.want) {
				t.Fatalf("got %d candidates (%+v), %v; want %q", len(cs), cs, err, tc.want)
			}
			for i, w := range tc.want {
				if cs[i].Reason != w && !strings.HasPrefix(cs[i].Reason, w) {
					t.Errorf("candidate %d: reason %q, want it to start %q", i, cs[i].Reason, w)
				}
			}
			if c, err := chooseBF16(Native{}, tc.f, func() (*OneDNN, error) { return tc.load, tc.loadErr }); err != nil || c.Reason != cs[0].Reason {
				t.Errorf("chooseBF16 took %q (%v), want the first candidate, %q", c.Reason, err, cs[0].Reason)
			}
		})
	}
}
